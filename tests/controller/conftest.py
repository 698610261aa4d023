"""Fixtures that run a real controller on a real port with a real topology sink."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest

from controller._proto.devicecontroller.v1 import admin_pb2_grpc, devicecontroller_pb2_grpc
from controller.app import Controller
from controller.config import Settings
from controller.delivery.sink import TopologySink
from controller.inventory import DeviceEntry
from tests.memory_plugin import MemoryPlugin

MEMORY = "tests.memory_plugin:MemoryPlugin"


def memory_inventory(n: int = 4, **model: Any) -> dict[str, DeviceEntry]:
    return {
        f"node{i:03d}": DeviceEntry(f"node{i:03d}", MEMORY, {"Model": "DGX_GB200", **model}) for i in range(n)
    }


class Harness:
    """A started controller plus clients for DeviceController and the admin API."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{controller.port}")
        self.stub = devicecontroller_pb2_grpc.DeviceControllerStub(self.channel)
        self.admin = admin_pb2_grpc.DeviceControllerAdminStub(self.channel)

    async def close(self) -> None:
        await self.channel.close()


@pytest.fixture
async def start_controller(
    sink: TopologySink, tmp_path: Any, request: pytest.FixtureRequest
) -> AsyncIterator[Callable[..., Awaitable[Harness]]]:
    MemoryPlugin.reset()
    started: list[Harness] = []
    db_url = f"sqlite:///{tmp_path}/devicectl.db"
    if "db_url" in request.fixturenames:
        db_url = request.getfixturevalue("db_url")

    async def start(inventory: dict[str, DeviceEntry] | None = None, **overrides: Any) -> Harness:
        settings = Settings(
            **{
                "listen": "127.0.0.1:0",
                "database_url": db_url,
                "callback": sink.address,
                "auto_upgrade": True,
                "instance_id": "test-" + uuid.uuid4().hex[:6],
                "delivery_max_backoff": 0.5,
                "shutdown_grace": 2.0,
                **overrides,
            }
        )
        controller = Controller(settings, inventory if inventory is not None else memory_inventory())
        await controller.start()
        harness = Harness(controller)
        started.append(harness)
        return harness

    yield start
    for harness in started:
        await harness.close()
        if harness.controller._server is not None:
            await harness.controller.stop(grace=1.0)
