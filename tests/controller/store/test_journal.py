"""The request journal: accept (group commit, duplicates), start, claim with leases, views."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL

from controller.store import Completion, NewRequest, NewVerification, RequestStatus, Store
from controller.store._direct import ROWS_PER_INSERT

T0 = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)


def req(rid: str, device: str = "dev1", owner: str = "ctl-a", at: datetime = T0) -> NewRequest:
    return NewRequest(
        request_id=rid,
        device=device,
        kind="gpu_policies_update",
        payload=b"\x00\x01payload-" + rid.encode(),
        trace_id=f"trace-{rid}",
        accepted_at=at,
        deadline_at=at + timedelta(seconds=30),
        owner=owner,
    )


def done(rid: str, device: str = "dev1", at: datetime = T0) -> Completion:
    return Completion(
        request_id=rid,
        device=device,
        outcome="ok",
        error="",
        finished_at=at,
        response=b"resp-" + rid.encode(),
        new_state=None,
        touch_device=True,
    )


async def test_accept_inserts_and_reports_duplicates(store: Store) -> None:
    first = await store.accept([req("a"), req("b"), req("a")])
    assert [(x.request_id, x.inserted) for x in first] == [("a", True), ("b", True), ("a", False)]
    assert first[2].seq == first[0].seq
    assert first[0].seq < first[1].seq

    again = await store.accept([req("b"), req("c")])
    assert (again[0].inserted, again[0].seq) == (False, first[1].seq)
    assert again[1].inserted and again[1].seq > first[1].seq

    single = await store.accept_one(req("a"))
    assert (single.inserted, single.seq) == (False, first[0].seq)
    assert await store.accept([]) == []

    view = await store.get_request("a")
    assert view is not None
    assert view.status == RequestStatus.QUEUED
    assert view.payload == b"\x00\x01payload-a"
    assert view.trace_id == "trace-a"
    assert view.accepted_at == T0 and view.accepted_at.tzinfo is not None
    assert view.deadline_at == T0 + timedelta(seconds=30)
    assert (view.attempts, view.outcome, view.owner, view.response) == (0, "", "ctl-a", None)


async def test_a_duplicate_says_whether_its_request_was_completed(store: Store) -> None:
    """A repeat learns in the journaling transaction whether its request is completed (it never
    runs again); a repeat of a queued one, or within the same batch, is not."""
    await store.accept([req("a"), req("b")])
    assert await store.complete(done("a"))
    again = await store.accept([req("a"), req("b"), req("c"), req("c")])
    assert [(x.request_id, x.inserted, x.completed) for x in again] == [
        ("a", False, True),
        ("b", False, False),
        ("c", True, False),
        ("c", False, False),
    ]


async def test_a_burst_larger_than_one_insert_keeps_arrival_order(store: Store) -> None:
    """More requests than one multi-row INSERT takes (SQLite: `ROWS_PER_INSERT`), some journaled
    already: each new one is inserted once, seqs in arrival order, the others report their seq."""
    early = await store.accept([req("r0007"), req("r0300")])
    ids = [f"r{i:04d}" for i in range(ROWS_PER_INSERT * 2 + 50)]
    accepted = await store.accept([req(rid) for rid in ids])
    assert [a.request_id for a in accepted] == ids
    by_id = {a.request_id: a for a in accepted}
    assert (by_id["r0007"].inserted, by_id["r0007"].seq) == (False, early[0].seq)
    assert (by_id["r0300"].inserted, by_id["r0300"].seq) == (False, early[1].seq)
    fresh = [a for a in accepted if a.request_id not in ("r0007", "r0300")]
    assert all(a.inserted for a in fresh)
    assert [a.seq for a in fresh] == sorted(a.seq for a in fresh)
    assert len({a.seq for a in accepted}) == len(ids)
    view = await store.get_request(ids[-1])
    assert view is not None and view.accepted_at == T0 and view.payload == req(ids[-1]).payload


async def test_concurrent_accept_one_calls_share_one_transaction(store: Store) -> None:
    batches, transactions = store.stats.batches, store.stats.transactions
    rows = [req(f"r{i:03d}") for i in range(200)] + [req("r000"), req("r001")]
    results = await asyncio.gather(*(store.accept_one(r) for r in rows))
    assert store.stats.batches - batches == 1
    assert store.stats.transactions - transactions == 1
    assert sum(r.inserted for r in results) == 200
    seqs = [r.seq for r in results[:200]]
    assert seqs == sorted(seqs) and len(set(seqs)) == 200
    assert results[200].seq == results[0].seq and not results[200].inserted


async def test_batch_max_splits_large_bursts(db_url: str) -> None:
    store = Store.from_url(db_url, batch_max=16)
    store.upgrade()
    await store.start()
    try:
        await asyncio.gather(*(store.accept_one(req(f"r{i}")) for i in range(40)))
        assert store.stats.largest_batch == 16
        assert store.stats.batches >= 3
    finally:
        await store.close()


async def test_naive_datetimes_are_refused(store: Store) -> None:
    naive = datetime(2026, 1, 1)
    with pytest.raises(ValueError, match="timezone-aware"):
        await store.accept_one(req("x", at=naive))
    with pytest.raises(ValueError, match="timezone-aware"):
        await store.mark_running("x", naive)


async def test_mark_running_counts_attempts_and_never_reopens(store: Store) -> None:
    await store.accept_one(req("a"))
    await store.mark_running("a", T0 + timedelta(seconds=1))
    await store.mark_running("a", T0 + timedelta(seconds=2))
    view = await store.get_request("a")
    assert view is not None
    assert (view.status, view.attempts, view.started_at) == ("running", 2, T0 + timedelta(seconds=2))

    assert await store.complete(done("a", at=T0 + timedelta(seconds=3)))
    await store.mark_running("a", T0 + timedelta(seconds=4))
    view = await store.get_request("a")
    assert view is not None and view.status == "completed" and view.attempts == 2


async def test_a_completion_records_the_start_no_mark_running_wrote(store: Store) -> None:
    await store.accept([req("short"), req("long"), req("both")])
    # a short call: its completion writes the start (one write less per request)
    started = T0 + timedelta(seconds=1)
    assert await store.complete(
        dataclasses.replace(done("short", at=T0 + timedelta(seconds=2)), started_at=started)
    )
    # a long call: the timer wrote the start, the completion leaves it alone
    await store.mark_running("long", started)
    assert await store.complete(done("long", at=T0 + timedelta(seconds=2)))
    # a completion that raced a late mark batched with it counts the one start it carries
    # (the mark finds the request completed and changes nothing)
    assert await store.complete(
        dataclasses.replace(done("both", at=T0 + timedelta(seconds=2)), started_at=started)
    )
    await store.mark_running("both", T0 + timedelta(seconds=3))
    for rid in ("short", "long", "both"):
        view = await store.get_request(rid)
        assert view is not None
        assert (rid, view.status, view.attempts, view.started_at) == (rid, "completed", 1, started)
    with pytest.raises(ValueError, match="timezone-aware"):
        await store.complete(dataclasses.replace(done("short"), started_at=datetime(2030, 1, 1)))


async def test_failing_op_does_not_fail_its_batch(store: Store) -> None:
    await store.accept([req("a"), req("b"), req("c")])
    verification = NewVerification("v1", "dev1", "a", "gpu_policies_update", {"x": 1}, T0, 3)
    assert await store.complete(dataclasses.replace(done("a"), verification=verification))
    retried = store.stats.retried_batches

    # Same batch: a good accept, a completion whose verification id collides, a good completion.
    bad = Completion("b", "dev1", "ok", "", T0, b"resp-b", {"p": 1}, True, verification=verification)
    results = await asyncio.gather(
        store.accept_one(req("d")), store.complete(bad), store.complete(done("c")), return_exceptions=True
    )
    assert isinstance(results[1], sa.exc.IntegrityError)
    assert results[0].inserted and results[2] is True  # type: ignore[union-attr]
    assert store.stats.retried_batches == retried + 1

    # The failed completion left nothing behind: all its effects were in its one transaction.
    b = await store.get_request("b")
    assert b is not None and b.status == "queued" and b.response is None
    state, version = await store.device_state("dev1")
    assert (state, version) == (None, 0)
    c = await store.get_request("c")
    assert c is not None and c.status == "completed" and c.response == b"resp-c"
    assert await store.get_request("d") is not None


async def test_claim_unfinished_respects_leases(store: Store) -> None:
    await store.accept([req("a1", owner="A"), req("a2", owner="A"), req("z1", owner="zombie")])
    await store.accept_one(req("done", owner="zombie"))
    assert await store.complete(done("done"))
    await store.heartbeat("A")
    await store.heartbeat("B")

    # B may take the zombie's work (no lease at all) but not live A's, nor anything completed.
    got = await store.claim_unfinished("B", lease_ttl=30)
    assert [(r.request_id, r.owner) for r in got] == [("z1", "B")]
    # A gets its own unfinished work back (e.g. after a restart), ordered by seq.
    mine = await store.claim_unfinished("A", lease_ttl=30)
    assert [r.request_id for r in mine] == ["a1", "a2"]
    assert mine[0].status == "queued" and mine[0].payload == b"\x00\x01payload-a1"

    # Once A's heartbeat is older than the TTL, its unfinished work is up for grabs.
    await store.mark_running("a1", T0)
    await asyncio.sleep(0.3)
    await store.heartbeat("B")
    got = await store.claim_unfinished("B", lease_ttl=0.2)
    assert [(r.request_id, r.owner, r.status) for r in got] == [
        ("a1", "B", "running"),
        ("a2", "B", "queued"),
        ("z1", "B", "queued"),
    ]
    assert (await store.get_request("a1")).owner == "B"  # type: ignore[union-attr]
    assert await store.claim_unfinished("A", lease_ttl=30) == []
    assert [r.request_id for r in await store.claim_unfinished("B", lease_ttl=30, limit=1)] == ["a1"]


async def test_list_and_get_request_views(store: Store) -> None:
    await store.accept([req("a", device="d1"), req("b", device="d2"), req("c", device="d1")])
    await store.mark_running("a", T0)
    assert await store.complete(done("a", device="d1", at=T0 + timedelta(seconds=1)))

    assert await store.get_request("nope") is None
    assert [v.request_id for v in await store.list_requests()] == ["c", "b", "a"]
    assert [v.request_id for v in await store.list_requests(device="d1")] == ["c", "a"]
    assert [v.request_id for v in await store.list_requests(status="completed")] == ["a"]
    assert [v.request_id for v in await store.list_requests(undelivered_only=True)] == ["a"]
    assert [v.request_id for v in await store.list_requests(limit=1)] == ["c"]

    view = await store.get_request("a")
    assert view is not None
    assert (view.outcome, view.response, view.delivered_at, view.delivery_attempts) == (
        "ok",
        b"resp-a",
        None,
        0,
    )
    assert view.finished_at == T0 + timedelta(seconds=1)
    (item,) = await store.due_outbox(T0 + timedelta(seconds=5))
    await store.delivery_failed(item.id, "connection refused", T0 + timedelta(seconds=2))
    await store.mark_delivered(item.id, T0 + timedelta(seconds=3))
    view = await store.get_request("a")
    assert view is not None
    assert view.delivered_at == T0 + timedelta(seconds=3)
    assert (view.delivery_attempts, view.delivery_error) == (1, "connection refused")
    assert await store.list_requests(undelivered_only=True) == []


async def test_everything_survives_close_and_reopen(db_url: str) -> None:
    store = Store.from_url(db_url)
    store.upgrade()
    await store.start()
    await store.accept([req("a"), req("b")])
    await store.complete(
        Completion("a", "dev1", "ok", "", T0, b"resp-a", {"power": "on"}, True, plugin="redfish")
    )
    await store.close()
    await store.close()  # idempotent

    reopened = Store.from_url(db_url)
    assert reopened.schema_status().up_to_date
    await reopened.start()
    try:
        a = await reopened.get_request("a")
        assert a is not None and a.status == "completed" and a.response == b"resp-a"
        assert (await reopened.accept_one(req("a"))).inserted is False
        assert (await reopened.accept_one(req("c"))).inserted is True
        assert await reopened.device_state("dev1") == ({"power": "on"}, 1)
        assert [r.request_id for r in await reopened.claim_unfinished("ctl-a", 30)] == ["b", "c"]
        assert await reopened.undelivered_count() == 1
    finally:
        await reopened.close()


async def test_writes_after_close_are_refused(db_url: str) -> None:
    store = Store.from_url(db_url)
    store.upgrade()
    await store.start()
    pending = [asyncio.ensure_future(store.accept_one(req(f"r{i}"))) for i in range(20)]
    await asyncio.sleep(0)
    await store.close()  # drains what was queued
    assert all(f.done() and f.result().inserted for f in pending)
    with pytest.raises(RuntimeError, match="closed"):
        await store.accept_one(req("late"))


# --- PostgreSQL: several controller processes sharing one database --------------------------------

pg_only = pytest.mark.postgres


@pytest.fixture
async def two_stores(pg_database: URL) -> AsyncIterator[tuple[Store, Store]]:
    """Two stores (two controller processes, as far as the database can tell) on one database."""
    url = pg_database.render_as_string(hide_password=False)
    a, b = Store.from_url(url), Store.from_url(url)
    a.upgrade()
    await a.start()
    await b.start()
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


@pg_only
async def test_pg_concurrent_accept_of_the_same_ids(two_stores: tuple[Store, Store]) -> None:
    a, b = two_stores
    rows = [req(f"r{i}") for i in range(300)]
    ra, rb = await asyncio.gather(a.accept(rows), b.accept(list(reversed(rows))))
    rb = list(reversed(rb))
    for x, y in zip(ra, rb, strict=True):
        assert x.seq == y.seq
        assert x.inserted != y.inserted  # exactly one of the two inserted it


@pg_only
async def test_pg_concurrent_claimers_never_share_a_row(two_stores: tuple[Store, Store]) -> None:
    a, b = two_stores
    await a.accept([req(f"r{i:04d}", owner="dead") for i in range(400)])
    await a.heartbeat("A")
    await b.heartbeat("B")
    for _ in range(3):
        got_a, got_b = await asyncio.gather(a.claim_unfinished("A", 30), b.claim_unfinished("B", 30))
        ids_a = {r.request_id for r in got_a}
        ids_b = {r.request_id for r in got_b}
        assert not ids_a & ids_b
    # Both are live, so after the first round each keeps exactly what it took.
    assert len(ids_a | ids_b) == 400


@pg_only
async def test_pg_claim_skips_rows_locked_by_another_claimer(
    pg_database: URL, two_stores: tuple[Store, Store]
) -> None:
    a, _ = two_stores
    await a.accept([req("r1", owner="dead"), req("r2", owner="dead"), req("r3", owner="dead")])
    engine = sa.create_engine(pg_database)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("SELECT 1 FROM requests WHERE request_id = 'r2' FOR UPDATE"))
            got = await asyncio.wait_for(a.claim_unfinished("A", 30), timeout=10)
            assert [r.request_id for r in got] == ["r1", "r3"]
        got = await a.claim_unfinished("A", 30)
        assert [r.request_id for r in got] == ["r1", "r2", "r3"]
    finally:
        engine.dispose()


@pg_only
async def test_pg_racing_completions_complete_once(two_stores: tuple[Store, Store]) -> None:
    a, b = two_stores
    await a.accept([req(f"r{i}") for i in range(50)])
    results = await asyncio.gather(
        *(s.complete(done(f"r{i}")) for i in range(50) for s in (a, b)),
    )
    assert sum(results) == 50
    assert await a.undelivered_count() == 50
