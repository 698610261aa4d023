"""The controller's assembly imports the metrics endpoint (aiohttp.web) only when it serves it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_app_loads_without_aiohttp_web() -> None:
    code = (
        "import sys, controller.app; "
        "print('aiohttp.web' in sys.modules, 'controller.observability.endpoint' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert out == ["False", "False"]
