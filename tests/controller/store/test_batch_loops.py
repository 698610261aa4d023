"""Callers on two event loops share the writer (the gRPC server's loop and the execution's,
controller/api/front_door.py): a drain scheduled for one loop's next turn never holds up a caller
on the other. Real SQLite file; which loop ran what is proven by blocking one, never by timings."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from controller.store._batch import BatchWriter


def _insert(conn: Connection, args: list[Any]) -> list[Any]:
    conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS t (v TEXT)")
    for value in args:
        conn.exec_driver_sql("INSERT INTO t VALUES (?)", (value,))
    return list(args)


def test_a_caller_on_another_loop_is_answered_while_the_scheduling_loop_is_blocked(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'loops.db'}")
    writer = BatchWriter(engine)
    answered = threading.Event()
    results: list[Any] = []

    async def other_loop() -> None:
        results.append(await writer.submit(_insert, "ack", first=True))
        answered.set()

    async def blocked_loop() -> None:
        # schedules the drain for this loop's next turn, then blocks this loop (no turn comes)
        mine = writer.submit(_insert, "completion")
        other = threading.Thread(target=asyncio.run, args=(other_loop(),))
        other.start()
        got = answered.wait(30)
        other.join(30)
        assert got, "the other loop's caller waited for this blocked loop"
        assert await mine == "completion"  # and this loop's own write is not lost

    try:
        asyncio.run(blocked_loop())
    finally:
        asyncio.run(writer.close())
    assert results == ["ack"]
    with engine.connect() as conn:
        assert sorted(v for (v,) in conn.exec_driver_sql("SELECT v FROM t")) == ["ack", "completion"]


def test_the_scheduled_start_after_an_early_one_starts_no_second_drain(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'once.db'}")
    writer = BatchWriter(engine)
    drains: list[int] = []
    real_drain = writer._drain

    def counted() -> None:
        drains.append(1)
        real_drain()

    writer._drain = counted  # type: ignore[method-assign]
    other = asyncio.new_event_loop()
    thread = threading.Thread(target=other.run_forever, daemon=True)
    thread.start()

    async def submit_b() -> Any:
        return await writer.submit(_insert, "b", first=True)

    async def main() -> None:
        mine = writer.submit(_insert, "a")  # its drain waits for this loop's next turn
        # this loop blocked: the other loop's caller starts the drain, which commits both
        assert asyncio.run_coroutine_threadsafe(submit_b(), other).result(30) == "b"
        # the scheduled start ran before this answer came (same loop, in order): it started none
        assert await mine == "a"
        assert len(drains) == 1

    try:
        asyncio.run(main())
    finally:
        other.call_soon_threadsafe(other.stop)
        thread.join(10)
        other.close()
        asyncio.run(writer.close())
