"""The generated protobuf code must match the .proto sources."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_generated_code_is_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, "proto/generate.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, f"stale generated code: {result.stderr}"
    assert "up to date" in result.stdout
