"""End-to-end behaviour of the controller over a real gRPC port, with a real callback receiver."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

import grpc
import pytest

from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.execution.runner import MARK_RUNNING_TICK
from controller.inventory import DeviceEntry
from tests.controller.conftest import MEMORY, memory_inventory
from tests.memory_plugin import MemoryPlugin

R = pb.DeviceControllerRequest


def ping(device: str, request_id: str, **kw: object) -> pb.DeviceControllerRequest:
    return R(device=device, request_id=request_id, ping=R.PingRequest(retry_count=1), **kw)  # type: ignore[arg-type]


def gpu_caps(
    device: str, request_id: str, caps: dict[int, float], **kw: object
) -> pb.DeviceControllerRequest:
    from controller._proto.devicecontroller.v1 import policy_pb2 as pp

    policies = pp.GPUPolicies(
        policies=[pp.GPUPolicy(gpu_id=g, power_limit=pp.PowerLimit(watts=w)) for g, w in caps.items()]
    )
    return R(
        device=device,
        request_id=request_id,
        gpu_policies_update=R.GPUPoliciesSetRequest(
            resource_group="rg", gpu_policy_action=R.SET_POLICY, gpu_policies=policies
        ),
        **kw,
    )  # type: ignore[arg-type]


async def test_ack_comes_before_completion_and_exactly_one_response(start_controller, sink) -> None:
    h = await start_controller(memory_inventory(1))
    MemoryPlugin.hold = device_answers = asyncio.Event()
    try:
        await h.stub.SendDeviceRequest(ping("node000", "r1", trace_id="t-1"))
        # acknowledged while the device has not answered: the ack never waits for the device
        assert not [c for c in MemoryPlugin.calls if c[1] == "r1"] and "r1" not in sink.counts
    finally:
        device_answers.set()
    await sink.wait_for({"r1"}, timeout=5)
    await asyncio.sleep(0.3)  # a second copy would arrive by now
    assert sink.counts["r1"] == 1
    response = sink.unique()["r1"]
    assert response.device == "node000" and response.trace_id == "t-1"
    assert response.WhichOneof("response") == "ping" and response.ping.success
    assert response.HasField("device_ping_time")


async def test_many_requests_each_get_one_response(start_controller, sink) -> None:
    h = await start_controller(memory_inventory(4))
    ids = [f"req-{i}" for i in range(60)]
    await asyncio.gather(
        *(h.stub.SendDeviceRequest(ping(f"node{i % 4:03d}", rid)) for i, rid in enumerate(ids))
    )
    await sink.wait_for(set(ids), timeout=15)
    await asyncio.sleep(0.3)
    assert all(sink.counts[rid] == 1 for rid in ids)
    assert len(sink.responses) == len(ids)


async def test_requests_for_one_device_run_in_arrival_order_one_at_a_time(start_controller, sink) -> None:
    h = await start_controller(memory_inventory(1, delay=0.02))
    ids = [f"o-{i:02d}" for i in range(12)]
    for rid in ids:  # sequential acks define the arrival order
        await h.stub.SendDeviceRequest(ping("node000", rid))
    await sink.wait_for(set(ids), timeout=10)
    calls = [c for c in MemoryPlugin.calls if c[0] == "node000"]
    assert [c[1] for c in calls] == ids
    for earlier, later in itertools.pairwise(calls):
        assert later[3] >= earlier[4], "two requests of one device overlapped"
    assert [r.request_id for r in sink.responses] == ids, "delivery must keep per-device order"


async def test_devices_run_concurrently_under_the_global_limit(start_controller, sink) -> None:
    h = await start_controller(memory_inventory(6, delay=0.3), max_concurrency=3)
    await asyncio.gather(*(h.stub.SendDeviceRequest(ping(f"node{i:03d}", f"c{i}")) for i in range(6)))
    await sink.wait_for(6, timeout=10)
    assert MemoryPlugin.max_running == 3  # concurrent, up to the limit and never above it


async def test_request_past_its_deadline_is_cancelled_and_answered(start_controller, sink) -> None:
    h = await start_controller(memory_inventory(1, delay=3))
    await h.stub.SendDeviceRequest(ping("node000", "slow", timeout_seconds=1))
    await sink.wait_for({"slow"}, timeout=5)
    response = sink.unique()["slow"]
    assert not response.ping.success
    assert "timed out" in response.ping.error
    record = await h.admin.GetRequest(apb.GetRequestRequest(request_id="slow"))
    assert record.outcome == "timeout"


async def test_default_deadline_is_the_device_call_timeout(start_controller, sink) -> None:
    h = await start_controller(memory_inventory(1, delay=3), device_call_timeout=0.5)
    await h.stub.SendDeviceRequest(ping("node000", "d"))
    await sink.wait_for({"d"}, timeout=5)
    assert "timed out after 0.5 s" in sink.unique()["d"].ping.error


async def test_duplicate_request_id_is_acknowledged_but_runs_once(start_controller, sink) -> None:
    h = await start_controller(memory_inventory(1, delay=0.1))
    await asyncio.gather(*(h.stub.SendDeviceRequest(ping("node000", "dup")) for _ in range(3)))
    await sink.wait_for({"dup"}, timeout=5)
    await h.stub.SendDeviceRequest(ping("node000", "dup"))  # after completion, too
    await asyncio.sleep(0.5)
    assert len([c for c in MemoryPlugin.calls if c[1] == "dup"]) == 1
    assert sink.counts["dup"] == 1


async def test_a_repeat_of_a_completed_request_reads_nothing_more(
    start_controller, sink, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journaling transaction already says the request is completed: its repeat is acked
    without reading the journal row again; a repeat while it runs still checks its lane."""
    h = await start_controller(memory_inventory(1, delay=0.3))
    reads: list[str] = []
    original = h.controller.store.get_request

    async def counted(request_id: str):  # type: ignore[no-untyped-def]
        reads.append(request_id)
        return await original(request_id)

    monkeypatch.setattr(h.controller.store, "get_request", counted)
    await h.stub.SendDeviceRequest(ping("node000", "rep"))
    await h.stub.SendDeviceRequest(ping("node000", "rep"))  # running: known to its lane
    await sink.wait_for({"rep"}, timeout=5)
    for _ in range(3):
        await h.stub.SendDeviceRequest(ping("node000", "rep"))
    assert reads == []
    assert len([c for c in MemoryPlugin.calls if c[1] == "rep"]) == 1
    assert sink.counts["rep"] == 1


