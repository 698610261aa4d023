"""Fixtures for agent mode: a topology sink serving the agent side, and controllers that dial it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc
from controller.app import Controller
from controller.config import Settings
from controller.delivery.sink import TopologySink
from tests.controller.conftest import memory_inventory
from tests.memory_plugin import MemoryPlugin


def ping(device: str, request_id: str) -> pb.DeviceControllerRequest:
    return pb.DeviceControllerRequest(
        device=device, request_id=request_id, ping=pb.DeviceControllerRequest.PingRequest(retry_count=1)
    )


def assert_exactly_once_in_order(sink: TopologySink, sent: dict[str, list[str]]) -> None:
    """Every request answered exactly once at the sink, and each device's responses in the order
    its requests were sent."""
    assert set(sink.counts) == {r for ids in sent.values() for r in ids}
    assert all(count == 1 for count in sink.counts.values()), sink.counts
    for device, ids in sent.items():
        assert [r.request_id for r in sink.responses if r.device == device] == ids


def agent_settings(tmp_path: Path, server: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "listen": "127.0.0.1:0",
        "database_url": f"sqlite:///{tmp_path}/agent.db",
        "callback": "",
        "agent_server": server,
        "agent_id": "rack-a",
        "auto_upgrade": True,
        "instance_id": "agent-" + uuid.uuid4().hex[:6],
        "delivery_max_backoff": 0.5,
        "delivery_probe_max_interval": 0.5,
        "agent_reconnect_max": 0.5,
        "agent_ping_interval": 1.0,
        "shutdown_grace": 2.0,
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
async def start_agent(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Controller]]]:
    MemoryPlugin.reset()
    started: list[Controller] = []

    async def start(
        server: str, n: int = 4, model: dict[str, Any] | None = None, **overrides: Any
    ) -> Controller:
        inventory = memory_inventory(n, **(model or {}))
        controller = Controller(agent_settings(tmp_path, server, **overrides), inventory)
        await controller.start()
        started.append(controller)
        return controller

    yield start
    for controller in started:
        await controller.stop(grace=1.0)


async def until(check: Callable[[], Awaitable[bool] | bool], timeout: float, what: str) -> None:
    """Bounded wait for an event (not a timing assertion)."""
    try:
        async with asyncio.timeout(timeout):
            while True:
                result = check()
                if await result if isinstance(result, Awaitable) else result:
                    return
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"not within {timeout} s: {what}") from None


async def wait_connected(sink: TopologySink, agent_id: str = "rack-a", timeout: float = 10.0) -> None:
    agents = sink.agents.agents
    await until(lambda: agent_id in agents and agents[agent_id].connected, timeout, f"{agent_id} connected")


async def all_delivered(controller: Controller, timeout: float = 10.0) -> None:
    async def none_left() -> bool:
        return await controller.store.undelivered_count() == 0

    await until(none_left, timeout, "every response acknowledged by the server")


async def send_until_acked(address: str, request: pb.DeviceControllerRequest, timeout: float = 20.0) -> None:
    """Send through the sink (routed to the owning agent), retrying what a caller retries:
    UNAVAILABLE (agent away) and RESOURCE_EXHAUSTED (queue_full); the same request_id each time."""
    async with grpc.aio.insecure_channel(address) as channel, asyncio.timeout(timeout):
        stub = dgrpc.DeviceControllerStub(channel)
        while True:
            try:
                await stub.SendDeviceRequest(request, timeout=5.0)
                return
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED):
                    raise
                await asyncio.sleep(0.05)
