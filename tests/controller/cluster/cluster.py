"""Several real controllers (`controller.app.Controller` on real ports) sharing one PostgreSQL
database and one topology sink, with short leases so shards move within a couple of seconds."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
from sqlalchemy.engine import URL

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc
from controller.app import Controller
from controller.cluster.shards import ShardLeases
from controller.config import Settings
from controller.delivery.sink import TopologySink
from controller.inventory import DeviceEntry
from controller.store import Store
from tests.memory_plugin import MemoryPlugin

MEMORY = "tests.memory_plugin:MemoryPlugin"
#: few shards, so every shard has devices and a fair split is easy to see
SHARDS = 16
#: short leases: a lapsed lease moves within seconds (tests wait for conditions, never time them)
LEASE_TTL = 1.5


def memory_inventory(n: int = 64, **model: Any) -> dict[str, DeviceEntry]:
    return {
        f"node{i:03d}": DeviceEntry(f"node{i:03d}", MEMORY, {"Model": "DGX_GB200", **model}) for i in range(n)
    }


def cluster_settings(database_url: str, callback: str, instance_id: str, **overrides: Any) -> Settings:
    return Settings(
        **{
            "listen": "127.0.0.1:0",
            "database_url": database_url,
            "callback": callback,
            "auto_upgrade": True,
            "instance_id": instance_id,
            "lease_ttl": LEASE_TTL,
            "shard_count": SHARDS,
            "claim_interval": 0.05,
            "sweep_interval": 1.0,
            "health_interval": 0.2,
            "delivery_max_backoff": 0.5,
            "shutdown_grace": 2.0,
            **overrides,
        }
    )


class Node:
    """One started controller and a DeviceController client to it."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{controller.port}")
        self.stub = dgrpc.DeviceControllerStub(self.channel)

    @property
    def name(self) -> str:
        return self.controller.settings.instance_id

    @property
    def leases(self) -> ShardLeases:
        shards = self.controller.shards
        assert isinstance(shards, ShardLeases)
        return shards

    def held(self) -> set[int]:
        return set(self.leases.held)

    async def send(self, request: pb.DeviceControllerRequest) -> None:
        await self.stub.SendDeviceRequest(request, timeout=10)

    async def stop(self) -> None:
        await self.channel.close()
        await self.controller.stop(grace=1.0)


class Cluster:
    def __init__(self, database_url: str, sink: TopologySink) -> None:
        self.database_url = database_url
        self.sink = sink
        self.nodes: list[Node] = []
        self.inventory = memory_inventory()

    async def start(self, name: str = "", inventory: dict[str, DeviceEntry] | None = None, **kw: Any) -> Node:
        instance = name or "ctl-" + uuid.uuid4().hex[:6]
        settings = cluster_settings(self.database_url, self.sink.address, instance, **kw)
        controller = Controller(settings, inventory if inventory is not None else self.inventory)
        try:
            await controller.start()
        except BaseException:
            await controller.store.close()
            raise
        node = Node(controller)
        self.nodes.append(node)
        return node

    async def stop(self, node: Node) -> None:
        self.nodes.remove(node)
        await node.stop()

    def shard_of(self, device: str) -> int:
        return self.nodes[0].controller.shards.shard_for(device)

    def devices_in(self, shards: set[int]) -> list[str]:
        """Inventory devices whose shard is one of `shards`."""
        return [d for d in self.inventory if self.shard_of(d) in shards]


def fair(nodes: list[Node]) -> bool:
    """Every shard held by exactly one node, none above ceil(SHARDS / len(nodes))."""
    held = [n.held() for n in nodes]
    share = -(-SHARDS // len(nodes))
    union = set().union(*held)
    return union == set(range(SHARDS)) and sum(map(len, held)) == SHARDS and max(map(len, held)) <= share


async def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll `condition` until it holds; fail with `what` after `timeout` (a bound, not a timing)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.05)


def ping(device: str, request_id: str) -> pb.DeviceControllerRequest:
    return pb.DeviceControllerRequest(
        device=device, request_id=request_id, ping=pb.DeviceControllerRequest.PingRequest()
    )


@pytest.fixture
async def cluster(pg_database: URL, sink: TopologySink) -> AsyncIterator[Cluster]:
    MemoryPlugin.reset()
    c = Cluster(pg_database.render_as_string(hide_password=False), sink)
    yield c
    for node in list(c.nodes):
        await c.stop(node)


@pytest.fixture
async def store(pg_database: URL) -> AsyncIterator[Store]:
    """A migrated, started store on a fresh PostgreSQL database."""
    s = Store.from_url(pg_database.render_as_string(hide_password=False))
    s.upgrade()
    await s.start()
    yield s
    await s.close()
