"""The DeviceController servicer, the topology server's entry point: validate, journal (committed
before the ack), queue. The operator-facing admin servicer is `controller.api.admin`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
from google.protobuf import empty_pb2

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc
from controller.api.front_door import Handover
from controller.api.validate import validate_request
from controller.cluster.shards import Shards
from controller.config import Settings
from controller.execution.dispatch import Dispatcher, Job, job_of
from controller.observability import metrics
from controller.observability.logs import clip, request_context
from controller.process.supervise import describe
from controller.store import NewRequest, Store
from plugins.base import InvalidRequestError, RequestKind

log = logging.getLogger(__name__)


class JournalUnavailableError(RuntimeError):
    """The request could not be committed to the journal (not acknowledged; the caller retries)."""


class DeviceControllerService(dgrpc.DeviceControllerServicer):
    """Validates, journals (committed before the ack) and queues each request."""

    def __init__(
        self,
        store: Store,
        dispatcher: Dispatcher,
        settings: Settings,
        reject: Callable[[Job, str], Coroutine[Any, Any, None]],
        shards: Shards | None = None,
    ) -> None:
        self._store = store
        self._dispatcher = dispatcher
        self._settings = settings
        self._reject = reject
        #: a request of a shard this process runs goes straight into its lane; any other is
        #: journaled for the shard's owner, who claims it
        self._shards = shards or Shards({}, settings.shard_count)
        self.accepted = 0
        #: where accepted jobs go to the dispatcher's loop; None: queued directly (one loop)
        self._handover: Handover[Job] | None = None

    def execute_on(self, loop: asyncio.AbstractEventLoop) -> None:
        """Queue accepted requests on `loop`, the dispatcher's, from whichever loop accepts them
        (the front door's, controller/api/front_door.py)."""
        self._handover = Handover(loop, self._queue, key=lambda job: job.request_id)

    async def SendDeviceRequest(
        self, request: pb.DeviceControllerRequest, context: grpc.aio.ServicerContext
    ) -> empty_pb2.Empty:
        with request_context(request.device, request.request_id, request.trace_id):
            try:
                await self.accept(request)
            except InvalidRequestError as exc:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            except JournalUnavailableError as exc:
                await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
            return empty_pb2.Empty()

    async def accept(self, request: pb.DeviceControllerRequest) -> None:
        """Validate, journal (committed on return) and queue one request: the ack path of both
        transports. Raises InvalidRequestError or JournalUnavailableError."""
        received = time.monotonic()
        try:
            validate_request(
                request,
                max_json_bytes=self._settings.max_json_bytes,
                max_json_depth=self._settings.max_json_depth,
            )
        except InvalidRequestError as exc:
            log.info("rejected: %s", clip(exc))
            raise
        kind = RequestKind(request.WhichOneof("request"))
        if self._holds(request.request_id):
            # NOTE: a job is handed over or in a lane only once its row is committed: a repeat of
            # it (a caller retrying while its request runs: a wave's slow acks) is acknowledged
            # without a journal write, which would find the row and change nothing
            log.info("duplicate request_id of a request in progress: acknowledged without a second execution")
            metrics.ACK_SECONDS.observe(time.monotonic() - received)
            metrics.ACCEPTED.labels(kind.value).inc()
            return
        now = datetime.now(UTC)
        timeout = request.timeout_seconds or self._settings.device_call_timeout
        shard = self._shards.shard_for(request.device, request.device_model_json)
        row = NewRequest(
            request_id=request.request_id,
            device=request.device,
            kind=kind.value,
            payload=request.SerializeToString(),
            trace_id=request.trace_id,
            accepted_at=now,
            deadline_at=now + timedelta(seconds=timeout),
            owner=self._settings.instance_id,
            shard=shard,
            # leased shards only: on SQLite nobody else journals, so there is nothing to claim
            claim_older=self._shards.leased and self._shards.runs(shard),
        )
        task = asyncio.ensure_future(self._journal_and_queue(row, kind))
        _background.add(task)
        task.add_done_callback(_settle)
        try:
            # Shielded: a caller that gives up (deadline, disconnect) once the row may be
            # committed must not leave the request journaled but in no lane.
            await asyncio.shield(task)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("journal write failed: %s", describe(exc))
            raise JournalUnavailableError("request journal unavailable; retry later") from None
        metrics.ACK_SECONDS.observe(time.monotonic() - received)
        metrics.ACCEPTED.labels(kind.value).inc()

    async def _journal_and_queue(self, row: NewRequest, kind: RequestKind) -> None:
        accepted = await self._store.accept_one(row)
        if not accepted.inserted:
            await self._duplicate(row.request_id, completed=accepted.completed)
            return
        self.accepted += 1
        if self._shards.runs(row.shard):
            # the device's older requests journaled by other controllers first (they were acked
            # before this one was sent; see NewRequest.claim_older)
            jobs = [job for job in map(job_of, accepted.older) if job is not None]
            jobs.append(
                Job(
                    accepted.seq,
                    row.request_id,
                    row.device,
                    kind,
                    row.payload,
                    row.trace_id,
                    row.deadline_at,
                    row.shard,
                )
            )
            self._hand_over(jobs)

    def _hand_over(self, jobs: list[Job]) -> None:
        """Queue jobs in this order on the dispatcher's loop (here when there is no front door)."""
        if self._handover is None:
            for job in jobs:
                self._queue(job)
        else:
            self._handover.give(jobs)

    async def _duplicate(self, request_id: str, *, completed: bool) -> None:
        """A repeated request_id is not run twice; but if its first ack failed after the commit,
        the journaled request may be in no lane: then it is queued now (by seq, see dispatch).
        `completed`: the journaling transaction read the row completed (it never runs again, so it
        is not read once more: a repeat's ack cost a read on a reader thread, measured at about a
        third of its CPU)."""
        if completed:
            log.info("duplicate request_id: acknowledged without a second execution")
            return
        if not self._holds(request_id):
            view = await self._store.get_request(request_id)
            if (
                view is not None
                and view.status != "completed"
                and view.owner == self._settings.instance_id
                and self._shards.runs(view.shard)
            ):
                log.warning("duplicate request_id of a journaled request that was in no lane: queued now")
                # (the dispatcher ignores a job it already knows: one handed over meanwhile)
                self._hand_over(
                    [
                        Job(
                            view.seq,
                            view.request_id,
                            view.device,
                            RequestKind(view.kind),
                            view.payload,
                            view.trace_id,
                            view.deadline_at,
                            view.shard,
                        )
                    ]
                )
                return
        log.info("duplicate request_id: acknowledged without a second execution")

    def _holds(self, request_id: str) -> bool:
        """Whether the request is handed over to the dispatcher's loop or in one of its lanes
        (read from the accepting loop's thread: a membership test, under its own lock for the
        handover)."""
        return (self._handover is not None and self._handover.holds(request_id)) or self._dispatcher.knows(
            request_id
        )

    def _queue(self, job: Job) -> None:
        if self._dispatcher.submit(job):
            return
        limit = self._settings.queue_limit
        error = f"device {job.device!r} has {limit} requests queued (queue_limit); request not run"
        task = asyncio.ensure_future(self._reject(job, error))
        _background.add(task)
        task.add_done_callback(_background.discard)


_background: set[asyncio.Future[None]] = set()


def _settle(task: asyncio.Future[None]) -> None:
    """Forget a finished accept task, retrieving its error (the waiting caller got it as UNAVAILABLE;
    a caller that had already gone retries)."""
    _background.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.debug("accept task failed: %s", describe(task.exception()))  # type: ignore[arg-type]
