"""Serving with the Redfish plugin loads `redfish.aio` without the DMTF synchronous client."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]


def _run(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()


def test_the_plugin_loads_without_requests_and_the_sync_client_still_loads_on_use() -> None:
    code = (
        "import sys, plugins.redfish; "
        "print('redfish.aio' in sys.modules, 'requests' in sys.modules, 'urllib3' in sys.modules); "
        "import redfish; print(callable(redfish.redfish_client), 'requests' in sys.modules)"
    )
    assert _run(code).splitlines() == ["True False False", "True True"]
    assert _run("import plugins.redfish; from redfish import AuthMethod, rest; print(AuthMethod.SESSION)")
