"""CPU seconds and resident memory of a process, read from /proc (Linux).

The controller runs as its own process, so sampling it before and after a phase gives the
controller's CPU time alone (all its threads: event loop, store writer, gRPC), and `VmHWM` gives
its peak resident set size since it started.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcSample:
    """One reading of a process's counters."""

    #: user + system CPU seconds since the process started (all threads)
    cpu_seconds: float
    #: resident set size now, bytes
    rss_bytes: int
    #: peak resident set size since the process started (VmHWM), bytes
    peak_rss_bytes: int


def sample(pid: int) -> ProcSample:
    """Read `pid`'s counters. Raises `ProcessLookupError` when the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        raise ProcessLookupError(pid) from None
    # The command name (field 2) may contain spaces and parentheses: split after its last ")".
    fields = stat.rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    memory = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            memory[key] = int(value.split()[0]) * 1024  # reported in kB
    return ProcSample(
        cpu_seconds=(utime + stime) / _TICKS,
        rss_bytes=memory.get("VmRSS", 0),
        peak_rss_bytes=memory.get("VmHWM", 0),
    )


def cpu_seconds(pids: list[int]) -> float:
    """Summed CPU seconds of several processes (those that have exited count as 0)."""
    total = 0.0
    for pid in pids:
        try:
            total += sample(pid).cpu_seconds
        except ProcessLookupError:
            pass
    return total
