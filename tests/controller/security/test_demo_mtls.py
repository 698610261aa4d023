"""`devicectl demo --mtls`: the whole demo over mutual TLS with roles, both directions."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_demo_runs_over_mutual_tls(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "controller", "demo", "--mtls", "--nodes", "2", "--workdir", str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "160"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "all nodes activated and restored" in out
    assert "mutual TLS" in out
    # 2 nodes x 4 steps (the node limit is read too), every response delivered with the
    # controller's client certificate
    assert "responses delivered over mutual TLS by certificate: controller (8)" in out
    assert (tmp_path / "pki" / "topology.pem").is_file()
