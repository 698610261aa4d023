"""Per-device order across front doors: a request acknowledged by a controller that does not hold
its device's shard still runs before the device's next request, whichever controller accepts it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import policy_pb2 as pp
from controller.app import Controller
from controller.delivery.sink import TopologySink
from controller.execution.dispatch import Dispatcher, Job
from controller.store import NewRequest, Store
from controller.translate import success_of
from plugins.base import RequestKind
from tests.controller.cluster.cluster import (
    Cluster,
    cluster,
    cluster_settings,
    fair,
    memory_inventory,
    wait_until,
)
from tests.memory_plugin import MemoryPlugin

__all__ = ["cluster"]  # fixtures

postgres = pytest.mark.postgres
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def journaled(rid: str, device: str, owner: str, shard: int = 3, claim_older: bool = False) -> NewRequest:
    return NewRequest(
        request_id=rid,
        device=device,
        kind="gpu_policies_update",
        payload=rid.encode(),
        trace_id="",
        accepted_at=T0,
        deadline_at=T0 + timedelta(seconds=30),
        owner=owner,
        shard=shard,
        claim_older=claim_older,
    )


@postgres
async def test_behind_a_front_end_executors_run_each_device_s_requests_in_order(cluster: Cluster) -> None:
    """`serve --workers` in one process each: the front end never queues (no fast path), the
    executors claim by poll in seq order, and a request acked before the next was sent is
    committed before that one exists, so a poll never sees the newer without the older."""
    front = await cluster.start("front", role="frontend")
    e1 = await cluster.start("e1", role="executor")
    e2 = await cluster.start("e2", role="executor")
    await wait_until(lambda: fair([e1, e2]), "the executors split the shards")
    devices = sorted(cluster.inventory)[:24]

    async def series(device: str) -> None:
        for n in range(3):
            await front.send(cap(device, f"{device}-{n}", 500 + n))

    await asyncio.gather(*(series(d) for d in devices))
    ids = {f"{d}-{n}" for d in devices for n in range(3)}
    await cluster.sink.wait_for(ids, timeout=30)
    assert all(success_of(r) == (True, "") for r in cluster.sink.responses)
    assert all(cluster.sink.counts[rid] == 1 for rid in ids), "each answered once"
    ran = [(device, rid) for device, rid, *_ in MemoryPlugin.calls]
    assert sorted(rid for _, rid in ran) == sorted(ids), "each ran exactly once"
    for device in devices:
        assert [rid for d, rid in ran if d == device] == [f"{device}-{n}" for n in range(3)]
        view = await front.controller.store.get_request(f"{device}-0")
        assert view is not None and view.owner in ("e1", "e2"), "an executor claimed and ran it"


async def test_an_accept_on_the_fast_path_claims_the_device_s_older_foreign_requests(store: Store) -> None:
    """The owner's accept takes, in the same transaction, the device's older unfinished requests
    journaled by other controllers: other devices, other shards and its own rows are left alone."""
    await store.accept(
        [
            journaled("d1-a", "d1", "a"),
            journaled("d1-b", "d1", "a"),
            journaled("d2-a", "d2", "a"),
            journaled("d1-other-shard", "d1", "a", shard=4),
            journaled("d1-mine", "d1", "b"),
        ]
    )
    plain = await store.accept_one(journaled("d1-plain", "d1", "b"))
    assert plain.older == (), "only a fast-path accept claims"
    fast = await store.accept(
        [journaled("d1-c", "d1", "b", claim_older=True), journaled("d1-d", "d1", "b", claim_older=True)]
    )
    assert [r.request_id for r in fast[0].older] == ["d1-a", "d1-b"], "by seq, with the lowest new seq"
    assert all(r.owner == "b" for r in fast[0].older) and fast[1].older == ()
    for rid, owner in (("d1-a", "b"), ("d1-b", "b"), ("d2-a", "a"), ("d1-other-shard", "a")):
        view = await store.get_request(rid)
        assert view is not None and view.owner == owner, rid
    again = await store.accept_one(journaled("d1-e", "d1", "b", claim_older=True))
    assert again.older == (), "claimed once"


def cap(device: str, request_id: str, watts: int) -> pb.DeviceControllerRequest:
    """A state-changing request (a later one must never be overtaken by an older one)."""
    policy = pp.GPUPolicy(gpu_id=0, power_limit=pp.PowerLimit(watts=watts))
    return pb.DeviceControllerRequest(
        device=device,
        request_id=request_id,
        gpu_policies_update=pb.DeviceControllerRequest.GPUPoliciesSetRequest(
            gpu_policy_action=pb.DeviceControllerRequest.SET_POLICY,
            gpu_policies=pp.GPUPolicies(policies=[policy]),
        ),
    )


@postgres
async def test_a_request_acked_by_another_front_door_runs_before_the_owner_s_next_one(
    cluster: Cluster,
) -> None:
    # The owner's claim poll is slow here, so the older request is still unclaimed in the journal
    # when the newer one reaches the owner's own front door (the race, made certain).
    a = await cluster.start("a", claim_interval=30.0)
    b = await cluster.start("b", claim_interval=30.0)
    await wait_until(lambda: fair([a, b]), "two controllers split the shards")
    devices = cluster.devices_in(b.held())[:12]
    assert len(devices) >= 4

    async def pair(device: str) -> None:
        await a.send(cap(device, f"{device}-first", 500))  # acked: journaled for B
        await b.send(cap(device, f"{device}-second", 600))  # sent only after that ack

    await asyncio.gather(*(pair(d) for d in devices))
    ids = {f"{d}-{n}" for d in devices for n in ("first", "second")}
    await cluster.sink.wait_for(ids, timeout=30)
    for response in cluster.sink.responses:
        assert success_of(response) == (True, ""), response.request_id
    assert all(cluster.sink.counts[rid] == 1 for rid in ids), "each answered once"
    ran = [(device, rid) for device, rid, *_ in MemoryPlugin.calls]
    assert sorted(rid for _, rid in ran) == sorted(ids), "each ran exactly once"
    for device in devices:
        assert [rid for d, rid in ran if d == device] == [f"{device}-first", f"{device}-second"]
        answered = [r.request_id for r in cluster.sink.responses if r.device == device]
        assert answered == [f"{device}-first", f"{device}-second"], "answered in order too"
        view = await b.controller.store.get_device(device)
        assert view is not None and view.state_json is not None
        assert view.state_json["gpus"]["0"] == 600, "the newer cap is the one left"


async def test_a_sweep_never_queues_again_a_request_whose_completion_is_committing(
    db_url: str, sink: TopologySink, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing is awaited between a sweep's claim and its queueing: a job that finishes meanwhile
    (here while a slow liveness write is waited for) would have left its lane and been queued
    again although completed (run twice, or refused as superseded by a newer one)."""
    MemoryPlugin.reset()
    inventory = memory_inventory(2, delay=0.3)
    settings = cluster_settings(db_url, sink.address, "solo", sweep_interval=3600.0)
    controller = Controller(settings, inventory)
    await controller.start()
    try:
        heartbeat = controller.store.heartbeat

        async def slow_heartbeat(owner: str, role: str = "all") -> None:
            await asyncio.sleep(0.6)  # a loaded machine's slow write
            await heartbeat(owner, role)

        monkeypatch.setattr(controller.store, "heartbeat", slow_heartbeat)
        await controller.service.accept(cap("node000", "once", 500))
        await wait_until(lambda: MemoryPlugin.running == 1, "the request runs")
        assert await controller.claims.recover() == 0, "the running request is in its lane"
        await sink.wait_for({"once"}, timeout=10)
        await wait_until(lambda: not controller.dispatcher.active_lanes, "the lane is done")
        assert [rid for _, rid, *_ in MemoryPlugin.calls] == ["once"], "run exactly once"
        assert sink.counts["once"] == 1 and success_of(sink.responses[0]) == (True, "")
    finally:
        await controller.stop(grace=1.0)


async def test_a_job_left_for_the_shard_s_owner_does_not_count_as_started() -> None:
    """A job the runner did not run (its shard's lease lapsed here first) leaves the lane without
    counting as a newer request that started: when the lease comes back and the journal is claimed
    again, the device's older request still runs first instead of being refused as superseded."""
    lapsed = True
    ran: list[str] = []
    superseded: list[str] = []

    async def execute(job: Job) -> bool:
        if lapsed:
            return False
        ran.append(job.request_id)
        return True

    async def on_superseded(job: Job, newer: int) -> None:
        superseded.append(job.request_id)

    def job(seq: int) -> Job:
        now = datetime.now(UTC)
        return Job(seq, f"r{seq}", "dev", RequestKind.GPU_POLICIES_UPDATE, b"", "", now, 3)

    dispatcher = Dispatcher(execute, max_concurrency=2, queue_limit=10, on_superseded=on_superseded)
    assert dispatcher.submit(job(5))
    assert await dispatcher.drain(5) and ran == []
    lapsed = False  # the lease is back: its unfinished rows are claimed again, by seq
    assert dispatcher.submit(job(3)) and dispatcher.submit(job(5))
    assert await dispatcher.drain(5)
    assert (ran, superseded) == (["r3", "r5"], [])
