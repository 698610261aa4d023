"""A busy writer lets a small next batch fill for a moment (`BatchWriter(linger=...)`): the
operations that come while it commits, and those its woken callers send at once, share one
transaction instead of one each. An idle writer never waits. Real SQLite file; which operations
shared a transaction is read from what the handler was given, never from timings."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from controller.store._batch import BatchWriter


class Recorder:
    """A handler that records each call's arguments (one call per transaction here: one handler),
    and whose first call waits until `release` is set (a slow commit in progress)."""

    def __init__(self) -> None:
        self.calls: list[list[Any]] = []
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, conn: Connection, args: list[Any]) -> list[Any]:
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS t (v TEXT)")
        conn.exec_driver_sql("INSERT INTO t VALUES ('x')")
        self.calls.append(list(args))
        if len(self.calls) == 1:
            self.started.set()
            assert self.release.wait(30), "the test never released the first transaction"
        return list(args)


async def _busy_writer_run(tmp_path: Path, linger: float) -> tuple[list[list[Any]], int]:
    """Op "a" commits slowly; "b" is sent meanwhile; "c" and "d" as soon as "a" is answered."""
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'linger.db'}")
    writer = BatchWriter(engine, linger=linger)
    record = Recorder()
    try:
        first = writer.submit(record, "a")
        await asyncio.to_thread(record.started.wait, 30)
        second = writer.submit(record, "b")  # queued while "a" commits
        record.release.set()
        assert await first == "a"
        later = [writer.submit(record, "c"), writer.submit(record, "d")]  # the woken caller's follow-ups
        assert await asyncio.gather(second, *later) == ["b", "c", "d"]
        return record.calls, writer.stats.lingered
    finally:
        await writer.close()
        engine.dispose()


async def test_a_busy_writer_lets_a_small_next_batch_fill(tmp_path: Path) -> None:
    calls, lingered = await _busy_writer_run(tmp_path, linger=2.0)
    assert calls == [["a"], ["b", "c", "d"]] and lingered == 1


async def test_without_linger_the_write_queued_during_a_commit_goes_alone(tmp_path: Path) -> None:
    calls, lingered = await _busy_writer_run(tmp_path, linger=0.0)
    assert calls[:2] == [["a"], ["b"]] and lingered == 0


async def test_an_idle_writer_never_lingers(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'idle.db'}")
    writer = BatchWriter(engine, linger=60.0)  # a linger would outlast the test's own timeout
    record = Recorder()
    record.release.set()
    try:
        for value in ("a", "b", "c"):
            assert await writer.submit(record, value) == value
        assert record.calls == [["a"], ["b"], ["c"]] and writer.stats.lingered == 0
    finally:
        await writer.close()
        engine.dispose()
