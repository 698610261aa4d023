"""Misbehaving plugins for supervision tests: `ping` hogs the event loop (CPU-bound work), so health
checks are answered late though the plugin is alive; `std_metrics` lets a cancellation escape."""

from __future__ import annotations

import asyncio
import time

from plugins.base import (
    DeviceContext,
    DevicePlugin,
    Empty,
    Outcome,
    Ping,
    PingResult,
    PluginInfo,
    StdMetricsResult,
)


class BusyPlugin(DevicePlugin):
    info = PluginInfo(name="busy", version="1.0", vendor="tests")

    async def ping(self, ctx: DeviceContext, req: Ping) -> Outcome[PingResult]:
        # the point: a busy loop, as under a large fan-out; device "hog" blocks past gRPC's 30 s limit
        time.sleep(31.0 if ctx.device_id == "hog" else 0.3)  # noqa: ASYNC251
        return Outcome(PingResult(ok=True))

    async def std_metrics(self, ctx: DeviceContext, req: Empty) -> Outcome[StdMetricsResult]:
        raise asyncio.CancelledError  # e.g. a library's internal timeout leaking its cancellation
