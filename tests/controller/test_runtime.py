"""Process tuning for `devicectl serve` (in a child process: it changes process-wide settings)."""

from __future__ import annotations

import json
import subprocess
import sys

from controller import runtime

PROBE = """
import asyncio.sslproto, gc, json
from controller import runtime
before = {"gc": gc.get_threshold(), "tls": asyncio.sslproto.SSLProtocol.max_size}
runtime.tune_process()
runtime.freeze_startup_objects()
after = {"gc": gc.get_threshold(), "tls": asyncio.sslproto.SSLProtocol.max_size,
         "frozen": gc.get_freeze_count()}
print(json.dumps({"before": before, "after": after}))
"""


def test_tune_process_sets_gc_thresholds_tls_buffer_and_freezes_startup_objects() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    result = json.loads(out)
    assert result["before"]["gc"] != list(runtime.GC_THRESHOLDS)
    assert result["before"]["tls"] == 256 * 1024
    assert result["after"]["gc"] == list(runtime.GC_THRESHOLDS)
    assert result["after"]["tls"] == runtime.TLS_READ_BUFFER
    assert result["after"]["frozen"] > 1000  # the imported modules' objects at least
