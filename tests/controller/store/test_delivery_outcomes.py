"""Delivery outcomes are recorded without waiting behind the other writes, on SQLite and PostgreSQL.

A response's receiver has it before its `delivered_at` commits; a process killed in between sends
it again after restart. When the mark queued behind the group-commit writer's backlog (a restart's
lease, claim and completion writes), one kill repeated whole bursts of responses (docs/reliability.md,
"Duplicates after a kill").
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from sqlalchemy.engine import Connection

from controller.store import Store
from tests.controller.store.test_completion import at, finish, req

_BATCH = 4


def _hold(conn: Connection, gates: list[threading.Event]) -> list[None]:
    """A write transaction that stays open until the test lets it go (a slow start-up write)."""
    conn.exec_driver_sql("SELECT 1")
    for gate in gates:
        gate.wait(30)
    return [None for _ in gates]


async def test_a_delivery_mark_overtakes_the_writers_backlog(db_url: str) -> None:
    store = Store.from_url(db_url, batch_max=_BATCH)
    store.upgrade()
    await store.start()
    gate = threading.Event()
    try:
        await store.accept([req("a1")])
        await store.complete(finish("a1"))
        (head,) = await store.due_outbox(at(5))

        held = store._writer.submit(_hold, gate)  # the writer is busy with one transaction...
        await asyncio.sleep(0.05)  # (alone in it)
        order: list[str] = []

        def track(name: str, future: asyncio.Future[Any]) -> asyncio.Future[Any]:
            future.add_done_callback(lambda _: order.append(name))
            return future

        # ... and has several batches queued behind it
        beats = [asyncio.ensure_future(store.heartbeat(f"ctl-{i}")) for i in range(3 * _BATCH)]
        queued = [track(f"heartbeat {i}", beat) for i, beat in enumerate(beats)]
        await asyncio.sleep(0.05)  # all of them are in the writer's queue
        mark = track("mark", asyncio.ensure_future(store.mark_delivered(head.id, at(4))))
        if store.dialect == "postgresql":
            # its own connection: committed while the main writer's transaction is still open
            await asyncio.wait_for(asyncio.shield(mark), 10)
            assert not held.done()
            assert await store.due_outbox(at(5)) == []
        await asyncio.sleep(0.05)
        gate.set()
        await asyncio.gather(held, mark, *queued)
        # recorded before any write that was queued ahead of it
        assert order[0] == "mark", order
        assert await store.due_outbox(at(5)) == []
    finally:
        gate.set()
        await store.close()
