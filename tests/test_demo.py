"""`devicectl demo` (the README's first command) works end to end."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_demo_activates_and_restores_a_small_fleet(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "controller", "demo", "--nodes", "3", "--workdir", str(tmp_path)],
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
    assert "Redfish sessions left open on the BMCs after shutdown: 0" in out
    # the sourced GB200 mockup whose GPUs offer a limit (bmcsim/mockups, each resource's source in
    # its SOURCES.md), not a hand-written model
    assert "(mockup gb200-nvl-gpu-caps, from NVIDIA's sources)" in out, out
    # one line per node (issue 13): GPUs 1200 W by default, the caps applied, 1200 W again after
    # deactivation; the node cap refused (the tray offers no node limit), never shown as an error
    lines = [line.strip() for line in out.splitlines() if line.strip().startswith("node00")]
    assert len(lines) == 3, out
    for line in lines:  # plain columns: node, GPUs, node limit
        assert "  1200 W -> 900/850/800/750 W -> 1200 W  " in line, line
        assert line.endswith("  no limit offered -> refused -> no limit offered"), line
        assert "failed" not in line
    # the BMCs' own write log: the GPU caps and their restores, nothing for the refused node cap
    assert "BMC write log: 24 writes, 24 to the GPUs' EnvironmentMetrics, 0 elsewhere" in out, out
    assert "refused where the BMCs offer no limit, nothing written: node" in out
    assert re.search(r"^metrics on http://127\.0\.0\.1:\d+/metrics", out, re.M), out
    # std_metrics, raw_metrics, activate, deactivate: 4 requests per node, read back from /metrics
    assert re.search(r"/metrics: 12 requests acknowledged, 12 answered", out), out
