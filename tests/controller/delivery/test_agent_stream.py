"""Agent mode over a real stream: requests routed by the sink to the agent that owns the device,
journaled before the stream ack, answered exactly once in per-device order through drops,
restarts and outages of the server side."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import pytest
from google.protobuf import empty_pb2

from controller._proto.devicecontroller.v1 import admin_pb2_grpc
from controller._proto.devicecontroller.v1 import agent_pb2 as apb
from controller._proto.devicecontroller.v1 import agent_pb2_grpc as agrpc
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc
from controller.app import Controller
from controller.delivery.agent import PROTOCOL_VERSION
from controller.delivery.sink import TopologySink
from tests.controller.delivery.conftest import (
    all_delivered,
    assert_exactly_once_in_order,
    ping,
    send_until_acked,
    until,
    wait_connected,
)

StartAgent = Callable[..., Awaitable[Controller]]


async def send_many(
    sink: TopologySink, devices: list[str], per_device: int, tag: str
) -> dict[str, list[str]]:
    sent: dict[str, list[str]] = {d: [] for d in devices}
    for i in range(per_device):
        for device in devices:
            request_id = f"{tag}-{device}-{i:03d}"
            await send_until_acked(sink.address, ping(device, request_id))
            sent[device].append(request_id)
    return sent


async def test_requests_routed_to_the_agent_are_journaled_and_answered(
    sink: TopologySink, start_agent: StartAgent
) -> None:
    agent = await start_agent(sink.address)
    await wait_connected(sink)
    devices = ["node000", "node001", "node002", "node003"]
    assert sorted(sink.agents.agents["rack-a"].devices) == devices
    sent = await send_many(sink, devices, 5, "basic")
    # the ack means journaled: every request is in the agent's journal
    for ids in sent.values():
        for request_id in ids:
            assert await agent.store.get_request(request_id) is not None
    await sink.wait_for(20, timeout=20)
    assert_exactly_once_in_order(sink, sent)
    # delivered = acknowledged by the server on the stream
    await all_delivered(agent)
    # the admin view
    async with grpc.aio.insecure_channel(sink.address) as channel:
        listing = await agrpc.AgentAdminStub(channel).ListAgents(apb.ListAgentsRequest())
    (info,) = listing.agents
    assert (info.agent_id, info.connected, info.responses, info.duplicates) == ("rack-a", True, 20, 0)
    assert sorted(info.devices) == devices and info.last_seen_unix > 0


async def test_unknown_device_is_refused_at_the_sink(sink: TopologySink, start_agent: StartAgent) -> None:
    await start_agent(sink.address)
    await wait_connected(sink)
    async with grpc.aio.insecure_channel(sink.address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await dgrpc.DeviceControllerStub(channel).SendDeviceRequest(ping("nowhere", "r-x"), timeout=5)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "unknown_device" in (err.value.details() or "")


async def test_dropped_stream_loses_and_repeats_nothing(sink: TopologySink, start_agent: StartAgent) -> None:
    agent = await start_agent(sink.address, model={"delay": 0.05})
    await wait_connected(sink)
    devices = ["node000", "node001"]
    sent = await send_many(sink, devices, 4, "before")
    sink.agents.disconnect("rack-a")  # mid-work: responses in flight fail and are re-sent
    more = await send_many(sink, devices, 4, "after")  # retried until the agent is back
    for device in devices:
        sent[device] += more[device]
    await sink.wait_for(16, timeout=30)
    assert_exactly_once_in_order(sink, sent)
    assert agent.agent is not None and agent.agent.sessions >= 2


async def test_server_restart_and_outage(sink: TopologySink, start_agent: StartAgent) -> None:
    agent = await start_agent(sink.address, model={"delay": 0.2})
    await wait_connected(sink)
    devices = ["node000", "node001"]
    sent = await send_many(sink, devices, 3, "first")
    port = sink.port
    await sink.stop()  # responses still running have nowhere to go: they wait in the outbox
    await asyncio.sleep(2.0)  # a (reduced) outage
    second = TopologySink(f"127.0.0.1:{port}")
    second.agents.remember(set(sink.counts))  # the restarted server kept its records
    await second.start()
    try:
        await wait_connected(second)
        more = await send_many(second, devices, 3, "second")
        total = {d: sent[d] + more[d] for d in devices}
        await second.wait_for(12 - len(sink.counts), timeout=30)
        # each response reached exactly one of the two sinks, exactly once, in order per device
        both = TopologySink()
        both.responses = sink.responses + second.responses
        for response in both.responses:
            both.counts[response.request_id] += 1
        assert_exactly_once_in_order(both, total)
        await all_delivered(agent)
    finally:
        await second.stop()


async def test_both_transports_share_one_journal(sink: TopologySink, start_agent: StartAgent) -> None:
    """serve --agent-server: agent devices answer on the stream, the rest on the unary callback."""
    controller = await start_agent(sink.address, callback=sink.address, agent_devices="node000,node001")
    await wait_connected(sink)
    assert sorted(sink.agents.agents["rack-a"].devices) == ["node000", "node001"]
    await send_until_acked(sink.address, ping("node000", "via-stream"))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{controller.port}") as channel:
        await dgrpc.DeviceControllerStub(channel).SendDeviceRequest(ping("node003", "via-unary"), timeout=10)
    await sink.wait_for({"via-stream", "via-unary"}, timeout=20)
    assert sink.agents.agents["rack-a"].responses == 1  # only the stream's device came that way
    assert sink.counts == {"via-stream": 1, "via-unary": 1}
    for request_id in ("via-stream", "via-unary"):
        view = await controller.store.get_request(request_id)
        assert view is not None and view.status == "completed"
    await all_delivered(controller)


async def test_routing_file_decides_the_owner_and_refuses_strangers(start_agent: StartAgent) -> None:
    sink = TopologySink("127.0.0.1:0", routes={"node001": "rack-a"})
    await sink.start()
    try:
        await start_agent(sink.address)
        await wait_connected(sink)
        await send_until_acked(sink.address, ping("node001", "routed"))
        await sink.wait_for({"routed"}, timeout=20)
        async with grpc.aio.insecure_channel(sink.address) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await dgrpc.DeviceControllerStub(channel).SendDeviceRequest(ping("node000", "x"), timeout=5)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND  # not in the routing file
        # an agent the routing file does not know is refused at the handshake

        async def hello() -> AsyncIterator[apb.AgentMessage]:
            yield apb.AgentMessage(
                handshake=apb.Handshake(
                    agent_id="rack-b", protocol_version=PROTOCOL_VERSION, devices=["node000"]
                )
            )
            await asyncio.sleep(30)

        async with grpc.aio.insecure_channel(sink.address) as channel:
            call = agrpc.AgentServiceStub(channel).Connect(hello())
            first = await asyncio.wait_for(call.read(), 10)
            call.cancel()
        assert first is not grpc.aio.EOF and first.error.code == "unknown_agent"
    finally:
        await sink.stop()


async def test_graceful_stop_refuses_new_work_and_delivers_what_ran(
    sink: TopologySink, start_agent: StartAgent
) -> None:
    controller = await start_agent(sink.address, n=1, model={"delay": 1.0})
    await wait_connected(sink)
    await send_until_acked(sink.address, ping("node000", "running"))
    stopping = asyncio.create_task(controller.stop(grace=5.0))
    assert controller.agent is not None
    await until(lambda: controller.agent is not None and controller.agent.draining, 5, "draining")
    async with grpc.aio.insecure_channel(sink.address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await dgrpc.DeviceControllerStub(channel).SendDeviceRequest(ping("node000", "late"), timeout=5)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "shutting down" in (
        err.value.details() or ""
    )
    await stopping
    assert sink.counts == {"running": 1}  # finished during the grace and sent on the stream before it closed


async def test_a_silent_agent_is_dropped_and_redials(sink: TopologySink, start_agent: StartAgent) -> None:
    sink.agents.stale_after = 0.5  # the agent pings only every 30 s here: it looks half-open
    controller = await start_agent(sink.address, agent_ping_interval=30.0)
    await wait_connected(sink)
    assert controller.agent is not None
    agent = controller.agent
    await until(lambda: agent.sessions >= 2, 15, "the agent redialed after the server dropped it")
    sink.agents.stale_after = 60.0
    await wait_connected(sink)
    await send_until_acked(sink.address, ping("node000", "after-drop"))
    await sink.wait_for({"after-drop"}, timeout=20)


async def test_status_reports_the_agent_stream_while_the_server_is_away(
    sink: TopologySink, start_agent: StartAgent
) -> None:
    controller = await start_agent(sink.address, agent_reconnect_max=0.2)
    await wait_connected(sink)
    await sink.stop()  # the server goes away; the controller's loopback port still takes requests
    async with grpc.aio.insecure_channel(f"127.0.0.1:{controller.port}") as channel:
        await dgrpc.DeviceControllerStub(channel).SendDeviceRequest(ping("node000", "stranded"), timeout=10)
        admin = admin_pb2_grpc.DeviceControllerAdminStub(channel)

        async def down() -> bool:
            return not (await admin.GetStatus(empty_pb2.Empty(), timeout=5)).callback_ok

        await until(down, 15, "status shows the agent stream down")
        status = await admin.GetStatus(empty_pb2.Empty(), timeout=5)
    assert status.callback_error.startswith("UNAVAILABLE: "), status
    second = TopologySink(f"127.0.0.1:{sink.port}")
    second.agents.remember(set(sink.counts))
    await second.start()
    try:
        await second.wait_for({"stranded"}, timeout=20)  # the outbox delivered it after the outage
        await all_delivered(controller)
    finally:
        await second.stop()
