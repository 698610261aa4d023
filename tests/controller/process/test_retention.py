"""Retention on SQLite and PostgreSQL: old finished rows go in bounded batches; an undelivered
response, a young dead letter and an unfinished request are never pruned."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from controller.store import Completion, NewRequest, RetentionPolicy, Store, prune, table_rows

NOW = datetime.now(UTC)


def days_ago(days: float) -> datetime:
    return NOW - timedelta(days=days)


async def _request(store: Store, rid: str, at: datetime) -> None:
    await store.accept_one(
        NewRequest(
            request_id=rid,
            device="node000",
            kind="ping",
            payload=b"",
            trace_id="",
            accepted_at=at,
            deadline_at=at + timedelta(seconds=60),
            owner="test",
        )
    )


async def _completed(store: Store, rid: str, at: datetime) -> int:
    await _request(store, rid, at)
    await store.complete(
        Completion(
            request_id=rid,
            device="node000",
            outcome="ok",
            error="",
            finished_at=at,
            response=rid.encode(),
            new_state={"last": rid},
            touch_device=True,
            kind="ping",
        )
    )
    view = await store.get_request(rid)
    assert view is not None and view.status == "completed"
    return await _outbox_id(store, rid)


async def _outbox_id(store: Store, rid: str) -> int:
    import sqlalchemy as sa

    from controller.store._models import OUTBOX

    def read(conn: sa.Connection) -> int:
        return int(conn.execute(sa.select(OUTBOX.c.id).where(OUTBOX.c.request_id == rid)).scalar_one())

    return await store._read(read)


async def test_prune_keeps_undelivered_and_young_dead_letters(store: Store) -> None:
    delivered_old = [f"old-{i}" for i in range(7)]
    for rid in delivered_old:
        await store.mark_delivered(await _completed(store, rid, days_ago(40)), days_ago(40))
    await _completed(store, "undelivered", days_ago(400))  # never delivered: kept at any age
    await store.dead_letter(await _completed(store, "dead-young", days_ago(40)), "refused", days_ago(40))
    await store.dead_letter(await _completed(store, "dead-old", days_ago(100)), "refused", days_ago(100))
    await store.mark_delivered(await _completed(store, "recent", days_ago(1)), days_ago(1))
    await _request(store, "queued", days_ago(40))  # never ran (controller down): kept
    before = await table_rows(store)

    policy = RetentionPolicy(journal_days=30, outbox_days=30, dead_letter_days=90, audit_days=90, batch=2)
    result = await prune(store, policy, NOW)

    gone = {*delivered_old, "dead-old"}
    kept = {"undelivered", "dead-young", "recent", "queued"}
    assert result.deleted["requests"] == len(gone) and result.deleted["outbox"] == len(gone)
    for rid in gone:
        assert await store.get_request(rid) is None
    for rid in kept:
        assert await store.get_request(rid) is not None, rid
    assert await store.undelivered_count() == 1
    assert await store.dead_letter_count() == 1
    # audit rows older than 90 days: the undelivered (400 days) and dead-old (100 days) requests'
    assert result.deleted["state_audit"] == 2
    after = await table_rows(store)
    assert {t: before[t] - after[t] for t in after} == result.deleted
    assert (await prune(store, policy, NOW)).total == 0  # nothing more to do


async def test_zero_days_keeps_everything(store: Store) -> None:
    await store.mark_delivered(await _completed(store, "ancient", days_ago(3650)), days_ago(3650))
    keep = RetentionPolicy(journal_days=0, outbox_days=0, dead_letter_days=0, audit_days=0)
    assert (await prune(store, keep, NOW)).total == 0
    assert await store.get_request("ancient") is not None


async def test_db_prune_by_hand(tmp_path, capsys) -> None:
    import asyncio
    import json

    from controller.cli import main

    url = f"sqlite:///{tmp_path / 'x.db'}"
    s = Store.from_url(url)
    s.upgrade()
    await s.start()
    await s.mark_delivered(await _completed(s, "done", days_ago(40)), days_ago(40))
    await _completed(s, "waiting", days_ago(40))
    await s.close()
    code = await asyncio.to_thread(main, ["--json", "db", "prune", "--database-url", url])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["deleted"] == {"requests": 1, "outbox": 1, "state_audit": 0}
    code = await asyncio.to_thread(main, ["db", "prune", "--database-url", url, "--journal-days", "0"])
    assert code == 0 and "requests: 0 deleted" in capsys.readouterr().out


async def test_serve_prunes_periodically(start_controller, sink) -> None:
    """The supervised retention task: a delivered request is pruned once past its (tiny) age."""
    from tests.controller.conftest import memory_inventory
    from tests.controller.observability.test_metrics import gpu_caps

    day = 1 / 86400
    h = await start_controller(
        memory_inventory(1),
        retention_interval=0.2,
        retention_journal_days=0.5 * day,
        retention_outbox_days=0.5 * day,
    )
    await h.stub.SendDeviceRequest(gpu_caps("node000", "p-1", {0: 450}))
    await sink.wait_for({"p-1"}, timeout=10)
    store = h.controller.store

    async def pruned() -> None:
        # the journal row and its outbox row are pruned by their own ages: the outbox's clock starts
        # at delivery, a moment after the request completed, so it may go one round later
        while (  # noqa: ASYNC110 (polls the database)
            await store.get_request("p-1") is not None or (await table_rows(store))["outbox"] != 0
        ):
            await asyncio.sleep(0.1)

    await asyncio.wait_for(pruned(), 15)
    assert (await table_rows(store))["outbox"] == 0
