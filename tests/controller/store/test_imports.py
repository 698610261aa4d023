"""The store loads Alembic without `pygments` (Mako's error highlighting), and leaves it importable."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_alembic_is_loaded_without_pygments_which_stays_importable() -> None:
    code = (
        "import sys, controller.store; "
        "m = sys.modules; print('alembic.command' in m, 'mako.exceptions' in m, 'pygments' in m); "
        "import pygments; print(pygments.__name__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert out == ["True", "True", "False", "pygments"]
