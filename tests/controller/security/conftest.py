"""Fixtures for the security tests: a test CA (and a rogue one), a controller serving mutual TLS
with roles, and a topology sink that accepts only the controller's client certificate."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.app import Controller
from controller.config import Settings
from controller.delivery.sink import TopologySink
from controller.security import certs
from controller.security.tls import ClientTls, ServerTls, client_channel
from tests.controller.conftest import memory_inventory
from tests.memory_plugin import MemoryPlugin

ROLES = "topology=topology,operator=operator,admin=admin"


def ping(device: str, request_id: str) -> pb.DeviceControllerRequest:
    return pb.DeviceControllerRequest(
        device=device, request_id=request_id, ping=pb.DeviceControllerRequest.PingRequest(retry_count=1)
    )


@dataclass
class Pki:
    ours: certs.CertSet
    rogue: certs.CertSet  # another CA, with a client certificate that also says CN=admin

    def client(self, name: str | None, *, rogue: bool = False) -> ClientTls:
        pki = self.rogue if rogue else self.ours
        if name is None:
            return ClientTls(ca_cert=str(self.ours.ca))
        cert, key = pki.clients[name]
        return ClientTls(ca_cert=str(self.ours.ca), cert=str(cert), key=str(key))


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ours = certs.init(tmp_path / "pki", ("topology", "operator", "admin", "nobody", "controller"))
    return Pki(ours, certs.init(tmp_path / "rogue", ("admin",)))


@pytest.fixture
async def mtls_sink(pki: Pki) -> AsyncIterator[TopologySink]:
    tls = ServerTls(str(pki.ours.server_cert), str(pki.ours.server_key), str(pki.ours.ca))
    sink = TopologySink("127.0.0.1:0", tls=tls)
    await sink.start()
    yield sink
    await sink.stop()


def mtls_settings(pki: Pki, tmp_path: Path, callback: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "listen": "127.0.0.1:0",
        "database_url": f"sqlite:///{tmp_path}/devicectl.db",
        "callback": callback,
        "auto_upgrade": True,
        "instance_id": "sec-" + uuid.uuid4().hex[:6],
        "delivery_max_backoff": 0.5,
        "shutdown_grace": 2.0,
        "tls_cert": str(pki.ours.server_cert),
        "tls_key": str(pki.ours.server_key),
        "tls_client_ca": str(pki.ours.ca),
        "roles": ROLES,
        "callback_ca_cert": str(pki.ours.ca),
        "callback_cert": str(pki.ours.clients["controller"][0]),
        "callback_key": str(pki.ours.clients["controller"][1]),
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
async def start_secure(
    pki: Pki, mtls_sink: TopologySink, tmp_path: Path
) -> AsyncIterator[Callable[..., Awaitable[Controller]]]:
    MemoryPlugin.reset()
    started: list[Controller] = []

    async def start(**overrides: Any) -> Controller:
        controller = Controller(
            mtls_settings(pki, tmp_path, mtls_sink.address, **overrides), memory_inventory(2)
        )
        await controller.start()
        started.append(controller)
        return controller

    yield start
    for controller in started:
        await controller.stop()


@pytest.fixture
async def channel_to(
    start_secure: Any,
) -> AsyncIterator[Callable[[Controller, ClientTls], grpc.aio.Channel]]:
    opened: list[grpc.aio.Channel] = []

    def open_channel(controller: Controller, tls: ClientTls) -> grpc.aio.Channel:
        channel = client_channel(f"127.0.0.1:{controller.port}", tls)
        opened.append(channel)
        return channel

    yield open_channel
    for channel in opened:
        await channel.close()
