"""Agent identity under mutual TLS, and explicit flow control (queue_full) honoured by the sink."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import grpc
import pytest

from controller import translate
from controller._proto.devicecontroller.v1 import agent_pb2 as apb
from controller._proto.devicecontroller.v1 import agent_pb2_grpc as agrpc
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc
from controller.app import Controller
from controller.delivery.agent import PROTOCOL_VERSION
from controller.delivery.sink import TopologySink
from controller.security import certs
from controller.security.tls import ClientTls, ServerTls, client_channel
from tests.controller.delivery.conftest import (
    assert_exactly_once_in_order,
    ping,
    send_until_acked,
    until,
    wait_connected,
)

StartAgent = Callable[..., Awaitable[Controller]]


@pytest.fixture
def pki(tmp_path: Path) -> certs.CertSet:
    return certs.init(tmp_path / "pki", ("rack-a", "rack-b", "topology"))


@pytest.fixture
async def mtls_sink(pki: certs.CertSet) -> AsyncIterator[TopologySink]:
    sink = TopologySink("127.0.0.1:0", tls=ServerTls(str(pki.server_cert), str(pki.server_key), str(pki.ca)))
    await sink.start()
    yield sink
    await sink.stop()


def client(pki: certs.CertSet, name: str) -> ClientTls:
    cert, key = pki.clients[name]
    return ClientTls(ca_cert=str(pki.ca), cert=str(cert), key=str(key))


async def handshake(sink: TopologySink, tls: ClientTls, agent_id: str) -> apb.ServerMessage:
    """Open a stream as `tls`'s certificate and claim `agent_id`; the server's first answer."""
    hello = apb.AgentMessage(
        handshake=apb.Handshake(agent_id=agent_id, protocol_version=PROTOCOL_VERSION, devices=["node000"])
    )

    async def messages() -> AsyncIterator[apb.AgentMessage]:
        yield hello
        await asyncio.sleep(30)  # keep our side open; the server answers or closes

    async with client_channel(sink.address, tls, what="sink") as channel:
        call = agrpc.AgentServiceStub(channel).Connect(messages())
        first = await asyncio.wait_for(call.read(), 10)
        call.cancel()
    assert first is not grpc.aio.EOF
    return first


async def test_mtls_agent_identity_is_its_certificate(
    mtls_sink: TopologySink, pki: certs.CertSet, start_agent: StartAgent
) -> None:
    rack_a_cert, rack_a_key = pki.clients["rack-a"]
    await start_agent(
        mtls_sink.address,
        agent_id="",
        callback_ca_cert=str(pki.ca),
        callback_cert=str(rack_a_cert),
        callback_key=str(rack_a_key),
    )
    await wait_connected(mtls_sink, "rack-a")
    tls = client(pki, "topology")
    async with client_channel(mtls_sink.address, tls, what="sink") as channel:
        await dgrpc.DeviceControllerStub(channel).SendDeviceRequest(ping("node001", "m-1"), timeout=10)
    await mtls_sink.wait_for({"m-1"}, timeout=20)
    assert mtls_sink.peers["rack-a"] == 1  # recorded as delivered by that agent


async def test_a_handshake_with_another_identity_is_refused(
    mtls_sink: TopologySink, pki: certs.CertSet
) -> None:
    refused = await handshake(mtls_sink, client(pki, "rack-b"), "rack-a")
    assert refused.WhichOneof("message") == "error"
    assert refused.error.code == "invalid_handshake"
    assert "rack-a" not in mtls_sink.agents.agents  # nothing registered, nothing routable
    accepted = await handshake(mtls_sink, client(pki, "rack-b"), "rack-b")
    assert accepted.WhichOneof("message") == "accepted"


async def test_an_agent_whose_id_differs_from_its_certificate_does_not_start(
    pki: certs.CertSet, tmp_path: Path
) -> None:
    from tests.controller.delivery.conftest import agent_settings

    cert, key = pki.clients["rack-b"]
    settings = agent_settings(
        tmp_path,
        "127.0.0.1:1",
        agent_id="rack-a",
        callback_ca_cert=str(pki.ca),
        callback_cert=str(cert),
        callback_key=str(key),
    )
    with pytest.raises(ValueError, match="differs from the client certificate"):
        Controller(settings, {})


async def test_unsupported_protocol_version_is_refused(sink: TopologySink) -> None:
    async def messages() -> AsyncIterator[apb.AgentMessage]:
        yield apb.AgentMessage(handshake=apb.Handshake(agent_id="rack-z", protocol_version=99))
        await asyncio.sleep(30)

    async with grpc.aio.insecure_channel(sink.address) as channel:
        call = agrpc.AgentServiceStub(channel).Connect(messages())
        first = await asyncio.wait_for(call.read(), 10)
        call.cancel()
    assert first is not grpc.aio.EOF and first.error.code == "version_unsupported"


async def test_queue_full_is_honoured(sink: TopologySink, start_agent: StartAgent) -> None:
    agent = await start_agent(sink.address, n=1, model={"delay": 0.3}, queue_limit=2)
    await wait_connected(sink)
    refused: list[str] = []
    accepted: list[str] = []
    async with grpc.aio.insecure_channel(sink.address) as channel:
        stub = dgrpc.DeviceControllerStub(channel)
        for i in range(8):
            request_id = f"q-{i}"
            try:
                await stub.SendDeviceRequest(ping("node000", request_id), timeout=10)
                accepted.append(request_id)
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc
                assert "queue_full" in (exc.details() or "")
                refused.append(request_id)
    assert refused, "a lane of 2 behind a 0.3 s device must fill"
    # refused requests were never journaled (nothing to answer), accepted ones all were
    for request_id in refused:
        assert await agent.store.get_request(request_id) is None
    # the caller retries what was refused; everything is answered exactly once, in order
    for request_id in refused:
        await send_until_acked(sink.address, ping("node000", request_id), timeout=30)
    await sink.wait_for(8, timeout=30)
    order = [r.request_id for r in sink.responses]
    assert_exactly_once_in_order(sink, {"node000": order})
    assert order[: len(accepted)] == accepted
    # nothing was answered with the lane-overflow error: queue_full kept it from happening
    await until(lambda: len(sink.responses) == 8, 5, "all responses")
    assert all(translate.success_of(r) == (True, "") for r in sink.responses), sink.responses


def test_a_claimed_agent_id_beyond_loopback_is_refused_in_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[3]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "controller",
            "agent",
            "--agent-server",
            "192.0.2.10:7000",
            "--agent-id",
            "rack-a",
            "--database-url",
            f"sqlite:///{tmp_path}/a.db",
            "--auto-upgrade",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "must come from a client certificate" in lines[0], result.stderr
