"""`devicectl demo` (the README's first command) works end to end."""

import os
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
    for node in ("node001", "node002", "node003"):
        assert node in out
    # every node's GPU 0: 1200 W default before, 900 W asked and applied, 1200 W again after deactivation
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines() if "│ GPU 0 " in line]
    assert len(rows) == 3
    assert all(row[2:] == ["1200 W", "900 W", "900 W", "1200 W"] for row in rows), rows
