"""Optional sampling profiles of the controller during measured phases (`python -m bench --profile DIR`).

Attaches `py-spy record` (not a project dependency: `pip install py-spy`) to the controller's
process for the length of a phase and writes the collapsed stacks (`<name>.txt`, loadable into
speedscope or flamegraph.pl) plus a short summary of where the samples fell (`<name>.top.txt`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

from bench.util import say


def _py_spy() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


#: py-spy samples per second (BENCH_PROFILE_RATE: more for short phases)
PROFILE_RATE = int(os.environ.get("BENCH_PROFILE_RATE", "100"))


class Profiler:
    """Profiles phases into `directory`; does nothing when `directory` is None."""

    def __init__(self, directory: Path | None, rate: int = PROFILE_RATE) -> None:
        self.directory = directory
        self.rate = rate
        self.tool = _py_spy() if directory is not None else None
        if directory is not None and self.tool is None:
            say("profiling: py-spy not found (pip install py-spy); running without profiles")

    @contextlib.asynccontextmanager
    async def attach(self, pid: int, name: str) -> AsyncIterator[None]:
        """Sample process `pid` while the block runs."""
        if self.directory is None or self.tool is None:
            yield
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        out = self.directory / f"{name}.txt"
        proc = subprocess.Popen(
            [
                *(self.tool, "record", "--pid", str(pid), "--rate", str(self.rate), "--nonblocking"),
                "--threads",  # the first frame names the thread: event loop, store writer, readers
                *("--format", "raw", "--output", str(out)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        await asyncio.sleep(0.5)  # let it attach before the phase starts
        try:
            yield
        finally:
            proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            try:
                await asyncio.to_thread(proc.wait, 60)
            except subprocess.TimeoutExpired:
                proc.kill()
            if out.exists():
                (self.directory / f"{name}.top.txt").write_text(summarize(out))
                say(f"profile of {name}: {out}")


def summarize(collapsed: Path, top: int = 40) -> str:
    """Inclusive and self sample shares per function from py-spy's collapsed stacks."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        for frame in set(frames[1:]):
            inclusive[frame] += n
        own[frames[-1]] += n
    lines = [f"{total} samples"]
    for title, counter in (("inclusive", inclusive), ("self", own)):
        lines.append(f"\n{title}:")
        lines += [f"{100 * v / max(total, 1):6.1f}%  {k}" for k, v in counter.most_common(top)]
    return "\n".join(lines) + "\n"
