"""Every ack kept without a human: database outages, failed completions, acks lost after the
commit, refused responses and topology outages, each against a real controller, a real database
(SQLite and PostgreSQL) and a real gRPC receiver."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from google.protobuf import empty_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy.engine import make_url

from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import topology_callback_pb2_grpc as cb
from controller.delivery.sink import TopologySink
from controller.store import NewRequest
from tests.controller.api.test_service import gpu_caps, ping
from tests.controller.cli.test_serve_and_send import devicectl as run_devicectl
from tests.controller.conftest import Harness, memory_inventory
from tests.faults import CompletionFault, DatabaseOutage, JournalLock
from tests.memory_plugin import MemoryPlugin

R = pb.DeviceControllerRequest


async def until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Bounded wait for an event (not a timing assertion)."""
    try:
        async with asyncio.timeout(timeout):
            while True:
                if condition():
                    return
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"not within {timeout} s: {what}") from None


async def health(h: Harness) -> int:
    reply = await health_pb2_grpc.HealthStub(h.channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    return int(reply.status)


async def wait_health(h: Harness, status: int, timeout: float) -> None:
    async with asyncio.timeout(timeout):
        while True:
            if await health(h) == status:
                return
            await asyncio.sleep(0.1)


async def send_until_acked(h: Harness, request: pb.DeviceControllerRequest, timeout: float = 30) -> None:
    """The topology service's retry: UNAVAILABLE means the journal could not commit yet."""
    async with asyncio.timeout(timeout):
        while True:
            try:
                await h.stub.SendDeviceRequest(request, timeout=15)
                return
            except grpc.aio.AioRpcError as exc:
                if exc.code() is not grpc.StatusCode.UNAVAILABLE:
                    raise
                await asyncio.sleep(0.2)


def devicectl(*args: str) -> str:
    return run_devicectl(*args, timeout=60).stdout


def logged(caplog: pytest.LogCaptureFixture, text: str) -> bool:
    return any(text in record.getMessage() for record in caplog.records)


def order_of(sink: TopologySink, device: str) -> list[str]:
    seen: list[str] = []
    for response in sink.responses:
        if response.device == device and response.request_id not in seen:
            seen.append(response.request_id)
    return seen


def calls_of(device: str) -> list[str]:
    return [rid for dev, rid, *_ in MemoryPlugin.calls if dev == device]


# --- 1. supervised loops, health while the journal cannot commit ---------------------------------


async def test_delivery_and_health_recover_by_themselves_after_a_database_outage(
    start_controller, sink, db_url, caplog
) -> None:
    caplog.set_level(logging.WARNING)
    h = await start_controller(memory_inventory(1), lease_ttl=1.5, health_interval=0.2)
    await h.stub.SendDeviceRequest(ping("node000", "before"))
    await sink.wait_for({"before"}, timeout=10)
    assert await health(h) == health_pb2.HealthCheckResponse.SERVING

    outage = DatabaseOutage(db_url)
    outage.start()
    try:
        delivery = h.controller.delivery
        await until(lambda: delivery.database.failures >= 3, 30, "delivery passes failed")
        await until(lambda: logged(caplog, "verifier failing"), 30, "verifier passes failed")
        await wait_health(h, health_pb2.HealthCheckResponse.NOT_SERVING, timeout=40)
        status = await h.admin.GetStatus(empty_pb2.Empty(), timeout=30)
        assert not status.journal_ok and status.journal_error
        assert status.HasField("journal_error_since")
    finally:
        outage.end()

    await wait_health(h, health_pb2.HealthCheckResponse.SERVING, timeout=40)
    assert (await h.admin.GetStatus(empty_pb2.Empty())).journal_ok
    # delivery goes on without a restart: a request sent now is answered
    await send_until_acked(h, ping("node000", "after"))
    await sink.wait_for({"after"}, timeout=30)
    assert sink.counts["after"] == 1
    # so does verification
    profiles = R.PowerProfileRequest(enable_profile_ids=[4])
    await send_until_acked(h, R(device="node000", request_id="v1", enable_workload_profile=profiles))
    await sink.wait_for({"v1"}, timeout=30)
    vid = sink.unique()["v1"].enable_workload_profile.verification_id
    query = apb.ListVerificationsRequest(verification_id=vid)
    async with asyncio.timeout(30):
        while True:
            (verification,) = (await h.admin.ListVerifications(query)).verifications
            if verification.status != "pending":
                break
            await asyncio.sleep(0.1)
    assert verification.status == "verified"
    assert all(not task.done() for task in h.controller._tasks), "every background loop still runs"

    # logged once per outage, not once per failed pass
    failing = [r for r in caplog.records if "delivery's database access failing" in r.getMessage()]
    recovered = [r for r in caplog.records if "delivery's database access recovered" in r.getMessage()]
    assert len(failing) == 1 and len(recovered) == 1
    assert not any(r.exc_info for r in failing), "an outage is an operational event, not a traceback"


async def test_health_not_serving_while_a_lock_held_elsewhere_makes_journal_writes_hang(
    start_controller, sink, db_url, caplog
) -> None:
    """A table lock fails no write, it makes them wait: health must still say the journal cannot
    commit (once a write has waited `journal_stall_seconds`), and say it in GetStatus, until the
    waiting writes commit."""
    caplog.set_level(logging.WARNING)
    h = await start_controller(
        memory_inventory(1), health_interval=0.1, journal_stall_seconds=0.5, lease_ttl=600, sweep_interval=600
    )
    await h.stub.SendDeviceRequest(ping("node000", "before"))
    await sink.wait_for({"before"}, timeout=10)
    assert await health(h) == health_pb2.HealthCheckResponse.SERVING
    lock = JournalLock(db_url)
    lock.start()
    try:
        with pytest.raises(grpc.aio.AioRpcError) as caught:  # its commit waits behind the lock
            await h.stub.SendDeviceRequest(ping("node000", "locked"), timeout=1.0)
        assert caught.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        await wait_health(h, health_pb2.HealthCheckResponse.NOT_SERVING, timeout=20)
        status = await h.admin.GetStatus(empty_pb2.Empty(), timeout=10)
        assert not status.journal_ok and "waited" in status.journal_error, status
        assert status.HasField("journal_error_since")
        assert logged(
            caplog, "health NOT_SERVING: the request journal cannot commit (the oldest pending write"
        )
    finally:
        lock.end()
    await wait_health(h, health_pb2.HealthCheckResponse.SERVING, timeout=30)
    assert (await h.admin.GetStatus(empty_pb2.Empty())).journal_ok
    await sink.wait_for({"locked"}, timeout=30)  # the waiting write committed: answered once
    assert sink.counts["locked"] == 1


# --- 2. a failed completion is retried in place ----------------------------------------------------


async def test_failed_completion_is_retried_in_the_lane_before_newer_requests(
    start_controller, sink, db_url
) -> None:
    h = await start_controller(memory_inventory(1), lease_ttl=1.5, completion_retry_max=0.2)
    fault = CompletionFault(db_url)
    try:
        fault.fail("c1")
        await h.stub.SendDeviceRequest(gpu_caps("node000", "c1", {0: 500}))
        await h.stub.SendDeviceRequest(gpu_caps("node000", "c2", {0: 600}))
        await h.stub.SendDeviceRequest(gpu_caps("node000", "c3", {0: 700}))
        stats = h.controller.store.stats
        # the completion failed repeatedly, long enough for a recovery sweep to have run
        await until(lambda: stats.failed_ops >= 8, 30, "completion of c1 failed repeatedly")
        assert calls_of("node000") == ["c1"], "nothing newer ran while c1's completion was pending"
        assert not sink.responses
        fault.clear()
        await sink.wait_for({"c1", "c2", "c3"}, timeout=30)
    finally:
        fault.close()
    await asyncio.sleep(0.3)  # a re-run of c1 (the old bug) would have started by now
    assert calls_of("node000") == ["c1", "c2", "c3"]
    assert order_of(sink, "node000") == ["c1", "c2", "c3"]
    assert all(sink.counts[r] == 1 for r in ("c1", "c2", "c3"))
    (c1,) = sink.unique()["c1"].gpu_policies_update.results
    if "postgres" in db_url:  # an outage: the very result is written once the database is back
        assert c1.ok and c1.power_cap_watts == 500
    else:  # refused (a constraint error) repeatedly: answered as failed rather than block the lane
        assert not c1.ok and "could not be stored" in c1.diag_msg
    device = await h.controller.store.get_device("node000")
    assert device is not None and device.state_json is not None
    assert device.state_json["gpus"]["0"] == 700, "the newest cap is the one left on the device"


# --- 3. acked but unqueued -----------------------------------------------------------------------------


async def journal_directly(h: Harness, request: pb.DeviceControllerRequest) -> None:
    """What an ack that failed after its commit leaves behind: a journaled row in no lane."""
    now = datetime.now(UTC)
    accepted = await h.controller.store.accept_one(
        NewRequest(
            request_id=request.request_id,
            device=request.device,
            kind=str(request.WhichOneof("request")),
            payload=request.SerializeToString(),
            trace_id=request.trace_id,
            accepted_at=now,
            deadline_at=now + timedelta(seconds=60),
            owner=h.controller.settings.instance_id,
        )
    )
    assert accepted.inserted


async def hold_lane(h: Harness, device: str, request_id: str) -> CompletionFault:
    """Keep `device`'s lane busy with `request_id`: its completion fails (and is retried in
    place) until the returned fault is cleared; no clock involved."""
    fault = CompletionFault(h.controller.settings.database_url)
    fault.fail(request_id)
    await h.stub.SendDeviceRequest(gpu_caps(device, request_id, {0: 400}))
    stats = h.controller.store.stats
    await until(lambda: stats.failed_ops >= 1, 15, f"{request_id} holding the lane")
    return fault


async def test_duplicate_of_an_unqueued_request_queues_it_ahead_of_newer_ones(start_controller, sink) -> None:
    # no sweep during the test: only the duplicate path can find the lost request
    h = await start_controller(memory_inventory(1), lease_ttl=600, sweep_interval=600)
    fault = await hold_lane(h, "node000", "a0")
    try:
        await journal_directly(h, gpu_caps("node000", "a1", {0: 500}))
        await h.stub.SendDeviceRequest(gpu_caps("node000", "a2", {0: 600}))
        await h.stub.SendDeviceRequest(gpu_caps("node000", "a1", {0: 500}))  # the client's retry
        assert h.controller.dispatcher.queued("node000") == 2, "a1 and a2 wait behind a0"
        fault.clear()
        await sink.wait_for({"a0", "a1", "a2"}, timeout=30)
    finally:
        fault.close()
    assert calls_of("node000") == ["a0", "a1", "a2"]
    assert order_of(sink, "node000") == ["a0", "a1", "a2"]


async def test_sweep_queues_an_unqueued_request_ahead_of_newer_ones(start_controller, sink) -> None:
    h = await start_controller(memory_inventory(1), sweep_interval=0.3)
    fault = await hold_lane(h, "node000", "s0")
    try:
        await journal_directly(h, gpu_caps("node000", "s1", {0: 500}))
        await h.stub.SendDeviceRequest(gpu_caps("node000", "s2", {0: 600}))
        dispatcher = h.controller.dispatcher
        await until(lambda: dispatcher.queued("node000") == 2, 15, "s1 swept into the lane")
        fault.clear()
        await sink.wait_for({"s0", "s1", "s2"}, timeout=30)
    finally:
        fault.close()
    assert calls_of("node000") == ["s0", "s1", "s2"]
    assert order_of(sink, "node000") == ["s0", "s1", "s2"]


async def test_an_ack_that_times_out_on_a_locked_journal_still_queues_the_request(
    start_controller, sink
) -> None:
    h = await start_controller(memory_inventory(1), lease_ttl=600, sweep_interval=600)
    path = make_url(h.controller.settings.database_url).database
    assert path is not None
    lock = sqlite3.connect(path, isolation_level=None, timeout=10)
    try:
        lock.execute("BEGIN EXCLUSIVE")  # another process holds the journal's write lock
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await h.stub.SendDeviceRequest(ping("node000", "t1"), timeout=0.5)
        assert caught.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    finally:
        lock.execute("COMMIT")
        lock.close()
    # the row committed once the lock went away; no retry, no sweep: it was queued all the same
    await sink.wait_for({"t1"}, timeout=15)
    assert calls_of("node000") == ["t1"]


async def test_unqueued_request_found_after_a_newer_one_ran_is_answered_not_run(
    start_controller, sink
) -> None:
    h = await start_controller(memory_inventory(1), lease_ttl=600, sweep_interval=600)
    await journal_directly(h, gpu_caps("node000", "late", {0: 500}))
    await h.stub.SendDeviceRequest(gpu_caps("node000", "newer", {0: 600}))
    await sink.wait_for({"newer"}, timeout=10)
    await h.stub.SendDeviceRequest(gpu_caps("node000", "late", {0: 500}))  # the client's retry
    await sink.wait_for({"late"}, timeout=10)
    assert calls_of("node000") == ["newer"], "running the older request would undo the newer one"
    late = sink.unique()["late"]
    assert not late.gpu_policies_update.results[0].ok
    assert "newer request" in late.gpu_policies_update.results[0].diag_msg
    device = await h.controller.store.get_device("node000")
    assert device is not None and device.state_json is not None
    assert device.state_json["gpus"]["0"] == 600


# --- 4. dead letters ------------------------------------------------------------------------------------


class SmallSink(TopologySink):
    """A receiver with a 4 KiB message limit: gRPC itself refuses bigger responses."""

    async def start(self) -> int:
        from controller.security.tls import add_port

        self._server = grpc.aio.server(options=[("grpc.max_receive_message_length", 4096)])
        cb.add_TopologyCallbackServicer_to_server(self, self._server)
        self.port = add_port(self._server, self.listen, self.tls, insecure=self.insecure, what="sink")
        await self._server.start()
        return self.port


async def test_response_the_receiver_refuses_is_dead_lettered_and_later_ones_flow(start_controller) -> None:
    small = SmallSink("127.0.0.1:0")
    await small.start()
    try:
        h = await start_controller(memory_inventory(1), callback=small.address)
        await h.stub.SendDeviceRequest(ping("node000", "d1"))
        big = R(device="node000", request_id="d2", gpu_metrics=R.GPUMetricsRequest(gpu_ids=range(1000)))
        await h.stub.SendDeviceRequest(big)
        await h.stub.SendDeviceRequest(ping("node000", "d3"))
        await small.wait_for({"d1", "d3"}, timeout=15)
        assert order_of(small, "node000") == ["d1", "d3"]

        dead = await h.admin.ListRequests(apb.ListRequestsRequest(dead_letter_only=True))
        assert [r.request_id for r in dead.requests] == ["d2"]
        record = dead.requests[0]
        assert record.HasField("dead_lettered_at") and not record.HasField("delivered_at")
        assert record.delivery_error.startswith("RESOURCE_EXHAUSTED")
        delivery = h.controller.delivery
        await until(lambda: delivery.delivered == 2, 10, "d1 and d3 recorded as delivered")
        waiting = await h.admin.ListRequests(apb.ListRequestsRequest(undelivered_only=True))
        assert not waiting.requests
        status = await h.admin.GetStatus(empty_pb2.Empty())
        assert status.dead_letters == 1 and status.dead_lettered == 1 and status.undelivered == 0

        # what an operator sees
        server = f"127.0.0.1:{h.controller.port}"
        listed = await asyncio.to_thread(devicectl, "--server", server, "requests", "list", "--dead-letter")
        assert "d2" in listed and "dead-lettered" in listed and "d1" not in listed
        shown = json.loads(await asyncio.to_thread(devicectl, "--server", server, "--json", "status"))
        assert shown["journal_ok"] and shown["dead_letters"] == 1  # a number, not protobuf's string
    finally:
        await small.stop()


# --- 6. per-destination back-off with a probe ---------------------------------------------------------


class CountingSink(TopologySink):
    """Counts the calls it refuses while unavailable."""

    refused = 0

    async def DeviceResponse(self, request, context):  # type: ignore[no-untyped-def]
        if not self.available:
            self.refused += 1
        return await super().DeviceResponse(request, context)


async def test_topology_outage_probes_once_and_the_first_success_releases_the_backlog(
    start_controller,
) -> None:
    receiver = CountingSink("127.0.0.1:0")
    receiver.available = False
    await receiver.start()
    devices = 12
    try:
        # per-row backoff would grow to two minutes; the destination's probe interval to 0.5 s
        h = await start_controller(
            memory_inventory(devices),
            callback=receiver.address,
            delivery_max_backoff=120,
            delivery_probe_max_interval=0.5,
        )
        sent: dict[str, list[str]] = {}
        for n in range(3):
            for i in range(devices):
                rid = f"p{i}-{n}"
                sent.setdefault(f"node{i:03d}", []).append(rid)
                await h.stub.SendDeviceRequest(ping(f"node{i:03d}", rid))
        store = h.controller.store
        await until(lambda: receiver.refused > 0, 15, "deliveries tried and refused")

        async def all_completed() -> bool:
            return len(await store.list_requests(status="completed", limit=1000)) == devices * 3

        async with asyncio.timeout(20):
            while True:
                if await all_completed():
                    break
                await asyncio.sleep(0.1)
        receiver.refused = 0
        await asyncio.sleep(3.0)  # the outage goes on: at most one probe at a time
        assert receiver.refused <= 12, f"{receiver.refused} attempts in 3 s: one probe per interval"

        receiver.available = True
        await receiver.wait_for(devices * 3, timeout=15)  # far below the 120 s per-row backoff
        for device, rids in sent.items():
            assert order_of(receiver, device) == rids
        assert all(receiver.counts[r] == 1 for rids in sent.values() for r in rids)
        assert not h.controller.delivery.destination.failing
    finally:
        await receiver.stop()


@pytest.fixture(autouse=True)
def _reset_plugin() -> None:
    MemoryPlugin.reset()
