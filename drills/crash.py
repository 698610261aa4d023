"""Crash drill: the controller is SIGKILLed again and again while requests keep arriving.

Load runs throughout (senders retry until acknowledged, as a topology service would). After each
kill a new controller process starts on the same database and port; recovery must re-queue what
was journaled and unfinished, in order. At the end: nothing lost or stuck, per-device order kept,
the caps on every BMC equal to its last request's.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from drills.common import per_backend, problems_of, session_figures
from drills.load import Load
from drills.stack import Stack
from drills.verdict import verdict


@dataclass(frozen=True)
class CrashConfig:
    backends: tuple[str, ...] = ("sqlite", "postgres")
    kills: int = 20
    devices: int = 4
    #: seconds each sender waits between requests
    interval: float = 0.05
    #: the controller runs this long (uniform, seeded) under load before each kill
    up_min: float = 0.2
    up_max: float = 0.7
    drain_limit: float = 90.0
    seed: int = 9


REDUCED = CrashConfig()
FULL = CrashConfig(kills=40, devices=16, interval=0.02, up_min=0.5, up_max=3.0, drain_limit=300.0)


async def run(config: CrashConfig, workdir: Path) -> dict[str, Any]:
    async def one(backend: str, url: str, where: Path) -> list[dict[str, Any]]:
        return [await run_backend(config, backend, url, where)]

    rows = await per_backend("crash", config.backends, workdir, one)
    return {"drill": "crash", "config": asdict(config), "rows": rows}


async def run_backend(config: CrashConfig, backend: str, url: str, workdir: Path) -> dict[str, Any]:
    stack = Stack(workdir, bmcs=config.devices, database_url=url, name=f"crash-{backend}")
    rng = random.Random(config.seed)
    restarts: list[float] = []
    try:
        await stack.start()
        load = Load(stack.ctl.address, stack.devices, prefix=f"crash-{backend}", interval=config.interval)
        load.start()
        began = time.monotonic()
        try:
            for _ in range(config.kills):
                await asyncio.sleep(rng.uniform(config.up_min, config.up_max))
                stack.ctl.kill()
                restarts.append(await stack.ctl.start())
            await asyncio.sleep(config.up_max)  # traffic after the last restart too
        finally:
            await load.stop()
        loaded_s = time.monotonic() - began
        result = await verdict(stack, load.acked, database_url=url, drain_limit=config.drain_limit)
        result.update(await session_figures(stack))
    finally:
        await stack.close()
    result.update(
        backend=backend,
        kills=len(restarts),
        load_s=round(loaded_s, 1),
        restart_s_max=round(max(restarts, default=0.0), 2),
        unacked=len(load.unacked),
        refused=len(load.refused),
        client_retries=dict(load.retries),
    )
    result["problems"] = problems_of(result)
    if load.refused:
        result["problems"].append(f"{len(load.refused)} refused: {list(load.refused.values())[:2]}")
    return result
