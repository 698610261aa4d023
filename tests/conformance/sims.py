"""Simulated BMCs for DMTF's validators: one `bmc-sim` process (one BMC) per model and profile."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from bmcsim import DEFAULT_PASSWORD, MODELS
from bmcsim.capture import CaptureOptions, capture

#: every model, plus the bmcweb behaviour profile (on gb200, the platform it models)
TARGETS: dict[str, tuple[str, str]] = {m: (m, "default") for m in MODELS} | {"bmcweb": ("gb200", "bmcweb")}
#: plus a replay of a gb200 capture (`bmc-sim --model capture:DIR`), made by `capture_gb200`
CAPTURE = "capture"
_READY_WAIT = 30.0


def start(
    name: str, cert_dir: Path, work: Path, model: str | None = None
) -> tuple[subprocess.Popen[bytes], Path]:
    """Start the simulator for a target (or `model`); returns the process and its ready file."""
    model, profile = (model, "default") if model else TARGETS[name]
    ready = work / f"{name}.ready.json"
    ready.unlink(missing_ok=True)  # a former run's file would name a port nobody listens on
    log = (work / f"{name}.sim.log").open("wb")
    cmd = [sys.executable, "-m", "bmcsim", "--count", "1", "--model", model]
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


def capture_gb200(url: str, cert_dir: Path, work: Path) -> str:
    """Capture the gb200 BMC at `url` into `work`; the model string that replays it."""
    out = work / "gb200-capture"
    ctx = ssl.create_default_context(cafile=str(cert_dir / "ca.pem"))
    options = CaptureOptions(rate=1000.0)
    asyncio.run(capture(url, "admin", DEFAULT_PASSWORD, out, ssl_context=ctx, options=options))
    return f"capture:{out}"