async def test_a_repeat_of_a_running_request_writes_nothing(
    start_controller, sink, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repeat of a request queued or running here is acknowledged without a journal write (its
    row is committed before it is queued); it still runs once, with one response."""
    h = await start_controller(memory_inventory(1, delay=0.5))
    journaled: list[str] = []
    original = h.controller.store.accept

    async def counted(rows):  # type: ignore[no-untyped-def]
        journaled.extend(row.request_id for row in rows)
        return await original(rows)

    monkeypatch.setattr(h.controller.store, "accept", counted)
    await h.stub.SendDeviceRequest(ping("node000", "run"))
    for _ in range(50):  # until its lane holds it
        if h.controller.dispatcher.knows("run"):
            break
        await asyncio.sleep(0.01)
    for _ in range(3):
        await h.stub.SendDeviceRequest(ping("node000", "run"))
    # the same id naming another device is the same request all the same (the id is the key), as
    # the journal's unique request_id decides it: acknowledged, never run
    await h.stub.SendDeviceRequest(ping("node001", "run"))
    assert journaled == ["run"]
    await sink.wait_for({"run"}, timeout=5)
    assert [c[0] for c in MemoryPlugin.calls if c[1] == "run"] == ["node000"]
    bad = pb.DeviceControllerRequest(device="node000", request_id="run")  # no request kind
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await h.stub.SendDeviceRequest(bad)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # checked first, as any
    await asyncio.sleep(0.3)
    assert sink.counts["run"] == 1


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (R(request_id="x", ping=R.PingRequest()), "device"),
        (R(device="node000", ping=R.PingRequest()), "request_id"),
        (R(device="node000", request_id="x"), "request"),
        (
            R(device="node000", request_id="x", device_state_json=b"[1]", ping=R.PingRequest()),
            "device_state_json",
        ),
        (
            R(device="node000", request_id="x", device_model_json=b"{", ping=R.PingRequest()),
            "device_model_json",
        ),
        (
            R(device="node000", request_id="x", timeout_seconds=10**12, ping=R.PingRequest()),
            "timeout_seconds",
        ),
    ],
)
async def test_malformed_requests_are_rejected_naming_the_field(
    start_controller, sink, request_, field
) -> None:
    h = await start_controller()
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await h.stub.SendDeviceRequest(request_)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in info.value.details()
    listed = await h.admin.ListRequests(apb.ListRequestsRequest())
    assert not listed.requests, "a rejected request must not be journaled"


async def test_negative_watts_and_duplicate_gpus_are_rejected(start_controller) -> None:
    h = await start_controller()
    for caps_request in (gpu_caps("node000", "n", {0: -5}), gpu_caps("node000", "n", {0: float("nan")})):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await h.stub.SendDeviceRequest(caps_request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "watts" in info.value.details()
    dup = gpu_caps("node000", "n", {0: 500})
    dup.gpu_policies_update.gpu_policies.policies.append(dup.gpu_policies_update.gpu_policies.policies[0])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await h.stub.SendDeviceRequest(dup)
    assert "gpu_id" in info.value.details() or "duplicate" in info.value.details()


async def test_state_json_round_trip(start_controller, sink) -> None:
    h = await start_controller(memory_inventory(1))
    await h.stub.SendDeviceRequest(gpu_caps("node000", "s1", {0: 500, 1: 450}))
    await sink.wait_for({"s1"})
    state = json.loads(sink.unique()["s1"].device_state_json)
    assert state["gpus"] == {"0": 500.0, "1": 450.0}
    # No state in the request: the stored state is used, and a ping (state unchanged) keeps it.
    await h.stub.SendDeviceRequest(ping("node000", "s2"))
    await sink.wait_for({"s2"})
    assert not sink.unique()["s2"].device_state_json, "nil state means: keep the stored one"
    await h.stub.SendDeviceRequest(gpu_caps("node000", "s3", {2: 300}))
    await sink.wait_for({"s3"})
    assert json.loads(sink.unique()["s3"].device_state_json)["gpus"] == {"0": 500.0, "1": 450.0, "2": 300.0}
    # A state in the request wins over the stored one.
    given = json.dumps({"gpus": {"3": 250.0}}).encode()
    await h.stub.SendDeviceRequest(gpu_caps("node000", "s4", {0: 600}, device_state_json=given))
    await sink.wait_for({"s4"})
    assert json.loads(sink.unique()["s4"].device_state_json)["gpus"] == {"3": 250.0, "0": 600.0}
    device = await h.admin.GetDevice(apb.GetDeviceRequest(id="node000"))
    assert json.loads(device.state_json)["gpus"] == {"3": 250.0, "0": 600.0}
    assert device.state_version == 3


async def test_a_restarted_controller_continues_from_the_stored_state(start_controller, sink, db_url) -> None:
    # The runner keeps a write-through copy of each device's state; a new process starts without
    # one and must read what the previous process stored.
    first = await start_controller(memory_inventory(1))
    await first.stub.SendDeviceRequest(gpu_caps("node000", "r1", {0: 500, 1: 450}))
    await sink.wait_for({"r1"})
    await first.controller.stop()
    second = await start_controller(memory_inventory(1))
    await second.stub.SendDeviceRequest(gpu_caps("node000", "r2", {2: 300}))
    await sink.wait_for({"r2"})
    state = json.loads(sink.unique()["r2"].device_state_json)
    assert state["gpus"] == {"0": 500.0, "1": 450.0, "2": 300.0}
    device = await second.admin.GetDevice(apb.GetDeviceRequest(id="node000"))
    assert json.loads(device.state_json) == state and device.state_version == 2


async def test_unknown_device_is_accepted_and_answered_with_an_error(start_controller, sink) -> None:
    h = await start_controller()
    await h.stub.SendDeviceRequest(ping("nobody", "u1"))
    await sink.wait_for({"u1"})
    response = sink.unique()["u1"]
    assert not response.ping.success and "unknown device 'nobody'" in response.ping.error


async def test_plugin_errors_become_error_responses_without_blocking_other_devices(
    start_controller, sink
) -> None:
    inventory = {
        "bad": DeviceEntry("bad", MEMORY, {"Model": "DGX_GB200", "fail": "unreachable"}),
        "crash": DeviceEntry("crash", MEMORY, {"Model": "DGX_GB200", "fail": "crash"}),
        **memory_inventory(2),
    }
    h = await start_controller(inventory)
    await asyncio.gather(*(h.stub.SendDeviceRequest(ping(d, f"e-{d}")) for d in inventory))
    await sink.wait_for({f"e-{d}" for d in inventory})
    got = sink.unique()
    assert "connection refused" in got["e-bad"].ping.error and got["e-bad"].device_ping_error
    assert "internal error in plugin" in got["e-crash"].ping.error
    assert got["e-node000"].ping.success and got["e-node001"].ping.success


async def test_full_device_queue_answers_overflow_with_an_error(start_controller, sink) -> None:
    h = await start_controller(memory_inventory(1, delay=0.3), queue_limit=2)
    for i in range(5):
        await h.stub.SendDeviceRequest(ping("node000", f"q{i}"))
    await sink.wait_for(5, timeout=10)
    errors = [r for r in sink.unique().values() if not r.ping.success]
    assert errors and all("queue_limit" in r.ping.error for r in errors)
    assert len(sink.responses) == 5


async def test_delivery_resumes_after_a_topology_outage(start_controller, sink) -> None:
    sink.available = False
    h = await start_controller(memory_inventory(2))
    await h.stub.SendDeviceRequest(ping("node000", "o1"))
    await h.stub.SendDeviceRequest(ping("node001", "o2"))

    # polled, not slept for: a stall of this process on a loaded host can outlast any fixed wait
    async with asyncio.timeout(30):  # a bound on the wait for the first delivery attempt
        while True:
            listed = await h.admin.ListRequests(apb.ListRequestsRequest(undelivered_only=True))
            pending = list(listed.requests)
            if any(r.delivery_attempts for r in pending):
                break
            await asyncio.sleep(0.05)
    assert not sink.responses
    assert {r.request_id for r in pending} == {"o1", "o2"}
    # the first delivery finds the receiver down; from then on one probe at a time is sent (the
    # oldest response), so a response that completed after that one failed may not be tried yet
    tried = [r for r in pending if r.delivery_attempts]
    assert tried and all("UNAVAILABLE" in r.delivery_error for r in tried)
    sink.available = True
    await sink.wait_for({"o1", "o2"}, timeout=10)
    assert sink.counts["o1"] == sink.counts["o2"] == 1


async def test_wait_request_streams_until_completion(start_controller, sink) -> None:
    h = await start_controller(memory_inventory(1, delay=0.3))
    await h.stub.SendDeviceRequest(ping("node000", "w1"))
    records = [
        r async for r in h.admin.WaitRequest(apb.WaitRequestRequest(request_id="w1", wait_for_delivery=True))
    ]
    assert records[-1].status == apb.COMPLETED and records[-1].outcome == "ok"
    assert records[-1].HasField("delivered_at") and records[-1].response.ping.success


#: the slow device's call: far past the mark (MARK_RUNNING_AFTER and a tick), so that a stall of this
#: process on a loaded host (seconds, not the mark's tenths) cannot carry the poll past the call's end
SLOW_CALL = 5.0


async def test_a_request_shows_as_running_only_once_its_call_runs_long(start_controller, sink) -> None:
    slow = DeviceEntry("slow000", MEMORY, {"Model": "DGX_GB200", "delay": SLOW_CALL})
    h = await start_controller({**memory_inventory(1), "slow000": slow})
    await h.stub.SendDeviceRequest(ping("node000", "quick"))
    await h.stub.SendDeviceRequest(ping("slow000", "slow"))
    # polled, not slept: the mark lands MARK_RUNNING_AFTER into the call, checked every tick
    running = await h.admin.GetRequest(apb.GetRequestRequest(request_id="slow"))
    while running.status == apb.QUEUED:
        await asyncio.sleep(MARK_RUNNING_TICK / 2)
        running = await h.admin.GetRequest(apb.GetRequestRequest(request_id="slow"))
    assert (running.status, running.attempts) == (apb.RUNNING, 1) and running.HasField("started_at")
    await sink.wait_for({"quick", "slow"}, timeout=10)
    for rid in ("quick", "slow"):
        record = await h.admin.GetRequest(apb.GetRequestRequest(request_id=rid))
        assert (rid, record.status, record.attempts) == (rid, apb.COMPLETED, 1)
        assert record.started_at.ToDatetime() <= record.finished_at.ToDatetime()


async def test_profile_verification_is_recorded(start_controller, sink) -> None:
    h = await start_controller(memory_inventory(1))
    req = R(
        device="node000",
        request_id="p1",
        enable_workload_profile=R.PowerProfileRequest(enable_profile_ids=[4, 7]),
    )
    await h.stub.SendDeviceRequest(req)
    await sink.wait_for({"p1"})
    vid = sink.unique()["p1"].enable_workload_profile.verification_id
    assert vid
    for _ in range(50):
        listed = await h.admin.ListVerifications(apb.ListVerificationsRequest(verification_id=vid))
        if listed.verifications and listed.verifications[0].status != "pending":
            break
        await asyncio.sleep(0.1)
    assert listed.verifications[0].status == "verified"


async def test_graceful_shutdown_lets_in_flight_work_finish(start_controller, sink) -> None:
    h = await start_controller(memory_inventory(1, delay=0.5))
    await h.stub.SendDeviceRequest(ping("node000", "g1"))
    await asyncio.sleep(0.1)
    await h.controller.stop(grace=3)
    assert sink.counts["g1"] == 1


async def test_health_and_reflection_are_served(start_controller) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    h = await start_controller(reflection=True)  # reflection is off unless enabled
    health = health_pb2_grpc.HealthStub(h.channel)
    for service in ("", "devicecontroller.v1.DeviceController", "devicecontroller.v1.DeviceControllerAdmin"):
        reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    stub = reflection_pb2_grpc.ServerReflectionStub(h.channel)
    answers = [
        a
        async for a in stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")])
        )
    ]
    names = {s.name for s in answers[0].list_services_response.service}
    assert {"devicecontroller.v1.DeviceController", "devicecontroller.v1.DeviceControllerAdmin"} <= names


async def test_secrets_never_reach_state_database_or_responses(start_controller, sink, tmp_path) -> None:
    (tmp_path / "node-secret").write_text('{"username": "admin", "password": "hunter2-secret"}')
    (tmp_path / "node-secret").chmod(0o600)
    inventory = {
        "node000": DeviceEntry(
            "node000", MEMORY, {"Model": "DGX_GB200"}, url="https://bmc", secret="node-secret"
        )
    }
    h = await start_controller(inventory, secrets_dir=str(tmp_path))
    await h.stub.SendDeviceRequest(gpu_caps("node000", "sec1", {0: 500}))
    await sink.wait_for({"sec1"})
    assert b"hunter2" not in sink.unique()["sec1"].SerializeToString()
    db = Path(h.controller.settings.database_url.removeprefix("sqlite:///"))
    for path in db.parent.glob(db.name + "*"):
        assert b"hunter2" not in path.read_bytes()
