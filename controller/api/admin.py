"""The operator-facing DeviceControllerAdmin servicer (status, requests, devices, verifications,
plugins, dry runs, waiting on a request); its lists answer in pages (`controller.api.pages`) and
take label selectors; store rows become admin records in `controller.api.records`."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import Any

import grpc
from google.protobuf import empty_pb2

from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller._proto.devicecontroller.v1 import admin_pb2_grpc as agrpc
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.api import pages, selectors
from controller.api.records import (
    STATUS,
    device_record,
    request_record,
    selected,
    ts,
    verification_record,
)
from controller.delivery.outbox import Delivery
from controller.execution.dispatch import Dispatcher
from controller.execution.warmup import WarmupProgress
from controller.inventory import DeviceEntry
from controller.process.reports import Report
from controller.process.supervise import describe
from controller.store import BmcCheckRow, BmcHealthRow, Store
from controller.verify import checker, render
from plugins import registry
from plugins.base import InvalidRequestError

_STATUS_NAME = {v: k for k, v in STATUS.items()}
#: a run's verifications per page (StartVerify's answer, GetBmcCheck of a run)
CHECK_PAGE_ROWS = 500


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


def health_record(row: BmcHealthRow, in_inventory: bool) -> apb.BmcHealth:
    """A device's reachability (`devicectl devices health`)."""
    return apb.BmcHealth(
        device=row.device,
        last_success_at=ts(row.last_success_at),
        inaccessible_since=ts(row.inaccessible_since),
        last_error=row.last_error,
        last_error_at=ts(row.last_error_at),
        sync_in_progress=row.sync_in_progress,
        cert_not_after=ts(row.cert_not_after),
        in_inventory=in_inventory,
    )


async def fleet_summary(store: Store, inventory: Mapping[str, Any]) -> apb.FleetSummary:
    """How many inventory nodes drifted, are unreachable, unverified, or were never checked."""
    counts = await store.fleet_counts(list(inventory))
    return apb.FleetSummary(
        nodes=len(inventory),
        drifted=counts.drifted,
        unreachable=counts.unreachable,
        unverified=len(inventory) - counts.verified,
        never_checked=len(inventory) - counts.checked,
    )


def combine_executors(status: apb.ControllerStatus, executors: list[Report]) -> None:
    """The callback as the executors see it: up only when every running one reports it up (an
    executor whose process ended says nothing about the callback: `not_running` says why)."""
    down = [r for r in executors if not r.callback_ok and not r.not_running]
    status.callback_ok = not down
    status.callback_error = "; ".join(f"{r.instance_id}: {r.callback_error}" for r in down)
    since = [r.since for r in down if r.since]
    if since:
        status.callback_error_since.FromSeconds(int(min(since)))
    status.delivered = sum(r.delivered for r in executors)
    status.dead_lettered = sum(r.dead_lettered for r in executors)
    for r in executors:
        process = status.processes.add(
            instance_id=r.instance_id,
            callback_ok=r.callback_ok,
            callback_error=r.callback_error,
            delivered=r.delivered,
            dead_lettered=r.dead_lettered,
            report_age_seconds=r.age if r.age != float("inf") else -1.0,
            not_running=r.not_running,
        )
        if r.since:
            process.callback_error_since.FromSeconds(int(r.since))


