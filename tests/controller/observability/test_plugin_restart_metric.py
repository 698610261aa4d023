"""`devicectl_plugin_restarts_total` counts a real restart of an out-of-process plugin."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.plugin_host.remote import RemotePlugin
from tests.controller.observability.test_metrics import samples, value
from tests.plugins.external.conftest import (
    MEMORY,
    controller,
    device_table,
    plugin_table,
    serve_command,
)

__all__ = ["controller"]

R = pb.DeviceControllerRequest


async def test_plugin_restart_is_counted(controller, sink, tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.toml"
    inventory.write_text(plugin_table(MEMORY, serve_command(MEMORY)) + device_table("node000", MEMORY))
    h = await controller(inventory, metrics_listen="127.0.0.1:0")
    await h.stub.SendDeviceRequest(R(device="node000", request_id="k-1", ping=R.PingRequest()))
    await sink.wait_for({"k-1"}, timeout=60)
    plugin = h.controller.plugins.started()[MEMORY]
    assert isinstance(plugin, RemotePlugin) and plugin.connection is not None
    port = h.controller.metrics_server.port
    assert value(await samples(port), "devicectl_plugin_restarts_total", plugin=MEMORY) == 0
    assert plugin.connection.process is not None
    os.kill(plugin.connection.process.pid, signal.SIGKILL)

    async def restarted() -> None:
        while value(await samples(port), "devicectl_plugin_restarts_total", plugin=MEMORY) < 1:  # noqa: ASYNC110
            await asyncio.sleep(0.1)

    await asyncio.wait_for(restarted(), 60)
    assert plugin.restarts == 1
