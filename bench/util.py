"""Shared helpers: progress lines, percentiles, the child-process environment, the machine."""

from __future__ import annotations

import math
import os
import platform
import resource
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: the repository root (the controller is started from here, with it on PYTHONPATH)
ROOT = Path(__file__).resolve().parents[1]

_START = time.monotonic()


def say(message: str) -> None:
    """Print one progress line, prefixed with the seconds since the benchmark started."""
    print(f"[{time.monotonic() - _START:7.1f}s] {message}", flush=True)


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0..100) by the nearest-rank method; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return float(ordered[min(rank, len(ordered)) - 1])


def child_env(**extra: str) -> dict[str, str]:
    """The environment for child processes: the repository root on PYTHONPATH (so that
    `bench.noop_plugin:NoopPlugin` imports in the controller), unbuffered output."""
    env = dict(os.environ)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + path if path else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return 0.0


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.system()


def machine() -> dict[str, Any]:
    """A description of this machine, for the report."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return {
        "cores": os.cpu_count() or 0,
        "cpu": _cpu_model(),
        "memory_gib": round(_memory_gib(), 1),
        "python": sys.version.split()[0],
        "os": f"{_os_name()}, Linux {platform.release()}",
        "sqlite": sqlite3.sqlite_version,
        "fd_limit": f"{soft}/{hard}",
        "commit": _commit(),
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def _commit() -> str:
    """The checkout's commit, with "+ local changes" when its tracked files differ from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        # the files a run writes itself are not changes to the code it measured
        ours = [f":!{name}" for name in ("BENCHMARKS.md", "bench/results.json", "bench/fanout.png")]
        diff = ["git", "diff", "--quiet", "HEAD", "--", ".", *ours]
        dirty = subprocess.run(diff, cwd=ROOT, check=False).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return f"{head} + local changes" if dirty else head


def jsonable(value: Any) -> Any:
    """`value` with paths as strings and tuples as lists, so that `json.dump` takes it."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value
