"""Runs one journaled request: resolve the device, call its plugin under the deadline, and write
the result, new state and response in one transaction. Every path ends in exactly one completion.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from controller import translate
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.cluster.shards import LeftForOwner, Shards
from controller.config import Settings
from controller.desired.limits import desired_from, is_internal
from controller.desired.receipts import failed_writes_note, receipts
from controller.execution import shadow, state_text
from controller.execution.completions import CompletionWriter
from controller.execution.dispatch import Job
from controller.execution.resolve import DeviceResolver, Resolved
from controller.execution.write_cycle import WriteCycles
from controller.inventory import DeviceEntry, deactivation_choice
from controller.observability import metrics
from controller.observability.logs import clip, request_context
from controller.plugin_host.host import PluginHost
from controller.process.supervise import Outage, describe
from controller.security.secrets import SecretStore
from controller.store import BmcAccess, Completion, NewVerification, Store, StoreClosedError, is_outage
from plugins.base import (
    DeviceContext,
    DeviceControllerError,
    DeviceRejectedError,
    DeviceTimeoutError,
    DeviceUnreachableError,
    Outcome,
    PendingVerification,
    RequestKind,
    WriteLog,
)

log = logging.getLogger(__name__)


def utcnow() -> datetime:
    return datetime.now(UTC)


class RequestRunner:
    """Executes jobs for the dispatcher and answers the ones that cannot run."""

    def __init__(
        self,
        store: Store,
        plugins: PluginHost,
        settings: Settings,
        inventory: Mapping[str, DeviceEntry],
        secrets: SecretStore,
        on_complete: Callable[[str], None],
        shards: Shards | None = None,
    ) -> None:
        #: which shards this process may run now, and the lease a completion must still hold
        self.shards = shards or Shards(inventory, settings.shard_count)
        #: jobs in run() per shard (a shard being released waits for its own to finish)
        self.running_shards: Counter[int] = Counter()
        self._store = store
        self._settings = settings
        self._resolver = DeviceResolver(store, plugins, settings, inventory, secrets)
        self._completions = CompletionWriter(store, settings, on_complete)
        #: request id -> when its device call began, until the completion or a timer writes it
        self._starts: dict[str, datetime] = {}
        #: write cycles (a verification's, a `bmc_health` request's) with their journal
        self.write_cycles = WriteCycles(
            store,
            lambda d: self.resolve(d, b"", b""),
            settings.instance_id,
            shadow=settings.shadow,
            shards=self.shards,
        )

    async def run(self, job: Job) -> bool:
        """Run a job to its completion; False when it was not run because its shard is not (or no
        longer) leased here: the journaled request is left for the shard's owner."""
        if not self.shards.runs(job.shard):
            log.info("request %s left for the owner of shard %d", job.request_id, job.shard)
            return False
        try:
            with self.working_in(job.shard):
                await self._run_journaled(job)
            return True
        except LeftForOwner:
            log.info("request %s left for the owner of shard %d", job.request_id, job.shard)
            return False

    @contextlib.contextmanager
    def working_in(self, shard: int) -> Iterator[None]:
        """Counted as running work of `shard` meanwhile: its lease is not handed on."""
        self.running_shards[shard] += 1
        try:
            yield
        finally:
            self.running_shards[shard] -= 1
            if not self.running_shards[shard]:
                del self.running_shards[shard]

    def forget_devices(self) -> None:
        """Drop the write-through device copies (shards were gained: another process may have
        changed their devices meanwhile)."""
        self._resolver.forget_all()

    async def release(self, device: str) -> None:
        """Let go of a device another process runs now (`DeviceResolver.release`)."""
        await self._resolver.release(device)

    async def resolve(self, device: str, model_json: bytes, state_json: bytes) -> Resolved:
        """The device's inventory entry, started plugin, merged model and current state."""
        return await self._resolver.resolve(device, model_json, state_json)

    async def _run_journaled(self, job: Job) -> None:
        with request_context(job.device, job.request_id, job.trace_id):
            # A database outage before the completion (reading the device, say) is waited out
            # here, in the device's lane, so nothing newer for the device overtakes this job.
            outage = Outage(f"request {job.request_id}", log, cap=self._settings.completion_retry_max)
            while True:
                try:
                    await self._run(job)
                    break
                except (asyncio.CancelledError, StoreClosedError):
                    raise
                except Exception as exc:
                    if not is_outage(exc):
                        raise
                    await asyncio.sleep(outage.failed(exc))
            outage.ok()

    async def _run(self, job: Job) -> None:
        msg = pb.DeviceControllerRequest.FromString(job.payload)
        remaining = (job.deadline_at - utcnow()).total_seconds()
        if remaining <= 0:
            await self._fail(
                job,
                msg,
                "expired",
                f"deadline passed before the request could run (deadline {job.deadline_at.isoformat()})",
            )
            return
        try:
            resolved = await self.resolve(job.device, msg.device_model_json, msg.device_state_json)
        except DeviceControllerError as exc:
            await self._fail(job, msg, "rejected", str(exc))
            return
        except Exception as exc:  # answered once with the real reason, never retried until expiry
            if is_outage(exc):
                raise  # the database, not the request: waited out in the lane by run()
            log.debug("resolve failed", exc_info=True)
            reason = f"cannot resolve the device: {type(exc).__name__}: {clip(exc)}"
            await self._fail(job, msg, "rejected", reason)
            return
        try:
            kind, request = translate.request_from_proto(msg)
            request = deactivation_choice(kind, request, resolved.entry, self._settings)
        except DeviceControllerError as exc:  # validated at the edge; this guards journaled rows
            await self._fail(job, msg, "rejected", str(exc))
            return
        in_shadow = self._settings.shadow  # a plan: the choke points send nothing (execution/shadow.py)
        refused = shadow.refusal(kind, request, resolved.plugin, resolved.entry.plugin) if in_shadow else ""
        if refused:
            await self._fail(job, msg, "rejected", refused, request=request)
            return
        ctx = DeviceContext(
            device_id=job.device,
            model=resolved.model,
            endpoint=resolved.endpoint,
            request_id=job.request_id,
            trace_id=job.trace_id,
            deadline=time.monotonic() + remaining,
            state=resolved.state,
            dry_run=in_shadow,
        )
        if not self.shards.runs(job.shard):  # the lease lapsed meanwhile: never call the device
            raise LeftForOwner
        # The start is written by the completion (one write less per request), or by a timer
        # once the call has run MARK_RUNNING_AFTER seconds (at the next tick), so a long call shows
        # as running.
        self._starts[job.request_id] = utcnow()
        loop = asyncio.get_running_loop()
        marking = loop.call_at(_on_tick(loop.time() + MARK_RUNNING_AFTER), self._mark_running, job.request_id)
        started = time.monotonic()
        writes = WriteLog(dry_run=in_shadow)  # receipts, kept even when the operation fails part-way
        try:
            try:
                operation = self.write_cycles.operation(resolved, kind, ctx, request, writes)
                outcome = await self.shards.call_under_lease(operation, remaining, job.shard)
            finally:
                marking.cancel()
                metrics.child(metrics.RUN_SECONDS, kind.value).observe(time.monotonic() - started)
        except LeftForOwner:
            self._starts.pop(job.request_id, None)
            raise
        except TimeoutError:  # the device did not answer in time: not reached
            error = f"timed out after {remaining:.1f} s (request deadline)"
            await self._fail(
                job, msg, "timeout", error, request=request, touch=True, writes=writes,
                access=BmcAccess(job.device, utcnow(), error=error, by_request=True),
            )  # fmt: skip
            return
        except DeviceControllerError as exc:
            unreachable = str(exc) if isinstance(exc, DeviceUnreachableError) else ""
            await self._fail(
                job, msg, "failed", str(exc), request=request, touch=True, ping_error=unreachable,
                writes=writes, access=access_after(job.device, exc),
            )  # fmt: skip
            return
        except Exception as exc:
            log.exception("plugin %s raised an unexpected error", resolved.entry.plugin)
            error = f"internal error in plugin {resolved.entry.plugin}: {type(exc).__name__}: {exc}"
            await self._fail(job, msg, "failed", error, request=request, touch=True, writes=writes)
            return
        log.debug("%s done in %.3f s", kind.value, time.monotonic() - started)
        if in_shadow:  # answered; the device's state and desired limits stay as they were
            fence, started_at = self.shards.fence(job.shard), self._starts.pop(job.request_id, None)
            await self._complete(
                shadow.answer(job, resolved.entry.plugin, outcome, request, fence, started_at),
                access_of(job.device, outcome),
            )
            return
        await self._succeed(job, kind, resolved, outcome, request)

    def _mark_running(self, request_id: str) -> None:
        """Record the start of a call that is still running (a timer; the completion won't)."""
        at = self._starts.pop(request_id, None)
        if at is None:
            return
        try:
            written = self._store.mark_running_soon(request_id, at)
        except StoreClosedError:
            return
        written.add_done_callback(_start_recorded)

    async def _succeed(
        self, job: Job, kind: RequestKind, resolved: Resolved, outcome: Outcome[Any], request: Any = None
    ) -> None:
        state = outcome.state  # as the plugin made it: its type may spare the next request a check
        new_state = state if isinstance(state, dict) or state is None else dict(state)
        stored = resolved.prior  # what this process knows of the stored text (NO_STATE: none stored)
        text = state_text.encode(new_state, stored) if new_state is not None else None
        state_bytes = text.text.encode() if text is not None else None
        response = translate.response_to_proto(
            kind,
            outcome.result,
            device=job.device,
            request_id=job.request_id,
            trace_id=job.trace_id,
            state_json=state_bytes,
            ping_time=outcome.reached_at,
            ping_error=outcome.reach_error,
        )
        # a response no receiver would take must not block the device's later responses
        response, response_bytes = translate.bounded_serialized(kind, response, request=request)
        ok, error = translate.success_of(response)
        verification = None
        if outcome.verification is not None:
            verification = _new_verification(job, kind, outcome.verification)
        done = await self._complete(
            Completion(
                request_id=job.request_id,
                device=job.device,
                outcome="ok" if ok else "failed",
                error=error,
                finished_at=utcnow(),
                response=response_bytes,
                new_state=new_state,
                touch_device=True,
                plugin=resolved.entry.plugin,
                model_json=resolved.model or None,
                verification=verification,
                trace_id=job.trace_id,
                kind=kind.value,
                writes=receipts(outcome.writes),
                desired=desired_from(outcome.result),  # each component that succeeded
                internal=is_internal(job.request_id),
                fence=self.shards.fence(job.shard),
                started_at=self._starts.pop(job.request_id, None),  # a start no timer recorded
                # serialised once, for the response and the store (with its change, where it can)
                state_text=text.text if text is not None else None,
                state_change=state_text.change(stored, text),
            ),
            access_of(job.device, outcome),
        )
        if done:
            metrics.applied(job.device, outcome.result, request, new_state)
            self._resolver.remember(job.device, resolved.model, new_state, text)
        else:  # completed elsewhere or fenced (lease lost): the database knows better than this copy
            self._resolver.forget(job.device)

    async def _fail(
        self,
        job: Job,
        msg: pb.DeviceControllerRequest,
        outcome: str,
        error: str,
        *,
        request: Any = None,
        touch: bool = False,
        ping_error: str = "",
        writes: WriteLog | None = None,
        access: BmcAccess | None = None,
    ) -> None:
        entries = writes.entries() if writes is not None else None
        if entries is not None and self._settings.shadow:
            entries = shadow.shadow_receipts(entries)  # planned before the failure, never sent
        note = failed_writes_note(entries) if entries is not None else ""
        if note:  # a failed request says what it changed, whatever stopped it
            error = f"{error} ({note})"
        log.warning("%s %s: %s", job.kind.value, outcome, clip(error))  # errors quote ids
        response = translate.error_response(
            job.kind,
            error,
            device=job.device,
            request_id=job.request_id,
            trace_id=job.trace_id,
            ping_error=ping_error,
            request=request,
        )
        await self._complete(
            Completion(
                request_id=job.request_id,
                device=job.device,
                outcome=outcome,
                error=error,
                finished_at=utcnow(),
                response=response.SerializeToString(),
                new_state=None,
                touch_device=touch,
                trace_id=job.trace_id,
                kind=job.kind.value,
                writes=receipts(entries) if entries is not None else None,
                internal=is_internal(job.request_id),
                fence=self.shards.fence(job.shard),
                started_at=self._starts.pop(job.request_id, None),  # a start no timer recorded
            ),
            access,
        )

    async def reject(self, job: Job, error: str) -> None:
        """Answer a job that could not be queued (e.g. its lane is full)."""
        with request_context(job.device, job.request_id, job.trace_id):
            msg = pb.DeviceControllerRequest.FromString(job.payload)
            await self._fail(job, msg, "rejected", error)

    async def supersede(self, job: Job, newer_seq: int) -> None:
        """Answer a late job whose device already started a newer state-changing request."""
        await self.reject(
            job,
            f"not run: a newer request for device {job.device!r} (journal seq {newer_seq}) already "
            f"started, and running this older one (seq {job.seq}) now would undo it",
        )

    async def _complete(self, completion: Completion, access: BmcAccess | None = None) -> bool:
        """Write the completion (controller/execution/completions.py: retried in place, in the device's
        lane) and the device access it made, if any; False when it did not commit as given, and
        then this copy of the device goes."""
        written = await self._completions.write(completion, access)
        if not written.as_is:
            self._resolver.forget(completion.device)
        return written.done and written.as_is


