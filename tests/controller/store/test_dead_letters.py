"""Dead letters in the outbox and the writer's outage signal, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import exc as sa_exc

from controller.store import Store
from tests.controller.store.test_completion import at, finish, req
from tests.faults import DatabaseOutage


async def test_a_dead_lettered_response_no_longer_holds_back_the_device(store: Store) -> None:
    await store.accept([req("a1"), req("a2"), req("b1", device="dev2")])
    for rid, device in (("a1", "dev1"), ("a2", "dev1"), ("b1", "dev2")):
        await store.complete(finish(rid, device))
    heads = await store.due_outbox(at(5))
    assert [i.request_id for i in heads] == ["a1", "b1"]
    await store.dead_letter(heads[0].id, "RESOURCE_EXHAUSTED: message larger than max", at(3))

    assert [i.request_id for i in await store.due_outbox(at(5))] == ["a2", "b1"]
    assert await store.undelivered_count() == 2
    assert await store.dead_letter_count() == 1
    (dead,) = await store.list_requests(dead_letter_only=True)
    assert dead.request_id == "a1" and dead.dead_lettered_at == at(3) and dead.delivered_at is None
    assert dead.delivery_error.startswith("RESOURCE_EXHAUSTED") and dead.delivery_attempts == 1
    waiting = await store.list_requests(undelivered_only=True)
    assert {v.request_id for v in waiting} == {"a2", "b1"}
    # a delivery recorded late (a race with the dead-lettering) does not resurrect it
    await store.mark_delivered(heads[0].id, at(4))
    assert [i.request_id for i in await store.due_outbox(at(5))] == ["a2", "b1"]


async def test_write_failure_is_set_by_an_outage_and_cleared_by_a_commit(store: Store, db_url: str) -> None:
    await store.accept([req("a")])
    assert store.write_failure is None
    outage = DatabaseOutage(db_url)
    outage.start()
    try:
        with pytest.raises(sa_exc.OperationalError):
            await store.heartbeat("ctl-a")
        failure = store.write_failure
        assert failure is not None and failure.reason.startswith("OperationalError")
        assert "\n" not in failure.reason and len(failure.reason) <= 330
    finally:
        outage.end()
    await store.heartbeat("ctl-a")
    assert store.write_failure is None


async def test_a_bad_statement_is_not_an_outage(store: Store) -> None:
    with pytest.raises(LookupError):
        await store.complete(finish("never-journaled"))
    assert store.write_failure is None
