"""`devicectl serve` and SIGTERM at start (real processes): from the moment its gRPC port takes
calls, a SIGTERM stops it gracefully (exit 0, "stopped at"), however much of the start is left.

Before, the handlers were installed only after the whole start (execution, metrics, the start-up
objects' collection): a SIGTERM sent as soon as the port accepted a connection ended the process
by the signal's default action, every time (8 of 8), and a test that stopped a freshly started
`serve` failed now and then on a loaded machine (exit -15)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.serve_process import ROOT, free_port


def test_a_sigterm_as_soon_as_the_port_takes_calls_stops_serve_gracefully(tmp_path: Path) -> None:
    for attempt in range(3):
        port = free_port()
        log = tmp_path / f"serve-{attempt}.log"
        args = [
            *(sys.executable, "-m", "controller", "serve", "--listen", f"127.0.0.1:{port}"),
            *("--database-url", f"sqlite:///{tmp_path / f'c{attempt}.db'}", "--callback", "127.0.0.1:9"),
            *("--instance-id", f"signals-{attempt}", "--auto-upgrade"),
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "DEVICECTL_RUN_DIR": str(tmp_path / "run")}
        with log.open("wb") as out:
            proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, log.read_text()[-2000:]
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, log.read_text()[-2000:]
                    time.sleep(0.005)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0, log.read_text()[-2000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert "stopped at" in log.read_text()
