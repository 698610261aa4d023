"""`devicectl demo --agent`: the demo with the controller dialing out to the sink (plain and mTLS)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("mtls", [False, True], ids=["plaintext", "mtls"])
def test_demo_runs_in_agent_mode(tmp_path: Path, mtls: bool) -> None:
    args = [sys.executable, "-m", "controller", "demo", "--agent", "--nodes", "2", "--workdir", str(tmp_path)]
    result = subprocess.run(
        [*args, "--mtls"] if mtls else args,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    agent_id = "controller" if mtls else "demo-agent"
    assert f"agent mode: agent {agent_id} dialed out to 127.0.0.1:" in out, out
    assert "all nodes activated and restored" in out
    assert "/metrics: 8 requests acknowledged, 8 answered" in out
    lines = [line.strip() for line in out.splitlines() if line.strip().startswith("node00")]
    assert len(lines) == 2 and all("  1200 W -> 900/850/800/750 W -> 1200 W  " in line for line in lines), out
    if mtls:  # the responses came over the agent's stream, under its certificate
        assert "responses delivered over mutual TLS by certificate: controller (8)" in out, out
