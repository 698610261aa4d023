"""A lock held by another session makes journal writes wait, not fail: the writer reports the stall."""

from __future__ import annotations

import asyncio

from controller.store import Store
from tests.controller.store.test_journal import req
from tests.faults import JournalLock


async def test_a_write_waiting_behind_a_lock_is_reported_as_a_stall_until_it_commits(
    store: Store, db_url: str
) -> None:
    store.stall_after = 0.3
    await store.accept_one(req("before"))
    assert store.write_failure is None
    lock = JournalLock(db_url)
    lock.start()
    try:
        write = asyncio.ensure_future(store.accept_one(req("waiting")))
        async with asyncio.timeout(10):  # bounded wait for the event, not a timing assertion
            while True:
                failure = store.write_failure
                if failure is not None:
                    break
                await asyncio.sleep(0.05)
        assert failure.stalled and "waited" in failure.reason
        assert not write.done()  # nothing failed: the write is still waiting for its commit
    finally:
        lock.end()
    await asyncio.wait_for(write, 30)
    assert store.write_failure is None  # the commit went through: no stall any more


async def test_no_stall_is_reported_without_a_limit_or_while_idle(store: Store) -> None:
    assert store.stall_after is None and store.write_failure is None
    store.stall_after = 0.0
    await store.accept_one(req("a"))
    assert store.write_failure is None  # nothing pending: nothing can be late
