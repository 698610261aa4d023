"""Serving with the Redfish plugin loads DMTF's `redfish` package as it is: no stand-in for it in
`sys.modules` (its `__init__`, with the synchronous client, runs on import; docs/redfish.md gives
the cost)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]


def _run(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()


def test_the_plugin_loads_the_redfish_package_itself() -> None:
    code = (
        "import sys, plugins.redfish, redfish; "
        "print('redfish.aio' in sys.modules, 'redfish_client' in vars(redfish), "
        "'__getattr__' in vars(redfish), redfish.__spec__ is sys.modules['redfish'].__spec__)"
    )
    assert _run(code) == "True True False True"
