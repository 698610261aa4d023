"""Coalesced device reads (controller/store/_coalesce.py): concurrent `Store.get_device` calls share
a query per round on SQLite and PostgreSQL, each caller gets its own row (or None), a read sees the
rows as they were after its call, and a failed or cancelled round leaves no caller hanging."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from controller.store import DeviceUpsert, Store
from controller.store._coalesce import CoalescedReads


async def test_concurrent_reads_share_queries_and_each_gets_its_own_row(store: Store) -> None:
    ids = [f"node{i:04d}" for i in range(1200)]
    await store.sync_inventory([DeviceUpsert(d, "redfish", {"n": i}) for i, d in enumerate(ids)])
    reads = store._device_reads
    before = reads.rounds

    asked = [*ids, "absent", ids[7]]  # a device that does not exist; one asked for twice
    views = await asyncio.gather(*(store.get_device(d) for d in asked))

    assert [v.id if v is not None else None for v in views] == [*ids, None, ids[7]]
    assert [v.model_json for v in views[:3] if v is not None] == [{"n": 0}, {"n": 1}, {"n": 2}]
    # one round for the first caller's turn of the loop, at most 500 ids a round: 1,201 keys in 3
    assert reads.rounds - before == 3


async def test_a_lone_read_is_not_held_back_and_sees_what_was_committed_before_it(store: Store) -> None:
    await store.sync_inventory([DeviceUpsert("a", "redfish", {"v": 1})])
    first = await store.get_device("a")
    await store.sync_inventory([DeviceUpsert("a", "redfish", {"v": 2})])
    second = await store.get_device("a")
    assert first is not None and first.model_json == {"v": 1}
    assert second is not None and second.model_json == {"v": 2}


class _Reader:
    """A reader whose rounds the test releases one at a time (what a busy read pool does)."""

    def __init__(self) -> None:
        self.rounds: list[list[str]] = []
        self.release = asyncio.Event()
        self.fail: BaseException | None = None

    async def read(self, fetch: Any, keys: Sequence[str]) -> dict[str, str]:
        self.rounds.append(list(keys))
        await self.release.wait()
        self.release.clear()
        if self.fail is not None:
            raise self.fail
        result: dict[str, str] = fetch(None, keys)
        return result


def _rows(_conn: Any, keys: Sequence[str]) -> dict[str, str]:
    return {k: k.upper() for k in keys if k != "missing"}


def _reads() -> tuple[_Reader, CoalescedReads[str, str]]:
    reader = _Reader()
    return reader, CoalescedReads(reader.read, _rows)


async def _in_flight(reads: CoalescedReads[str, str], *keys: str) -> list[asyncio.Task[str | None]]:
    """Callers of `keys` whose round has started (the reader holds it until released)."""
    callers = [asyncio.create_task(reads.get(k)) for k in keys]
    await asyncio.sleep(0)  # the callers ask
    await asyncio.sleep(0)  # their round starts
    return callers


async def test_keys_asked_while_a_round_runs_wait_for_the_next_round() -> None:
    reader, reads = _reads()
    (early,) = await _in_flight(reads, "a")
    assert reader.rounds == [["a"]]  # started at once, alone
    late = [asyncio.ensure_future(reads.get(k)) for k in ("b", "missing", "a")]
    await asyncio.sleep(0)
    assert reader.rounds == [["a"]]  # not added to the round in flight: it read before they asked
    reader.release.set()
    assert await early == "A"
    await asyncio.sleep(0)
    assert reader.rounds == [["a"], ["b", "missing", "a"]]
    reader.release.set()
    assert await asyncio.gather(*late) == ["B", None, "A"]


async def test_a_failed_round_fails_its_callers_only_and_the_next_round_runs() -> None:
    reader, reads = _reads()
    (doomed,) = await _in_flight(reads, "a")
    later = asyncio.ensure_future(reads.get("b"))
    await asyncio.sleep(0)
    reader.fail = OSError("database is locked")
    reader.release.set()
    with pytest.raises(OSError, match="locked"):
        await doomed
    reader.fail = None
    await asyncio.sleep(0)
    reader.release.set()
    assert await later == "B"
    assert reader.rounds == [["a"], ["b"]]


async def test_a_cancelled_caller_leaves_the_others_their_rows() -> None:
    reader, reads = _reads()
    gone, kept = await _in_flight(reads, "a", "a")
    gone.cancel()
    reader.release.set()
    assert await kept == "A"
    assert gone.cancelled()


async def test_cancelling_the_rounds_cancels_every_caller_waiting() -> None:
    reader, reads = _reads()
    callers = await _in_flight(reads, "a", "b")
    queued = asyncio.ensure_future(reads.get("c"))
    await asyncio.sleep(0)
    (rounds,) = reads.running()
    rounds.cancel()
    results = await asyncio.gather(*callers, queued, return_exceptions=True)
    assert all(isinstance(r, asyncio.CancelledError) for r in results), results
    # and a later read starts a round of its own
    (again,) = await _in_flight(reads, "d")
    reader.release.set()
    assert await again == "D"


async def test_a_caller_on_another_loop_gets_a_round_of_its_own() -> None:
    """The execution loop and the front door's loop (the admin API) share one store: a caller on
    the second loop neither joins nor waits for a round of the first (its future could be
    completed only from its own loop's thread), and the first loop's round is not disturbed."""
    gate = asyncio.Event()

    async def read(fetch: Any, keys: Sequence[str]) -> dict[str, str]:
        if "held" in keys:
            await gate.wait()  # only this loop's round waits here
        rows: dict[str, str] = fetch(None, keys)
        return rows

    reads: CoalescedReads[str, str] = CoalescedReads(read, _rows)
    (held,) = await _in_flight(reads, "held")
    answers: dict[str, str | None] = {}

    def other_loop() -> None:
        async def ask() -> None:
            # bounded: on a shared round the answer would come from another thread, or never
            answers["b"] = await asyncio.wait_for(reads.get("b"), 10)

        with contextlib.suppress(TimeoutError):
            asyncio.run(ask())

    thread = threading.Thread(target=other_loop)
    thread.start()
    await asyncio.to_thread(thread.join, 30)
    assert answers == {"b": "B"}
    assert not held.done()
    gate.set()
    assert await held == "HELD"
