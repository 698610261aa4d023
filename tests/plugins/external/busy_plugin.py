"""A plugin whose calls hog its event loop (CPU-bound work): slow to answer health checks, but alive."""

from __future__ import annotations

import time

from plugins.base import DeviceContext, DevicePlugin, Outcome, Ping, PingResult, PluginInfo


class BusyPlugin(DevicePlugin):
    info = PluginInfo(name="busy", version="1.0", vendor="tests")

    async def ping(self, ctx: DeviceContext, req: Ping) -> Outcome[PingResult]:
        time.sleep(0.3)  # noqa: ASYNC251 - the point: a busy loop, as under a large fan-out
        return Outcome(PingResult(ok=True))
