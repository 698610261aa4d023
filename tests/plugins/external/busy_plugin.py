"""Misbehaving plugins for supervision tests: `ping` hogs the event loop (CPU-bound work), so health
checks are answered late though the plugin is alive; `std_metrics` lets a cancellation escape;
`set_policy` ends in a shielded "restore" that goes on for a while after its caller gave up (as a write
cycle's restore does), noting when each call starts and ends in the file the model's `events` names."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from plugins.base import (
    AllocationResult,
    DeviceContext,
    DevicePlugin,
    Empty,
    Outcome,
    Ping,
    PingResult,
    PluginInfo,
    PolicyChange,
    StdMetricsResult,
    uncancelled,
)


class BusyPlugin(DevicePlugin):
    info = PluginInfo(name="busy", version="1.0", vendor="tests")

    async def ping(self, ctx: DeviceContext, req: Ping) -> Outcome[PingResult]:
        # the point: a busy loop, as under a large fan-out; device "hog" blocks past gRPC's 30 s limit
        time.sleep(31.0 if ctx.device_id == "hog" else 0.3)  # noqa: ASYNC251
        return Outcome(PingResult(ok=True))

    async def std_metrics(self, ctx: DeviceContext, req: Empty) -> Outcome[StdMetricsResult]:
        raise asyncio.CancelledError  # e.g. a library's internal timeout leaking its cancellation

    async def set_policy(self, ctx: DeviceContext, req: PolicyChange) -> Outcome[AllocationResult]:
        events = Path(str(ctx.model["events"]))
        _note(events, f"start {ctx.request_id}")
        await uncancelled(self._restore(events, ctx.request_id))
        return Outcome(AllocationResult(ok=True))

    @staticmethod
    async def _restore(events: Path, request_id: str) -> None:
        await asyncio.sleep(1.5)
        _note(events, f"end {request_id}")


def _note(events: Path, line: str) -> None:
    with events.open("a") as fh:
        fh.write(line + "\n")
