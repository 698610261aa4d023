"""Simulated BMCs for DMTF's validators: one `bmc-sim` process (one BMC) per model and profile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from plugins.redfish.simulator import MODELS

#: every model, plus the bmcweb behaviour profile (on gb200, the platform it models)
TARGETS: dict[str, tuple[str, str]] = {m: (m, "default") for m in MODELS} | {"bmcweb": ("gb200", "bmcweb")}
_READY_WAIT = 30.0


def start(name: str, cert_dir: Path, work: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """Start the simulator for a target; returns the process and its ready file."""
    model, profile = TARGETS[name]
    ready = work / f"{name}.ready.json"
    log = (work / f"{name}.sim.log").open("wb")
    cmd = [sys.executable, "-m", "plugins.redfish.simulator", "--count", "1", "--model", model]
    cmd += [
        "--profile",
        profile,
        "--cert-dir",
        str(cert_dir),
        "--ready-file",
        str(ready),
        "--log-level",
        "WARNING",
    ]
    # the built-in simulator password (an empty variable does not override it)
    env = {**os.environ, "BMC_SIM_PASSWORD": ""}
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), ready


def wait_ready(proc: subprocess.Popen[bytes], ready: Path) -> str:
    """The BMC's URL once its simulator serves."""
    deadline = time.monotonic() + _READY_WAIT
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"bmc-sim did not start (log: {ready.parent})")
        time.sleep(0.1)
    return str(json.loads(ready.read_text())["urls"][0])


def stop(procs: Iterable[subprocess.Popen[bytes]]) -> None:
    """Terminate processes still running (killed after a grace)."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
