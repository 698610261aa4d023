"""A front server's process as the fronts run it (`apache_front`, `nginx_front`): started, waited
for until it listens, stopped."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path


def wait_until_listening(process: subprocess.Popen[bytes], port: int, error_log: Path, name: str) -> None:
    """Return once 127.0.0.1:`port` accepts a connection; if `process` exits first or 10 s pass, stop
    it and fail with the end of its `error_log`."""
    deadline = time.monotonic() + 10.0
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                stop_process(process)
                errors = error_log.read_text() if error_log.exists() else ""
                raise AssertionError(f"{name} did not start: {errors[-2000:]}") from None
            time.sleep(0.05)


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """Terminate `process` (killed after 5 s) and close its stderr pipe, if any."""
    process.terminate()
    try:
        process.wait(5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if process.stderr is not None:
        process.stderr.close()