#: seconds a device call runs before its start is written on its own (shorter calls' starts are
#: written by their completion: status "running" shows only calls that take longer)
MARK_RUNNING_AFTER = 0.5
#: those starts are written on a grid of this many seconds: the timers of calls begun within one
#: tick fire in the same loop turn, so their writes share one transaction (a fan-out starts
#: hundreds of calls a second; one transaction each was most of the start's cost)
MARK_RUNNING_TICK = 0.1


def _on_tick(when: float) -> float:
    """The first tick of `MARK_RUNNING_TICK` at or after `when` (loop time)."""
    return math.ceil(when / MARK_RUNNING_TICK) * MARK_RUNNING_TICK


def _start_recorded(written: asyncio.Future[None]) -> None:
    if not written.cancelled() and written.exception() is not None:
        # bookkeeping only: the completion is what must be written
        exc = written.exception()
        log.warning("could not record the start (%s); running anyway", describe(exc))  # type: ignore[arg-type]


def access_of(device: str, outcome: Outcome[Any]) -> BmcAccess | None:
    """The access to the device a plugin's outcome shows: not reached (its `reach_error`, the
    last failure to reach it), reached (`reached_at`: any answer, a refusal included), or None when
    the plugin says neither (it answered without calling the device)."""
    if outcome.reach_error:
        return BmcAccess(device, utcnow(), error=clip(outcome.reach_error), by_request=True)
    if outcome.reached_at is not None:  # a plugin's clock ahead of ours: never a success to come
        return BmcAccess(device, min(outcome.reached_at, utcnow()), by_request=True)
    return None


def access_after(device: str, exc: DeviceControllerError) -> BmcAccess | None:
    """The access to the device a plugin's error shows: not reached (unreachable, a TLS failure
    among them, or timed out), reached (the device answered and refused), or None where the error
    does not say (the plugin's own, a request refused before any call, a transient failure of the
    device or of the plugin)."""
    if isinstance(exc, DeviceUnreachableError | DeviceTimeoutError):
        return BmcAccess(device, utcnow(), error=clip(exc), by_request=True)
    if isinstance(exc, DeviceRejectedError):
        return BmcAccess(device, utcnow(), by_request=True)
    return None


def _new_verification(job: Job, kind: RequestKind, pending: PendingVerification) -> NewVerification:
    return NewVerification(
        verification_id=pending.verification_id,
        device=job.device,
        request_id=job.request_id,
        kind=kind.value,
        payload=dict(pending.payload),
        due_at=utcnow() + timedelta(seconds=pending.check_after_seconds),
        max_checks=pending.max_checks,
    )
