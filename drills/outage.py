"""Topology outage drill: the receiver of responses goes away for a while, then comes back.

Requests keep arriving during the outage; their responses pile up in the outbox. The figure is the
drain time: from the moment the sink listens again to the last backlog response received. Each
device's responses must still arrive once and in order.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from drills.common import per_backend, problems_of
from drills.load import Load
from drills.stack import Stack
from drills.verdict import verdict


@dataclass(frozen=True)
class OutageConfig:
    backends: tuple[str, ...] = ("sqlite",)
    devices: int = 4
    interval: float = 0.05
    #: load before the outage, the outage itself
    before: float = 1.0
    outage: float = 3.0
    drain_limit: float = 120.0
    #: no-op devices instead of BMC simulators: the controller completes requests at its own pace
    #: (no caps to check), so a 60 s outage builds the backlog the drain figure is about
    noop: bool = False
    #: a smaller backlog is reported as a problem: the drain figure would not be the drill's
    min_backlog: int = 0
    #: the drill's targets, each reported as a problem when missed (None: reported only)
    max_first_after_s: float | None = None
    min_drain_per_s: float | None = None


REDUCED = OutageConfig()
#: the size CI runs (tests/drills): a backlog of several hundred responses over 8 devices. The
#: drain limit is for a slow, busy host (the test asserts nothing lost, stuck or out of order; the
#: pace is reported)
CI = OutageConfig(devices=8, interval=0.02, before=1.0, outage=8.0, drain_limit=120.0)
#: issue 24's size: 8,000-12,000 backlog responses after 60 s. Through Redfish simulators this
#: 2-core machine completed 80-100 requests/s (backlogs of 4,781-6,034); the drill measures the
#: drain, so its devices are no-ops, paced to about 200 requests/s (32 senders back to back built
#: 27,000-48,000, a different drill)
FULL = OutageConfig(
    backends=("sqlite", "postgres"),
    devices=20,
    interval=0.1,
    before=5.0,
    outage=60.0,
    noop=True,
    min_backlog=8000,
    max_first_after_s=1.0,
    min_drain_per_s=500.0,
)


async def run(config: OutageConfig, workdir: Path) -> dict[str, Any]:
    async def one(backend: str, url: str, where: Path) -> list[dict[str, Any]]:
        return [await run_backend(config, backend, url, where)]

    rows = await per_backend("outage", config.backends, workdir, one)
    return {"drill": "outage", "config": asdict(config), "rows": rows}


async def run_backend(config: OutageConfig, backend: str, url: str, workdir: Path) -> dict[str, Any]:
    stack = Stack(workdir, bmcs=config.devices, database_url=url, name=f"outage-{backend}", noop=config.noop)
    try:
        await stack.start()
        load = Load(stack.ctl.address, stack.devices, prefix=f"outage-{backend}", interval=config.interval)
        load.start()
        try:
            await asyncio.sleep(config.before)
            await stack.sink.stop()
            down_at = time.monotonic()
            await asyncio.sleep(config.outage)
        finally:
            await load.stop()
        during = [s for s in load.acked if s.acked_at >= down_at]
        stack.sink.poll()
        backlog = len({s.request_id for s in load.acked} - set(stack.sink.first()))
        await stack.sink.start()
        back_at = stack.sink.listening_at  # start() returns 0.5 s later; responses arrive meanwhile
        result = await verdict(
            stack,
            load.acked,
            database_url=url,
            drain_limit=config.drain_limit,
            since=back_at,
            check_caps=not config.noop,
        )
        got = stack.sink.first()
        after = [got[s.request_id].seen_at - back_at for s in load.acked if s.request_id in got]
        after = [t for t in after if t >= 0]
    finally:
        await stack.close()
    result.update(
        backend=backend,
        outage_s=config.outage,
        acked_during_outage=len(during),
        backlog=backlog,
        first_after_s=round(min(after), 2) if after else None,
        drain_per_s=round(backlog / result["drain_s"]) if backlog and result["drain_s"] else None,
    )
    result["problems"] = problems_of(result) + missed_targets(config, result)
    return result


def missed_targets(config: OutageConfig, result: dict[str, Any]) -> list[str]:
    """The drill's targets a run missed: the backlog it must build, the first response after the
    receiver returns, the drain rate (each checked only where the config sets it)."""
    missed = []
    backlog, first, rate = result["backlog"], result["first_after_s"], result["drain_per_s"]
    if backlog < config.min_backlog:
        missed.append(f"a backlog of {backlog}, below the drill's {config.min_backlog}")
    if config.max_first_after_s is not None and (first is None or first > config.max_first_after_s):
        missed.append(
            f"the first response {first} s after the receiver returned "
            f"(target ≤ {config.max_first_after_s:g} s)"
        )
    if config.min_drain_per_s is not None and (rate is None or rate < config.min_drain_per_s):
        missed.append(f"drained at {rate} responses/s (target ≥ {config.min_drain_per_s:g}/s)")
    return missed
