"""Fencing on a real PostgreSQL: a completion commits only under the shard lease (token) it ran
with. A process that lost its lease (paused, then overtaken) writes nothing; the new owner answers."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from controller.cluster.shards import ShardLeases
from controller.store import Completion, LeaseFence, LeaseRound, NewRequest, Store
from tests.controller.cluster.cluster import (
    SHARDS,
    Cluster,
    Node,
    cluster,
    cluster_settings,
    fair,
    ping,
    store,
    wait_until,
)
from tests.memory_plugin import MemoryPlugin

__all__ = ["cluster", "store"]  # fixtures

pytestmark = pytest.mark.postgres
NOW = datetime.now(UTC)


def journaled(rid: str, shard: int) -> NewRequest:
    return NewRequest(rid, "dev1", "ping", b"payload", "", NOW, NOW + timedelta(seconds=60), "A", shard)


def completion(rid: str, fence: LeaseFence) -> Completion:
    return Completion(
        request_id=rid,
        device="dev1",
        outcome="ok",
        error="",
        finished_at=datetime.now(UTC),
        response=b"response",
        new_state={"power": "on"},
        touch_device=True,
        fence=fence,
    )


def expire(database: URL, shard: int) -> None:
    """Let a lease run out (as if its holder paused) without anyone taking it."""
    engine = sa.create_engine(database, poolclass=NullPool)
    with engine.begin() as conn:
        past = "UPDATE shard_leases SET expires_at = now() - interval '1 s' WHERE shard = :s"
        conn.execute(sa.text(past), {"s": shard})
    engine.dispose()


async def test_a_completion_commits_only_under_the_current_token(store: Store, pg_database: URL) -> None:
    a = await store.lease_round(LeaseRound("A", "all", 30.0, 4, [0, 1, 2, 3]))
    assert set(a.held) == {0, 1, 2, 3} and a.acquired == frozenset(a.held)
    await store.accept([journaled("r1", 2), journaled("r3", 3)])

    expire(pg_database, 3)  # expired, but nobody took it: nobody else can have run its requests
    assert await store.complete(completion("r3", LeaseFence(3, "A", a.held[3])))

    stale = LeaseFence(2, "A", a.held[2])
    await store.release_shards("A", {2: a.held[2]})
    assert not await store.complete(completion("r1", stale)), "a released lease commits nothing"
    b = await store.lease_round(LeaseRound("B", "all", 30.0, 4, [2, 3, 0, 1]))
    assert b.held == {2: a.held[2] + 1, 3: a.held[3] + 1}, "a takeover draws the next token"
    assert not await store.complete(completion("r1", stale)), "the old token commits nothing"
    view = await store.get_request("r1")
    assert view is not None and view.status == "queued" and view.response is None
    assert await store.due_outbox(datetime.now(UTC), shards=[2]) == []

    assert await store.complete(completion("r1", LeaseFence(2, "B", b.held[2])))
    view = await store.get_request("r1")
    assert view is not None and view.status == "completed" and view.response == b"response"
    leases = {lease.shard: (lease.owner, lease.token) for lease in await store.shard_leases()}
    assert leases[2] == ("B", b.held[2])


async def test_renewal_keeps_the_token_and_a_released_lease_is_acquired_anew(
    store: Store, pg_database: URL
) -> None:
    first = await store.lease_round(LeaseRound("A", "all", 30.0, 2, [0, 1]))
    again = await store.lease_round(LeaseRound("A", "all", 30.0, 2, [0, 1], held=first.held))
    assert again.held == first.held and not again.acquired
    expire(pg_database, 1)
    await store.release_shards("A", {0: first.held[0]})
    after = await store.lease_round(LeaseRound("A", "all", 30.0, 2, [0, 1], held={1: first.held[1]}))
    assert after.acquired == {0} and after.held[0] == first.held[0] + 1, "released: acquired anew"
    assert after.held[1] == first.held[1], "expired but untaken: renewed with its token"


async def test_a_restarted_process_with_the_same_instance_id_takes_its_leases_anew(store: Store) -> None:
    """`serve --workers` restarts a dead executor under the same instance id: the new process does
    not know its predecessor's tokens, so it acquires the shards anew (token + 1) rather than
    renewing them, and a predecessor that was only paused can complete nothing."""
    before = await store.lease_round(LeaseRound("x-w0", "executor", 30.0, 3, [0, 1, 2]))
    assert set(before.held) == {0, 1, 2}
    await store.accept([journaled("paused", 1)])
    restarted = await store.lease_round(LeaseRound("x-w0", "executor", 30.0, 3, [0, 1, 2]))
    assert restarted.held == {s: t + 1 for s, t in before.held.items()}, "acquired anew, not renewed"
    assert restarted.acquired == frozenset(before.held)
    assert not await store.complete(completion("paused", LeaseFence(1, "x-w0", before.held[1])))
    view = await store.get_request("paused")
    assert view is not None and view.status == "queued" and view.response is None
    renewed = await store.lease_round(LeaseRound("x-w0", "executor", 30.0, 3, [0, 1, 2], held=restarted.held))
    assert renewed.held == restarted.held and not renewed.acquired, "its own tokens are renewed"
    assert await store.complete(completion("paused", LeaseFence(1, "x-w0", restarted.held[1])))


async def a_calls_a_device(
    cluster: Cluster, rid: str, calling: Callable[[], bool]
) -> tuple[Node, Node, str, int]:
    """Controllers A and B split the shards and A is sent `rid` for one of its devices; returns once
    `calling` says A calls it: A, B, the device and its shard."""
    a = await cluster.start("a")
    b = await cluster.start("b")
    await wait_until(lambda: fair([a, b]), "two controllers split the shards")
    device = cluster.devices_in(a.held())[0]
    await a.send(ping(device, rid))
    await wait_until(calling, "A calls the device")
    return a, b, device, cluster.shard_of(device)


async def test_a_paused_controller_that_lost_its_lease_completes_nothing(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every device call waits for the test's go: the paused process's call and its successor's
    calls: list[asyncio.Event] = []
    work = MemoryPlugin._work

    async def gated(self: MemoryPlugin, ctx: Any, op: str) -> None:
        go = asyncio.Event()
        calls.append(go)
        await go.wait()
        await work(self, ctx, op)

    monkeypatch.setattr(MemoryPlugin, "_work", gated)
    a, b, device, shard = await a_calls_a_device(cluster, "fenced", lambda: len(calls) == 1)

    # A pauses: no renewals, no heartbeat, and (its loop frozen mid-call) no look at the clock
    # to cancel the call in flight, which is what a running process does (the test below)
    monkeypatch.setattr(a.leases, "valid_for", lambda shard: math.inf)
    renewal = next(t for t in a.controller._tasks if t.get_name() == "shard leases")
    renewal.cancel()
    await wait_until(lambda: shard in b.held(), "B takes the shard over once A's lease expired")
    await wait_until(lambda: len(calls) == 2, "B claims the request and calls the device")
    assert not a.leases.runs(shard), "A knows on its own that its lease is gone"

    calls[0].set()  # A wakes up and tries to complete
    await wait_until(lambda: not a.controller.runner.running_shards, "A's attempt ends")
    view = await a.controller.store.get_request("fenced")
    assert view is not None and view.status != "completed" and view.response is None
    record = await a.controller.store.get_device(device)
    assert record is not None and record.last_request_id != "fenced", "A wrote nothing"

    calls[1].set()
    await cluster.sink.wait_for({"fenced"}, timeout=20)
    view = await a.controller.store.get_request("fenced")
    assert view is not None and view.status == "completed" and view.owner == "b"
    await wait_until(lambda: b.controller.delivery.delivered >= 1, "B delivered it")
    assert cluster.sink.counts["fenced"] == 1


async def test_a_call_in_flight_is_cancelled_when_the_lease_lapses_before_a_peer_takes_over(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process whose renewals stop cancels its device call at its local lease deadline, which
    comes before the lease's expiry in the database: the next holder's call of the device starts
    only after the first ended, so a BMC never has calls of two controllers in flight at once."""
    starts: list[float] = []
    cancelled: list[float] = []
    work = MemoryPlugin._work

    async def first_hangs(self: MemoryPlugin, ctx: Any, op: str) -> None:
        starts.append(time.monotonic())
        if len(starts) == 1:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.append(time.monotonic())
                raise
        await work(self, ctx, op)

    monkeypatch.setattr(MemoryPlugin, "_work", first_hangs)
    a, b, _, shard = await a_calls_a_device(cluster, "lapsed", lambda: len(starts) == 1)

    renewal = next(t for t in a.controller._tasks if t.get_name() == "shard leases")
    renewal.cancel()  # A's renewals stop (its database connection hangs, say)
    await wait_until(lambda: bool(cancelled), "A cancels its call once its lease lapsed here")
    await wait_until(lambda: shard in b.held(), "B takes the shard over")
    await cluster.sink.wait_for({"lapsed"}, timeout=20)
    assert len(starts) == 2 and starts[1] > cancelled[0], "B called the device after A's call ended"
    view = await a.controller.store.get_request("lapsed")
    assert view is not None and view.status == "completed" and view.owner == "b"
    assert cluster.sink.counts["lapsed"] == 1


async def test_a_restarted_executor_s_lease_holder_fences_its_predecessor(
    store: Store, pg_database: URL
) -> None:
    """The same through `ShardLeases`: the restarted process's first round gains every shard with
    a new token, and the predecessor's fence no longer commits."""
    settings = cluster_settings(
        pg_database.render_as_string(hide_password=False), "", "x-w0", role="executor"
    )
    gained: list[frozenset[int]] = []

    async def on_gained(shards: frozenset[int]) -> None:
        gained.append(shards)

    def leases() -> ShardLeases:
        return ShardLeases(store, settings, {}, on_gained=on_gained, busy=lambda shard: False)

    predecessor = leases()
    await predecessor.round()
    assert set(predecessor.held) == set(range(SHARDS))
    await store.accept([journaled("late", 5)])
    successor = leases()
    assert await successor.round() == frozenset(range(SHARDS)) and gained[-1] == frozenset(range(SHARDS))
    assert all(successor.held[s] == predecessor.held[s] + 1 for s in range(SHARDS))
    assert not await store.complete(completion("late", predecessor.fence(5))), "the predecessor is fenced"
    assert await successor.round() == frozenset(), "renewed with its own tokens"
    assert await store.complete(completion("late", successor.fence(5)))
