"""Soak drill: a steady load for a while; the controller's memory and open descriptors stay flat.

RSS and the number of open file descriptors are sampled after a warm-up (caches, connection pools
and the journal's first pages fill in the first seconds) and at the end of the load; the growth must
stay within the stated tolerance. Intermediate samples go in the JSON result.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import procstats
from drills.common import backend_database, problems_of, session_figures
from drills.load import Load
from drills.stack import Stack
from drills.verdict import verdict


@dataclass(frozen=True)
class SoakConfig:
    backend: str = "sqlite"
    devices: int = 8
    interval: float = 0.05
    warmup: float = 5.0
    duration: float = 20.0
    sample_every: float = 5.0
    #: allowed growth from the first to the last sample: RSS (MiB, or percent, whichever is larger)
    rss_tolerance_mib: float = 16.0
    rss_tolerance_pct: float = 10.0
    fd_tolerance: int = 8
    drain_limit: float = 60.0


REDUCED = SoakConfig()
FULL = SoakConfig(devices=32, interval=0.05, warmup=30.0, duration=600.0, sample_every=30.0)


def _sample(pid: int) -> dict[str, float]:
    return {
        "rss_mib": round(procstats.sample(pid).rss_bytes / 2**20, 1),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
    }


async def run(config: SoakConfig, workdir: Path) -> dict[str, Any]:
    with backend_database(config.backend, workdir) as url:
        if url is None:
            return {
                "drill": "soak",
                "config": asdict(config),
                "rows": [],
                "skipped": "PostgreSQL unreachable",
            }
        stack = Stack(workdir / "soak", bmcs=config.devices, database_url=url, name="soak")
        samples: list[dict[str, float]] = []
        try:
            await stack.start()
            load = Load(stack.ctl.address, stack.devices, prefix="soak", interval=config.interval)
            load.start()
            try:
                await asyncio.sleep(config.warmup)
                began = time.monotonic()
                while True:
                    samples.append({"t_s": round(time.monotonic() - began, 1), **_sample(stack.ctl.pid)})
                    left = config.duration - (time.monotonic() - began)
                    if left <= 0:
                        break
                    await asyncio.sleep(min(config.sample_every, left))
            finally:
                await load.stop()
            result = await verdict(stack, load.acked, database_url=url, drain_limit=config.drain_limit)
            result.update(await session_figures(stack))
        finally:
            await stack.close()
    start, end = samples[0], samples[-1]
    rss_allowed = max(config.rss_tolerance_mib, start["rss_mib"] * config.rss_tolerance_pct / 100)
    result.update(
        backend=config.backend,
        duration_s=config.duration,
        rate_per_s=round(len(load.acked) / (config.warmup + config.duration), 1),
        rss_start_mib=start["rss_mib"],
        rss_end_mib=end["rss_mib"],
        fds_start=start["fds"],
        fds_end=end["fds"],
        rss_allowed_growth_mib=round(rss_allowed, 1),
        samples=samples,
    )
    problems = problems_of(result)
    if end["rss_mib"] - start["rss_mib"] > rss_allowed:
        problems.append(f"RSS grew {start['rss_mib']} -> {end['rss_mib']} MiB (allowed +{rss_allowed:.1f})")
    if end["fds"] - start["fds"] > config.fd_tolerance:
        problems.append(
            f"open descriptors grew {start['fds']} -> {end['fds']} (allowed +{config.fd_tolerance})"
        )
    result["problems"] = problems
    return {"drill": "soak", "config": asdict(config), "rows": [result]}
