"""Run the `devicectl` command line as a user does: in a pseudo-terminal of a given width, or with
its output going into a pipe, as a separate process."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


@dataclass
class Run:
    code: int
    out: str
    err: str = ""

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR")}
    env.update({"PYTHONPATH": str(ROOT), "TERM": "xterm-256color", **(extra or {})})
    return env


def pipe(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> Run:
    """stdout and stderr are pipes (a script)."""
    proc = subprocess.run(
        [sys.executable, "-m", "controller", *args],
        cwd=ROOT,
        env=_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


#: `python -m controller ARGS` as a shell at a terminal starts it: Ctrl-C (SIGINT) at its default.
#: A process started from a background job (`cmd &` in a script, as CI may run the suite) inherits
#: SIGINT *ignored*, and so does every child: Python then installs no KeyboardInterrupt, and a
#: test that presses Ctrl-C saw the command run on to its end (exit 1 where 130 was expected).
AS_FROM_A_TERMINAL = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'devicectl'; runpy.run_module('controller', run_name='__main__', alter_sys=True)"
)


def _start_tty(
    args: tuple[str, ...], columns: int, env: dict[str, str] | None
) -> tuple[subprocess.Popen[bytes], int]:
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-c", AS_FROM_A_TERMINAL, *args],
        cwd=ROOT,
        env=_env(env),
        stdin=follower,
        stdout=follower,
        stderr=follower,
        start_new_session=True,
    )
    os.close(follower)
    return proc, leader


def _drain(leader: int, proc: subprocess.Popen[bytes], deadline: float, until: str = "") -> bytes:
    """Read the terminal until the process ends (or `until` appears)."""
    import select

    data = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the process closed the terminal
                break
            if not chunk:
                break
            data += chunk
            if until and until.encode() in data:
                return data
        elif proc.poll() is not None and not until:
            # the process ended; read what is left
            while select.select([leader], [], [], 0.05)[0]:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:
                    return data
                if not chunk:
                    return data
                data += chunk
            return data
    return data


def _text(data: bytes) -> str:
    """What the terminal shows: a carriage return then "erase line" (a live status, e.g. rich's
    spinner, drawing its next frame) leaves only what follows it on that line. Without this, a
    wait long enough for a few frames read as one line wider than the terminal."""
    text = data.decode(errors="replace").replace("\r\n", "\n")
    text = "\n".join(line.rsplit("\r\x1b[2K", 1)[-1] for line in text.split("\n"))
    return _ANSI.sub("", text).replace("\r", "")


def tty(*args: str, columns: int = 80, env: dict[str, str] | None = None, timeout: float = 60) -> Run:
    """stdout and stderr are a pseudo-terminal `columns` wide (a person at a terminal)."""
    proc, leader = _start_tty(args, columns, env)
    try:
        data = _drain(leader, proc, time.monotonic() + timeout)
        code = proc.wait(timeout=timeout)
    finally:
        os.close(leader)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return Run(code, _text(data))


def tty_interrupted(*args: str, after: str, columns: int = 80, timeout: float = 60) -> Run:
    """Start in a pseudo-terminal, wait until `after` is shown, then press Ctrl-C (SIGINT to the
    foreground process, as the terminal does)."""
    proc, leader = _start_tty(args, columns, None)
    try:
        deadline = time.monotonic() + timeout
        data = _drain(leader, proc, deadline, until=after)
        assert after.encode() in data, _text(data)
        proc.send_signal(signal.SIGINT)
        data += _drain(leader, proc, deadline)
        code = proc.wait(timeout=timeout)
    finally:
        os.close(leader)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return Run(code, _text(data))


async def both(*args: str, columns: int = 80, env: dict[str, str] | None = None) -> tuple[Run, Run]:
    """The same command line in an 80-column terminal and in a pipe."""
    return (
        await asyncio.to_thread(tty, *args, columns=columns, env=env),
        await asyncio.to_thread(pipe, *args, env=env),
    )


#: one-line messages (an error, a response's summary): never broken by devicectl and never cut,
#: so that nothing of an error is lost; the terminal shows the rest on its next row
_PROSE = re.compile(r"^(error|warning|interrupted|the request would fail): |^\S+ \S+ request_id=\S+: ")


def fits(run: Run, columns: int = 80) -> None:
    """Every table line fits the terminal (cut, not wrapped) and nothing is box-drawn."""
    wide = [line for line in run.lines if len(line) > columns and not _PROSE.match(line)]
    assert not wide, "\n".join(wide)
    assert not re.search("[\u2500-\u257f]", run.out), run.out
