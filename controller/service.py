"""The gRPC servicers: DeviceController (the topology server's entry point) and the operator-facing
DeviceControllerAdmin. Translation of store rows to admin records lives here too."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
from google.protobuf import empty_pb2, timestamp_pb2

from controller import metrics
from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller._proto.devicecontroller.v1 import admin_pb2_grpc as agrpc
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc
from controller.config import Settings
from controller.delivery import Delivery
from controller.dispatch import Dispatcher, Job
from controller.inventory import DeviceEntry
from controller.logs import clip, request_context
from controller.receipts import desired_records, write_records
from controller.shards import Shards
from controller.store import DeviceView, NewRequest, RequestView, Store, VerificationRow
from controller.supervise import describe
from controller.validate import validate_request
from plugins import registry
from plugins.base import InvalidRequestError, RequestKind

log = logging.getLogger(__name__)


class Watchers:
    """Wakes admin WaitRequest streams when a request changes state in this process."""

    def __init__(self) -> None:
        self._events: dict[str, list[asyncio.Event]] = defaultdict(list)

    def notify(self, request_id: str) -> None:
        for event in self._events.pop(request_id, ()):
            event.set()

    async def wait(self, request_id: str, timeout: float) -> None:
        event = asyncio.Event()
        self._events[request_id].append(event)
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            waiters = self._events.get(request_id)
            if waiters and event in waiters:
                waiters.remove(event)
                if not waiters:
                    del self._events[request_id]


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
            await self._duplicate(row.request_id)
            return
        self.accepted += 1
        if self._shards.runs(row.shard):
            # the device's older requests journaled by other controllers first (they were acked
            # before this one was sent; see NewRequest.claim_older)
            for older in accepted.older:
                self._queue(Job.of(older))
            self._queue(
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

    async def _duplicate(self, request_id: str) -> None:
        """A repeated request_id is not run twice; but if its first ack failed after the commit,
        the journaled request may be in no lane: then it is queued now (by seq, see dispatch)."""
        if not self._dispatcher.knows(request_id):
            view = await self._store.get_request(request_id)
            if (
                view is not None
                and view.status != "completed"
                and view.owner == self._settings.instance_id
                and self._shards.runs(view.shard)
            ):
                log.warning("duplicate request_id of a journaled request that was in no lane: queued now")
                self._queue(
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
                )
                return
        log.info("duplicate request_id: acknowledged without a second execution")

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


_STATUS = {"queued": apb.QUEUED, "running": apb.RUNNING, "completed": apb.COMPLETED}
_STATUS_NAME = {v: k for k, v in _STATUS.items()}


def _ts(value: datetime | None) -> timestamp_pb2.Timestamp | None:
    if value is None:
        return None
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(value)
    return ts


def request_record(view: RequestView) -> apb.RequestRecord:
    record = apb.RequestRecord(
        request_id=view.request_id,
        device=view.device,
        kind=view.kind,
        trace_id=view.trace_id,
        status=_STATUS.get(view.status, apb.REQUEST_STATUS_UNSPECIFIED),
        outcome=view.outcome or "",
        error=view.error or "",
        attempts=view.attempts,
        delivery_attempts=view.delivery_attempts or 0,
        delivery_error=view.delivery_error or "",
        accepted_at=_ts(view.accepted_at),
        started_at=_ts(view.started_at),
        finished_at=_ts(view.finished_at),
        deadline_at=_ts(view.deadline_at),
        delivered_at=_ts(view.delivered_at),
        dead_lettered_at=_ts(view.dead_lettered_at),
    )
    if view.response:
        record.response.ParseFromString(view.response)
    record.writes.extend(write_records(view.writes or ()))
    return record


def device_record(view: DeviceView, queued: int, in_inventory: bool) -> apb.DeviceRecord:
    return apb.DeviceRecord(
        id=view.id,
        plugin=view.plugin or "",
        model_json=json.dumps(view.model_json or {}).encode(),
        state_json=json.dumps(view.state_json).encode() if view.state_json is not None else b"",
        state_version=view.state_version,
        created_at=_ts(view.created_at),
        updated_at=_ts(view.updated_at),
        last_request_id=view.last_request_id or "",
        last_kind=view.last_kind or "",
        last_outcome=view.last_outcome or "",
        last_error=view.last_error or "",
        queued=queued,
        in_inventory=in_inventory,
    )


def verification_record(row: VerificationRow) -> apb.VerificationRecord:
    return apb.VerificationRecord(
        verification_id=row.verification_id,
        device=row.device,
        request_id=row.request_id,
        kind=row.kind,
        status=row.status,
        detail=row.detail or "",
        created_at=_ts(row.created_at),
        due_at=_ts(row.due_at),
        finished_at=_ts(row.finished_at),
    )


#: plans a request without writing (`controller.dryrun.Planner.plan`)
PlanFn = Callable[[pb.DeviceControllerRequest], Coroutine[Any, Any, apb.DryRunResponse]]


class AdminService(agrpc.DeviceControllerAdminServicer):
    """Read-only views of the journal, devices and verifications for operators and the CLI."""

    def __init__(
        self,
        store: Store,
        dispatcher: Dispatcher,
        inventory: Mapping[str, DeviceEntry],
        watchers: Watchers,
        delivery: Delivery | None = None,
        dry_run: PlanFn | None = None,
    ) -> None:
        self._dry_run = dry_run  # controller.dryrun.Planner.plan
        self._store = store
        self._dispatcher = dispatcher
        self._inventory = inventory
        self._watchers = watchers
        self._delivery = delivery

    async def GetStatus(
        self, request: empty_pb2.Empty, context: grpc.aio.ServicerContext
    ) -> apb.ControllerStatus:
        status = apb.ControllerStatus(journal_ok=True, callback_ok=True)
        failure = self._store.write_failure
        if failure is not None:
            status.journal_ok = False
            status.journal_error = failure.reason
            status.journal_error_since.FromSeconds(int(failure.since))
        if self._delivery is not None:
            status.delivered = self._delivery.delivered
            status.dead_lettered = self._delivery.dead_lettered
            destination = self._delivery.destination
            if destination.failing:
                status.callback_ok = False
                status.callback_error = destination.reason
                status.callback_error_since.FromSeconds(int(destination.since or 0))
        try:  # counts need the database, which may be what is failing
            status.undelivered = await self._store.undelivered_count()
            status.dead_letters = await self._store.dead_letter_count()
        except Exception as exc:
            if status.journal_ok:
                status.journal_error = f"cannot read the outbox: {describe(exc)}"
        return status

    async def GetRequest(
        self, request: apb.GetRequestRequest, context: grpc.aio.ServicerContext
    ) -> apb.RequestRecord:
        view = await self._store.get_request(request.request_id)
        if view is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"no request with request_id {request.request_id!r}"
            )
        assert view is not None
        return request_record(view)

    async def DryRun(
        self, request: pb.DeviceControllerRequest, context: grpc.aio.ServicerContext
    ) -> apb.DryRunResponse:
        if self._dry_run is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "dry run is not available on this server")
        assert self._dry_run is not None
        try:
            return await self._dry_run(request)
        except InvalidRequestError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise  # abort raises; this keeps type checkers satisfied

    async def ListRequests(
        self, request: apb.ListRequestsRequest, context: grpc.aio.ServicerContext
    ) -> apb.ListRequestsResponse:
        views = await self._store.list_requests(
            device=request.device or None,
            status=_STATUS_NAME.get(request.status),
            undelivered_only=request.undelivered_only,
            limit=request.limit or 100,
            dead_letter_only=request.dead_letter_only,
            outcome=request.outcome or None,
        )
        return apb.ListRequestsResponse(requests=[request_record(v) for v in views])

    async def WaitRequest(
        self, request: apb.WaitRequestRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[apb.RequestRecord]:
        last: bytes | None = None
        while True:
            view = await self._store.get_request(request.request_id)
            if view is None:
                await context.abort(
                    grpc.StatusCode.NOT_FOUND, f"no request with request_id {request.request_id!r}"
                )
            assert view is not None
            record = request_record(view)
            encoded = record.SerializeToString()
            if encoded != last:
                last = encoded
                yield record
            finished = view.status == "completed" and (not request.wait_for_delivery or view.delivered_at)
            if finished:
                return
            # Woken by this process's runner; the timeout covers other processes and delivery.
            await self._watchers.wait(request.request_id, timeout=0.5)

    async def GetDevice(
        self, request: apb.GetDeviceRequest, context: grpc.aio.ServicerContext
    ) -> apb.DeviceRecord:
        view = await self._store.get_device(request.id)
        if view is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no device {request.id!r} has been seen")
        assert view is not None
        record = device_record(view, self._dispatcher.queued(view.id), view.id in self._inventory)
        record.desired.extend(desired_records(await self._store.desired_for(view.id)))
        return record

    async def ListDevices(
        self, request: apb.ListDevicesRequest, context: grpc.aio.ServicerContext
    ) -> apb.ListDevicesResponse:
        views = await self._store.list_devices(limit=request.limit or 1000)
        return apb.ListDevicesResponse(
            devices=[device_record(v, self._dispatcher.queued(v.id), v.id in self._inventory) for v in views]
        )

    async def ListVerifications(
        self, request: apb.ListVerificationsRequest, context: grpc.aio.ServicerContext
    ) -> apb.ListVerificationsResponse:
        rows = await self._store.list_verifications(
            device=request.device or None,
            verification_id=request.verification_id or None,
            limit=request.limit or 100,
        )
        return apb.ListVerificationsResponse(verifications=[verification_record(r) for r in rows])

    async def ListPlugins(
        self, request: empty_pb2.Empty, context: grpc.aio.ServicerContext
    ) -> apb.ListPluginsResponse:
        out = []
        for source in registry.available():
            try:
                info = registry.load_class(source.name).info
                out.append(
                    apb.PluginInfo(
                        name=source.name, version=info.version, vendor=info.vendor, source=source.target
                    )
                )
            except Exception as exc:  # a broken third-party plugin must not break the listing
                out.append(
                    apb.PluginInfo(name=source.name, version=f"unloadable: {exc}", source=source.target)
                )
        return apb.ListPluginsResponse(plugins=out)
