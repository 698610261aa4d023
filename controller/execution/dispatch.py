"""Per-device lanes: requests for one device run one at a time in journal order (`seq`, which is
arrival order); different devices run concurrently under a global limit. Lanes are bounded;
overflow is reported to the caller (who answers the request with an error), never dropped.

A job queued late (a journaled request that missed its lane, found again by the duplicate path or
the sweep) is inserted by `seq`, so it still runs before newer requests of its device. If a newer
state-changing request of the device has already started, running the old one would undo it: it
is handed to `on_superseded` (answered with an error) instead of run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from controller.observability import metrics
from controller.process import runtime
from controller.store import JournalRow
from plugins.base import RequestKind
from plugins.base.kinds import kind_of

log = logging.getLogger(__name__)


def supersedable(kind: str) -> bool:
    """Whether a request of `kind` that a newer one of its device overtook must not run (it would
    undo the newer one): every kind but those that only read (`plugins.base.kinds.Kind.reads_only`;
    running one late changes nothing, and a readiness check's write cycle restores every cap it
    changes, so it never undoes a newer request)."""
    return not kind_of(kind).reads_only


@dataclass(frozen=True)
class Job:
    """One journaled request, as the dispatcher and runner see it."""

    seq: int
    request_id: str
    device: str
    kind: RequestKind
    payload: bytes  # the serialized DeviceControllerRequest
    trace_id: str
    deadline_at: datetime
    #: the device's shard (controller/cluster/shards.py): run only while this process holds its lease
    shard: int = 0

    @classmethod
    def of(cls, row: JournalRow) -> Job:
        """The job of a journal row (claimed, or found again)."""
        return cls(
            row.seq,
            row.request_id,
            row.device,
            RequestKind(row.kind),
            row.payload,
            row.trace_id,
            row.deadline_at,
            row.shard,
        )


#: request ids of journaled rows whose kind this release does not know, logged once each (at most
#: `_UNKNOWN_KINDS_KEPT` remembered)
_UNKNOWN_KINDS_SEEN: set[str] = set()
_UNKNOWN_KINDS_KEPT = 10_000


def job_of(row: JournalRow) -> Job | None:
    """The job of a journal row, or None when its kind is one this release does not know (a
    newer release sharing the database journaled it): left in the journal for a controller that
    knows it, with one warning per request, never an error that stops the claim of the others."""
    try:
        return Job.of(row)
    except ValueError:
        if row.request_id not in _UNKNOWN_KINDS_SEEN:
            if len(_UNKNOWN_KINDS_SEEN) >= _UNKNOWN_KINDS_KEPT:
                _UNKNOWN_KINDS_SEEN.clear()  # bounded: such a request may be warned of once more
            _UNKNOWN_KINDS_SEEN.add(row.request_id)
            log.warning(
                "request %s of %s has kind %r, which this devicectl does not know (journaled by a "
                "newer release?): not run here, left for a controller that knows it",
                row.request_id,
                row.device,
                row.kind[:100],
            )
        return None


class Dispatcher:
    """Runs jobs through `execute`, one lane per device, at most `max_concurrency` at once."""

    def __init__(
        self,
        execute: Callable[[Job], Awaitable[bool | None]],
        *,
        max_concurrency: int,
        queue_limit: int,
        on_superseded: Callable[[Job, int], Awaitable[None]] | None = None,
    ) -> None:
        self._execute = execute
        self._on_superseded = on_superseded
        #: per device, the highest seq of a state-changing job started in this process
        self._started: dict[str, int] = {}
        self._slots = asyncio.Semaphore(max_concurrency)
        self._queue_limit = queue_limit
        self._lanes: dict[str, deque[Job]] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._known: set[str] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        #: jobs inside `execute` now (metrics: in flight)
        self.running = 0
        self._queued_at: dict[str, float] = {}
        #: per device, held while one of its jobs runs (and by other device work, see `exclusive`)
        self._exclusive: dict[str, asyncio.Lock] = {}

    def submit(self, job: Job) -> bool:
        """Queue a job on its device's lane. False when the lane is full (the job is not queued)."""
        if job.request_id in self._known:
            return True  # already queued or running here (e.g. re-claimed during recovery)
        lane = self._lanes.setdefault(job.device, deque())
        if len(lane) >= self._queue_limit:
            return False
        # by seq: normally at the end, a late job (see the module docstring) further in
        at = len(lane)
        while at and lane[at - 1].seq > job.seq:
            at -= 1
        lane.insert(at, job)
        self._known.add(job.request_id)
        self._queued_at[job.request_id] = time.monotonic()
        self._idle.clear()
        if job.device not in self._tasks:
            self._tasks[job.device] = asyncio.create_task(
                self._run_lane(job.device), name=f"lane:{job.device}"
            )
        return True

    def queued(self, device: str) -> int:
        """Jobs waiting (not running) on a device's lane."""
        return len(self._lanes.get(device, ()))

    def busy(self, device: str) -> bool:
        """Whether a job of the device is running or waiting here."""
        return device in self._tasks

    def exclusive(self, device: str) -> asyncio.Lock:
        """The device's lock: its lane holds it while a job runs; work on the device outside the
        journal (a readiness verification's write cycle) holds it so the two never interleave."""
        return self._exclusive.setdefault(device, asyncio.Lock())

    def knows(self, request_id: str) -> bool:
        return request_id in self._known

    @property
    def active_lanes(self) -> int:
        return len(self._tasks)

    @property
    def waiting(self) -> int:
        """Jobs waiting (not running) on all lanes."""
        return sum(len(lane) for lane in list(self._lanes.values()))

    async def _run_lane(self, device: str) -> None:
        lane = self._lanes[device]
        try:
            while lane:
                job = lane.popleft()
                try:
                    newer = self._started.get(device, -1)
                    if job.seq < newer and supersedable(job.kind) and self._on_superseded:
                        await self._on_superseded(job, newer)
                        continue
                    async with self._slots, self.exclusive(device):
                        queued_at = self._queued_at.pop(job.request_id, None)
                        if queued_at is not None:
                            metrics.QUEUE_SECONDS.observe(time.monotonic() - queued_at)
                        self.running += 1
                        runtime.jobs_running(self.running)
                        started = True
                        try:
                            # False: not run here (its shard's lease lapsed); it is queued
                            # again later and must not count as a newer request that started
                            started = await self._execute(job) is not False
                        finally:
                            self.running -= 1
                            runtime.jobs_running(self.running)
                            if started and supersedable(job.kind):
                                self._started[device] = max(self._started.get(device, -1), job.seq)
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if task is None or task.cancelling():
                        raise  # the lane is being stopped
                    # NOTE: a library's own cancellation escaped the job (a gRPC call whose
                    # channel was closed): ending the lane would strand its other jobs
                    log.error(
                        "lane %s: %s ended as cancelled without a stop; it stays journaled and the "
                        "sweep runs it again",
                        device,
                        job.request_id,
                    )
                except Exception:  # the runner answers errors itself; this is a last line of defence
                    log.exception("lane %s: unexpected error running %s", device, job.request_id)
                finally:
                    self._known.discard(job.request_id)
                    self._queued_at.pop(job.request_id, None)
        finally:
            self._tasks.pop(device, None)
            if not lane:
                self._lanes.pop(device, None)
            if not self._tasks:
                self._idle.set()

    async def drain(self, timeout: float) -> bool:
        """Wait until every lane is empty; True if that happened within `timeout`."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except TimeoutError:
            return False

    async def cancel(self) -> None:
        """Stop all lanes. Cancelled work stays journaled and runs again after restart."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._lanes.clear()
        self._known.clear()
        self._queued_at.clear()