#: plans a request without writing (`controller.desired.dryrun.Planner.plan`)
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
        executor_reports: Callable[[], list[Report] | None] | None = None,
        shadow: bool = False,
        warmup: Callable[[], WarmupProgress | None] | None = None,
    ) -> None:
        self._shadow = shadow  # shadow mode: `status` says so
        self._warmup = warmup  # the warm-up at start of a process that runs requests
        self._dry_run = dry_run  # controller.desired.dryrun.Planner.plan
        self._executor_reports = executor_reports  # a --workers front end's executors
        self._store = store
        self._dispatcher = dispatcher
        self._inventory = inventory
        self._watchers = watchers
        self._delivery = delivery

    async def GetStatus(
        self, request: empty_pb2.Empty, context: grpc.aio.ServicerContext
    ) -> apb.ControllerStatus:
        status = apb.ControllerStatus(journal_ok=True, callback_ok=True, shadow=self._shadow)
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
        progress = self._warmup() if self._warmup is not None else None
        if progress is not None:
            status.warmup.CopyFrom(
                apb.WarmupStatus(
                    total=progress.total,
                    done=progress.done,
                    failed=progress.failed,
                    skipped=progress.skipped,
                    finished=progress.finished,
                )
            )
        executors = self._executor_reports() if self._executor_reports is not None else None
        if executors is not None:  # a --workers front end delivers nothing: its executors do
            combine_executors(status, executors)
        try:  # counts need the database, which may be what is failing
            status.undelivered = await self._store.undelivered_count()
            status.dead_letters = await self._store.dead_letter_count()
            status.fleet.CopyFrom(await fleet_summary(self._store, self._inventory))
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
        size = pages.page_size(request.page_size or request.limit, 100)
        try:
            before = pages.decode("requests", request.page_token, int)
            chosen = selected(self._inventory, request.selector)
        except (pages.PageTokenError, selectors.SelectorError) as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise
        views = await self._store.list_requests(
            device=request.device or None,
            status=_STATUS_NAME.get(request.status),
            undelivered_only=request.undelivered_only,
            limit=size + 1,
            dead_letter_only=request.dead_letter_only,
            outcome=request.outcome or None,
            kind=request.kind or None,
            trace_id=request.trace_id or None,
            before_seq=before,
            devices=chosen,
        )
        records = pages.fill([request_record(v) for v in views[:size]])
        more = len(views) > len(records)
        token = pages.encode("requests", views[len(records) - 1].seq) if more and records else ""
        return apb.ListRequestsResponse(requests=records, next_page_token=token)

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
        desired = await self._store.desired_for(view.id)
        verified = (await self._store.last_bmc_checks([view.id])).get(view.id)
        record = device_record(
            view, self._dispatcher.queued(view.id), self._inventory.get(view.id), desired, verified=verified
        )
        for row in await self._store.bmc_health([view.id]):
            record.health.CopyFrom(health_record(row, view.id in self._inventory))
        return record

    async def ListBmcHealth(
        self, request: apb.ListBmcHealthRequest, context: grpc.aio.ServicerContext
    ) -> apb.ListBmcHealthResponse:
        size = pages.page_size(request.page_size or request.limit, 500)
        try:
            after = pages.decode("health", request.page_token, str) or ""
            chosen = selected(self._inventory, request.selector)
        except (pages.PageTokenError, selectors.SelectorError) as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise
        if request.unreachable:  # only a device with a row can have failed: the store pages them
            rows = await self._store.bmc_health(chosen, size + 1, after=after, unreachable=True)
            records = [health_record(r, r.device in self._inventory) for r in rows]
        else:
            records = await self._health_page(chosen, after, size + 1)
        page = pages.fill(records[:size])
        more = len(records) > len(page)
        token = pages.encode("health", page[-1].device) if more and page else ""
        return apb.ListBmcHealthResponse(devices=page, next_page_token=token)

    async def _health_page(self, chosen: list[str] | None, after: str, rows: int) -> list[apb.BmcHealth]:
        """The first `rows` devices after `after` (code point order, as the store orders them):
        every inventory device (of `chosen`), a never-checked one too (an empty row: nothing known
        yet), and, without a selector, a device with a row that left the inventory. Only this page's
        rows are read: an id among the first `rows` of the union is among the first `rows` of
        each side."""
        wanted = sorted(self._inventory) if chosen is None else chosen
        ids = [d for d in wanted if d > after][:rows]
        found = await self._store.bmc_health(ids if chosen is not None else None, rows, after=after)
        by_device = {r.device: r for r in found}
        return [
            health_record(by_device[d], d in self._inventory)
            if d in by_device
            else apb.BmcHealth(device=d, in_inventory=True)
            for d in sorted(set(ids) | set(by_device))[:rows]
        ]

    async def ListDevices(
        self, request: apb.ListDevicesRequest, context: grpc.aio.ServicerContext
    ) -> apb.ListDevicesResponse:
        size = pages.page_size(request.page_size or request.limit, 500)
        try:
            after = pages.decode("devices", request.page_token, str) or ""
            chosen = selected(self._inventory, request.selector)
        except (pages.PageTokenError, selectors.SelectorError) as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise
        if chosen is not None:  # the page's ids only: the store is asked for at most size + 1
            chosen = [i for i in chosen if i > after][: size + 1]
        views = await self._store.list_devices(limit=size + 1, after=after, ids=chosen)
        desired = await self._store.desired_for_devices([v.id for v in views[:size]])
        verified = await self._store.last_bmc_checks([v.id for v in views[:size]])
        records = pages.fill(
            [
                device_record(
                    v,
                    self._dispatcher.queued(v.id),
                    self._inventory.get(v.id),
                    desired.get(v.id, []),
                    state=request.include_state,
                    verified=verified.get(v.id),
                )
                for v in views[:size]
            ]
        )
        more = len(views) > len(records)
        token = pages.encode("devices", records[-1].id) if more and records else ""
        return apb.ListDevicesResponse(devices=records, next_page_token=token)

    async def ListVerifications(
        self, request: apb.ListVerificationsRequest, context: grpc.aio.ServicerContext
    ) -> apb.ListVerificationsResponse:
        size = pages.page_size(request.page_size or request.limit, 100)
        try:
            after = pages.decode_newest("verifications", request.page_token)
            chosen = selected(self._inventory, request.selector)
        except (pages.PageTokenError, selectors.SelectorError) as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise
        rows = await self._store.list_verifications(
            device=request.device or None,
            verification_id=request.verification_id or None,
            limit=size + 1,
            after=after,
            devices=chosen,
        )
        records = pages.fill([verification_record(r) for r in rows[:size]])
        last = rows[len(records) - 1] if records else None
        token = (
            pages.encode("verifications", pages.newest_position(last.created_at, last.verification_id))
            if last is not None and len(rows) > len(records)
            else ""
        )
        return apb.ListVerificationsResponse(verifications=records, next_page_token=token)

    async def StartVerify(
        self, request: apb.StartVerifyRequest, context: grpc.aio.ServicerContext
    ) -> apb.VerifyBatch:
        return await self._verify(request, context, write_cycle=False)

    async def StartWriteCycle(
        self, request: apb.StartVerifyRequest, context: grpc.aio.ServicerContext
    ) -> apb.VerifyBatch:
        return await self._verify(request, context, write_cycle=True)

    async def _verify(
        self, request: apb.StartVerifyRequest, context: grpc.aio.ServicerContext, *, write_cycle: bool
    ) -> apb.VerifyBatch:
        try:
            named = list(request.devices)
            if request.selector.strip():
                if named or request.all or request.model:
                    raise checker.VerifyRefused("give devices, all, a model or a selector: one of them")
                named = selectors.select(self._inventory.values(), request.selector)
                if not named:
                    raise checker.VerifyRefused(f"selector {request.selector!r} selects no inventory device")
            devices = checker.select(self._inventory, named, all_devices=request.all, model=request.model)
            rows = await checker.journal(
                self._store, devices, render.query_of(request, write_cycle=write_cycle)
            )
        except (checker.VerifyRefused, selectors.SelectorError) as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise
        if not rows:  # pragma: no cover - every way to choose refuses an empty choice
            return apb.VerifyBatch()
        # the first page and how the whole run stands; GetBmcCheck pages on (a reply under 4 MiB)
        answer = self._run_page(rows[0].batch_id, rows, CHECK_PAGE_ROWS)
        answer.progress.CopyFrom(render.progress_of({("queued", ""): len(rows)}))
        return answer

    @staticmethod
    def _run_page(batch_id: str, rows: list[BmcCheckRow], size: int) -> apb.VerifyBatch:
        """`rows` (a run's next size + 1, in check id order) as one page with its next token."""
        answer = render.batch(rows[:size])
        kept = pages.fill(list(answer.checks))
        del answer.checks[len(kept) :]
        answer.batch_id = batch_id
        if len(rows) > len(kept) and kept:
            answer.next_page_token = pages.encode(f"run:{answer.batch_id}", kept[-1].check_id)
        return answer

    async def ListBmcChecks(
        self, request: apb.ListBmcChecksRequest, context: grpc.aio.ServicerContext
    ) -> apb.VerifyBatch:
        size = pages.page_size(request.page_size or request.limit, 100)
        try:
            after = pages.decode_newest("bmc_checks", request.page_token)
            chosen = selected(self._inventory, request.selector)
        except (pages.PageTokenError, selectors.SelectorError) as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise
        rows = await self._store.list_bmc_checks(
            device=request.device or None,
            status=request.status or None,
            limit=size + 1,
            after=after,
            devices=chosen,
        )
        batch = render.batch(rows[:size])
        kept = pages.fill(list(batch.checks))
        del batch.checks[len(kept) :]
        if kept and len(rows) > len(kept):
            last = rows[len(kept) - 1]
            batch.next_page_token = pages.encode(
                "bmc_checks", pages.newest_position(last.created_at, last.check_id)
            )
        return batch

    async def GetBmcCheck(
        self, request: apb.GetBmcCheckRequest, context: grpc.aio.ServicerContext
    ) -> apb.VerifyBatch:
        kind, found = await self._store.resolve_bmc_check(request.id) if request.id else ("", "")
        if kind == "check":
            one = await self._store.bmc_check(found)
            return render.batch([one] if one is not None else [])
        if kind != "batch":
            await context.abort(grpc.StatusCode.NOT_FOUND, found or "give a verification id or batch id")
        size = pages.page_size(request.page_size, CHECK_PAGE_ROWS)
        try:
            after = pages.decode(f"run:{found}", request.page_token, str) or ""
        except pages.PageTokenError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise
        progress = render.progress_of(await self._store.bmc_check_progress(found))
        if request.progress_only:
            return apb.VerifyBatch(batch_id=found, progress=progress)
        answer = self._run_page(found, await self._store.bmc_check_batch(found, after, size + 1), size)
        answer.progress.CopyFrom(progress)
        return answer

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
