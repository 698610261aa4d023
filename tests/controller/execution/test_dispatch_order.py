"""Lanes run jobs in journal order, even a job that is queued late; a late state-changing job
whose device already started a newer one is superseded, not run."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from controller.execution.dispatch import Dispatcher, Job
from plugins.base import RequestKind

NOW = datetime.now(UTC)


def job(seq: int, kind: RequestKind = RequestKind.GPU_POLICIES_UPDATE, device: str = "d") -> Job:
    return Job(seq, f"r{seq}", device, kind, b"", "", NOW)


async def test_a_late_job_runs_before_newer_queued_jobs_and_superseded_ones_are_answered() -> None:
    ran: list[str] = []
    superseded: list[tuple[str, int]] = []
    gate = asyncio.Event()

    async def execute(j: Job) -> None:
        ran.append(j.request_id)
        if j.seq == 1:
            await gate.wait()

    async def on_superseded(j: Job, newer: int) -> None:
        superseded.append((j.request_id, newer))

    dispatcher = Dispatcher(execute, max_concurrency=4, queue_limit=10, on_superseded=on_superseded)
    assert dispatcher.submit(job(1))
    await asyncio.sleep(0)
    assert ran == ["r1"]
    assert dispatcher.submit(job(5))
    assert dispatcher.submit(job(3))  # found late (sweep or duplicate): still ahead of r5
    gate.set()
    assert await dispatcher.drain(5)
    assert ran == ["r1", "r3", "r5"]

    # r4 turns up after r5 ran: running it now would undo r5, so it is answered instead;
    # a read-only request is simply run
    assert dispatcher.submit(job(4))
    assert dispatcher.submit(job(2, RequestKind.PING))
    assert await dispatcher.drain(5)
    assert superseded == [("r4", 5)]
    assert ran == ["r1", "r3", "r5", "r2"]


async def test_a_job_that_ends_as_cancelled_without_a_stop_does_not_end_its_lane() -> None:
    """A cancellation raised inside a job that nobody cancelled (gRPC ends a call whose channel
    was closed that way) must not strand the lane's later jobs."""
    ran: list[str] = []

    async def execute(j: Job) -> None:
        ran.append(j.request_id)
        if j.seq == 1:
            raise asyncio.CancelledError

    dispatcher = Dispatcher(execute, max_concurrency=4, queue_limit=10)
    assert dispatcher.submit(job(1))
    assert dispatcher.submit(job(2))
    assert await dispatcher.drain(5)
    assert ran == ["r1", "r2"]
    assert not dispatcher.knows("r1"), "left to the sweep, which runs it again"
