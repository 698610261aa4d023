"""A write cycle as a journaled transaction (`devicectl verify --write-cycle`, and `bmc_health` with
`write_cycle`), run by the controller in plugin calls (`HealthQuery.apply`, `priors`, `restore`):

1. plan: the read-only checks; their `cap KEY` evidence is the value, mode and resource of every cap;
2. journal: those priors are committed to ``write_cycles`` before the first write (a cancel that
   lands during the insert closes the journal as unwritten: nothing for a later restore to write);
3. apply: the plugin cycles each cap and restores it to its journaled prior (never to a read that
   could be a leftover test value);
4. close: wherever the apply did not prove a cap back (a failure, a deadline, a cancel), the journal
   is restored by the controller, under its own deadline (`RESTORE_SECONDS`), never the request's,
   and a cancel waits for it; the journal is closed only once every cap is proven back.

A cycle left open (a crash, a restore that failed) is restored from its journal at the next start,
before any request of the node runs (`recover`), and before the node's next cycle; a journal a
crash left is then held open a while longer for every cap, since the test writes the dead process
sent may still land (`_still_waiting`, `LOST_WRITE_SECONDS`); the report names
each component, its value and whether it was restored, on the verification's record. A readiness
result's explicit caps are compared with what devicectl last set (`WriteCycles.explained`).

Ownership: a restore of a journal the process did not open takes it over first (a compare-and-set
of its epoch in SQL); a holder checks that it still holds the journal (and the node's shard lease)
before each restore call, and its close is conditional on it, so a holder that lost the journal to
a newer one never writes the node or overwrites the newer record. The restore call itself runs
under the node's shard lease (cancelled when it lapses here, as a request's call is) and is cut by
`stop` before a stopping process hands its leases back: either leaves the journal open for the
next holder, so two processes never write one node at once. A restore never undoes a cap that
devicectl set after the cycle began (its desired limit is newer), on every path. Shards gained in a
lease round only mark their journals' devices pending there (`hold`: one database read, never a BMC
call); the restores run apart (`restore_held`), each holding the device's lane, and a request of a
pending device restores first (`settle`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from controller.cluster.shards import LeftForOwner, Shards
from controller.desired.limits import INTERNAL_PREFIX, caps_to_explain, explain_caps
from controller.desired.receipts import write_outcome
from controller.execution.resolve import Resolved
from controller.process.supervise import describe
from controller.store import Store, WriteCycleRow
from plugins.base import (
    DeviceContext,
    DevicePlugin,
    DeviceWrite,
    HealthCheck,
    HealthQuery,
    HealthResult,
    Outcome,
    RequestKind,
    WriteLog,
    WriteOutcome,
    run_operation,
    uncancelled,
)
from plugins.base.codec import encode
from plugins.base.health import FAIL, PASS
from plugins.base.kinds import kind_of
from plugins.base.receipts import unanswered_status

log = logging.getLogger(__name__)

#: a restore's own deadline (the request's may be what ran out)
RESTORE_SECONDS = 90.0
#: journals restored at once at a start
RECOVERY_CONCURRENCY = 16
#: a test write whose answer was lost (a read timeout or a gateway's error after sending, a 202
#: whose task still ran at the deadline) may land later, after a restore that read the prior value
#: in force and wrote nothing: its journal stays open this long, and the node is read (and restored
#: where the write landed) again then. No read proves that such a write never lands; NVIDIA's
#: bmcweb gives up its asynchronous set after 60 s (`nvidia_async_set_utils.hpp`), and twice that
#: is taken as settled
LOST_WRITE_SECONDS = 120.0
#: a restore that failed is tried again this long after (`due`), by the controller's journal sweep
RETRY_SECONDS = 60.0


def origin_of_check(check_id: str) -> str:
    return f"verify {check_id}"


def origin_of_request(request_id: str) -> str:
    return f"bmc_health {request_id}"


def plan_of(result: HealthResult) -> dict[str, dict[str, Any]]:
    """The priors of a read-only run: each writable cap read without failure (key -> value, mode)."""
    out: dict[str, dict[str, Any]] = {}
    for check in result.checks:
        ev = check.evidence
        if not check.name.startswith("cap ") or check.status == FAIL or not ev.get("mechanism"):
            continue
        if "watts" not in ev or "capped" not in ev:
            continue
        out[check.name[4:]] = {
            "watts": ev.get("watts"),
            "capped": bool(ev.get("capped")),
            "mode": ev.get("mode"),
            "resource": ev.get("resource", ""),
        }
        if ev.get("persistency"):  # whether the cap survives resets, where the BMC shows it
            out[check.name[4:]]["persistency"] = ev["persistency"]
    return out


def prior_text(prior: Mapping[str, Any]) -> str:
    watts, mode = prior.get("watts"), prior.get("mode")
    if not prior.get("capped"):
        return "no cap" if watts is None else f"no explicit cap ({mode or 'default'}, {watts:g} W)"
    shown = "a cap of no value shown" if watts is None else f"{watts:g} W"
    return shown + (f" ({mode})" if mode else "")


def _lost_writes(writes: Sequence[DeviceWrite], priors: Mapping[str, Mapping[str, Any]]) -> set[str]:
    """The journaled caps a write of `writes` whose answer was lost went to (its resource, an
    action under it, or an out-of-process plugin's call naming the cap): it may still land. Not
    where the next write to the cap that landed found something other than the value in force
    before the lost one (it had landed then, and a write lands once); a write that landed on that
    old value (the test write sent once more) leaves the lost one unsettled for good."""
    lost: dict[str, list[DeviceWrite]] = {}
    for write in writes:
        outcome = write_outcome(write)
        if outcome is None or outcome is WriteOutcome.NOT_WRITTEN:
            continue
        named = set(write.component.split(", "))
        for key, prior in priors.items():
            resource = str(prior.get("resource") or "").rstrip("/")
            if key not in named and not (
                resource and (write.target == resource or write.target.startswith(resource + "/"))
            ):
                continue
            unanswered = lost.setdefault(key, [])
            if outcome is WriteOutcome.UNKNOWN:
                unanswered.append(write)
            elif len(unanswered) == 1 and _landed_before(unanswered[0], write):
                unanswered.clear()
            elif unanswered:
                unanswered.append(write)  # what it found says nothing of the lost one: kept
    return {key for key, unanswered in lost.items() if unanswered}


def _landed_before(lost: DeviceWrite, later: DeviceWrite) -> bool:
    """Whether `later` found the cap moved from where it was before `lost` was sent."""
    if lost.before is None or later.before is None:
        return False
    return abs(lost.before - later.before) > 0.5


def _still_waiting(row: WriteCycleRow) -> tuple[set[str], datetime]:
    """A leftover journal's caps still waiting out a lost test write (its last report's), and
    until when; none where its report names no such wait, or one already past. The report comes
    from the database: a malformed one waits no longer.

    A journal with no report at all was never closed by its cycle: the process running it ended
    (a crash, a kill, a host gone) or could not record its close, and the answers of the test
    writes it had sent died with it. Each journaled cap may still change: all of them wait one
    `LOST_WRITE_SECONDS` from now (when the process ended is not known here, only that it was
    before now). A report that is no JSON object says no more than none, and is read the same."""
    now = datetime.now(UTC)
    report = row.report
    if not isinstance(report, Mapping):
        return _waiting(set(row.priors), now + timedelta(seconds=LOST_WRITE_SECONDS), now)
    keys, until = report.get("lost_writes"), report.get("recheck_after")
    try:
        at = datetime.fromisoformat(until) if isinstance(until, str) else None
    except ValueError:
        at = None
    if at is None or at.tzinfo is None or not isinstance(keys, list):
        return set(), now
    return _waiting({k for k in keys if isinstance(k, str) and k in row.priors}, at, now)


def _waiting(keys: set[str], until: datetime, now: datetime) -> tuple[set[str], datetime]:
    """`keys` waiting until `until`, never longer than one wait from `now`; none once it is past."""
    until = min(until, now + timedelta(seconds=LOST_WRITE_SECONDS))
    return (keys, until) if until > now and keys else (set(), now)


def _proven_back(checks: Sequence[HealthCheck], key: str) -> bool:
    """Whether the apply's `write KEY` check shows the cap restored, or nothing written (a cycle
    the plugin refused as a whole, e.g. for an active resource group, wrote nothing)."""
    if any(c.name == "write" for c in checks):
        return True
    check = next((c for c in checks if c.name == f"write {key}"), None)
    if check is None:
        return False
    return check.evidence.get("restored") is True or check.evidence.get("wrote") is False


class _Lost(Exception):
    """This process no longer holds the journal (taken over) or the node (its shard lease): it
    neither writes the node nor closes the journal; the holder restores it."""


@dataclass(eq=False)
class _Reading:
    """The open journals of gained shards being read (`hold`): a request of a device `runs`
    names waits for it."""

    runs: Callable[[str], bool]
    done: asyncio.Event = field(default_factory=asyncio.Event)
    failed: bool = False
    #: devices whose journals were read one by one since the read failed (`settle`)
    read: set[str] = field(default_factory=set)

    def unread(self, device: str) -> bool:
        """Whether the read failed for `device` and nothing has read its journals since."""
        return self.failed and self.runs(device) and device not in self.read


def _unanswered(plugin: DevicePlugin, query: HealthQuery, exc: BaseException) -> DeviceWrite | None:
    """The receipt of a writing call to an out-of-process plugin that ended without its receipts (a
    deadline, a cancel, a plugin gone): each cap it was asked to write may have been written."""
    keys = list(query.restore) or (list(query.priors) if query.apply and not query.skip_writes else [])
    if plugin.writes_in_process or not keys or getattr(exc, "receipts", None) is not None:
        return None
    return DeviceWrite(
        f"plugin {plugin.info.name}",
        "bmc_health",
        {"restore" if query.restore else "apply": keys},
        component=", ".join(keys),
        status=unanswered_status(exc),
        note="the out-of-process plugin gave no answer, so its own receipts never came back: "
        + ("a restore" if query.restore else "a test write")
        + " of these caps may have landed",
    )


def _unanswered_request(
    plugin: DevicePlugin, kind: RequestKind, ctx: DeviceContext, exc: BaseException
) -> DeviceWrite | None:
    """The same for a state-changing request (a cap, a profile, a deactivation) an out-of-process
    plugin never answered: a write it was asked for may have landed."""
    if plugin.writes_in_process or ctx.dry_run or kind_of(kind).reads_only:
        return None
    if getattr(exc, "receipts", None) is not None:
        return None
    return DeviceWrite(
        f"plugin {plugin.info.name}",
        kind.value,
        status=unanswered_status(exc),
        note="the out-of-process plugin gave no answer, so its own receipts never came back: "
        "a write it was asked for may have landed",
    )


class WriteCycles:
    """Runs write cycles through a device's plugin with their journal (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        resolve: Callable[[str], Awaitable[Resolved]],
        owner: str,
        *,
        shadow: bool = False,
        shards: Shards | None = None,
    ) -> None:
        #: shadow mode: no write is sent, a restore from a journal neither (the journal stays open)
        self.shadow = shadow
        self._store = store
        self._resolve = resolve
        self._owner = owner
        #: the shards this process runs: a restore writes only while it surely holds the node's
        #: lease, and is cut when it lapses (None: held for good)
        self._shards = shards
        #: the restores' plugin calls running now (`stop` cancels them)
        self._restoring: set[asyncio.Future[Outcome[HealthResult]]] = set()
        #: set by `stop`: no restore starts a plugin call any more
        self._stopped = False
        #: a running verification's close report, by origin, until the verification takes it
        self._reports: dict[str, str] = {}
        #: device -> its open journals (cycle ids) not restored yet: restored before the device's
        #: next request runs (`settle`); a device stays pending while any of its journals does
        self._pending: dict[str, set[str]] = {}
        #: journals of gained shards being read (`hold`)
        self._reading: list[_Reading] = []
        #: reads of gained shards' journals that failed, until a later `hold` reads them (the lease
        #: round claims those shards again): their devices' journals are read before their work
        self._failed_reads: list[_Reading] = []
        #: pending device -> when (monotonic) its journals are restored again unasked (`due`): a
        #: failed restore, or one waiting out a test write that may still land
        self._due: dict[str, float] = {}
        #: journals this process's own cycles ended but could not record (a database fault at the
        #: close): what their receipts showed (the caps waiting out a lost test write, and until
        #: when), where their rows show no report, which a restore would take for a crash's
        self._unrecorded: dict[str, tuple[set[str], datetime]] = {}

    def stop(self) -> None:
        """At a stop, before the shard leases go: no restore starts a plugin call, and those running
        are cancelled. Their journals stay open; the node's next holder, or the next start,
        restores them (a restore left running would go on writing the node beside that holder)."""
        self._stopped = True
        for call in list(self._restoring):
            call.cancel()

    def unsettled(self, device: str) -> bool:
        """Whether the device may have an unfinished write cycle to restore before other work."""
        return (
            device in self._pending
            or any(r.runs(device) for r in self._reading)
            or any(r.unread(device) for r in self._failed_reads)
        )

    def report_of(self, origin: str) -> str:
        """A verification's close report (taken: it is kept only until its verification ends)."""
        return self._reports.pop(origin, "")

    def due(self) -> list[str]:
        """The pending devices whose journals are due to be restored again unasked (a failed
        restore, or one that waited out a lost test write), taken: `restore_held` restores them."""
        now = time.monotonic()
        devices = sorted(d for d, at in self._due.items() if at <= now and d in self._pending)
        for device in devices:
            del self._due[device]
        return devices

    def _mark(self, device: str, cycle_id: str, *, again_in: float | None = None) -> None:
        self._pending.setdefault(device, set()).add(cycle_id)
        if again_in is not None:
            self._due[device] = min(self._due.get(device, math.inf), time.monotonic() + again_in)

    def _settled(self, device: str, cycle_id: str) -> None:
        self._unrecorded.pop(cycle_id, None)
        left = self._pending.get(device)
        if left is not None:
            left.discard(cycle_id)
            if not left:
                del self._pending[device]
                self._due.pop(device, None)

    async def run(
        self, resolved: Resolved, ctx: DeviceContext, query: HealthQuery, origin: str, writes: WriteLog
    ) -> Outcome[HealthResult]:
        """Plan, journal, apply, close; the result has the read-only checks, then the write checks.
        Every receipt (an out-of-process plugin's too) is in `writes`, whatever the outcome."""
        device = ctx.device_id
        leftover = await self.restore_open(device, writes)
        if any(c.status == FAIL for c in leftover):
            why = "an unfinished write cycle of this node could not be restored (see its restore checks)"
            refused = HealthCheck("write", FAIL, f"write cycle refused: {why}")
            return Outcome(HealthResult((*leftover, refused)), writes=writes.entries())
        plan_query = replace(query, skip_writes=True, apply=False, priors={}, restore={})
        planned = await self._call(resolved, ctx, plan_query, writes)
        checks: list[HealthCheck] = [*leftover, *planned.result.checks]
        if not any(c.name == "login" and c.status == PASS for c in planned.result.checks):
            return replace(planned, result=HealthResult(tuple(checks)), writes=writes.entries())
        priors = plan_of(planned.result)
        row = WriteCycleRow(
            cycle_id=uuid.uuid4().hex[:16],
            device=device,
            origin=origin,
            priors=priors,
            status="open",
            report=None,
            owner=self._owner,
            created_at=datetime.now(UTC),
            closed_at=None,
        )
        if priors:  # durable before the first write; a cancel cannot cut the insert off half done
            try:
                await uncancelled(self._store.open_write_cycle(row))
            except BaseException:
                # NOTE: a cancel, or an insert that failed after it committed (a commit retried that
                # had landed): maybe journaled, nothing written: closed, never restored later over
                # what the node holds by then (closing a row that is not there changes nothing)
                await uncancelled(self._close_unwritten(row))
                raise
        applied: Outcome[HealthResult] | None = None
        try:
            applied = await self._call(
                resolved, ctx, replace(query, apply=True, priors=priors, restore={}), writes
            )
        finally:  # a failure, a deadline, a cancel: whatever the apply did not prove back is restored
            done = list(applied.result.checks) if applied is not None else []
            closing = await uncancelled(self._close(row, done, writes)) if priors else []
        checks += [*done, *closing]
        last = applied if applied is not None else planned
        return replace(last, result=HealthResult(tuple(checks)), writes=writes.entries())

    async def operation(
        self, resolved: Resolved, kind: RequestKind, ctx: DeviceContext, request: Any, writes: WriteLog
    ) -> Outcome[Any]:
        """A journaled request's device call: a `bmc_health` write cycle through `run`, any other
        kind as the plugin serves it; a readiness result `explained`. A device with an unfinished
        write cycle is restored first (`settle`; its lane is held by the caller)."""
        if not ctx.dry_run:
            await self.settle(ctx.device_id, writes)
        if isinstance(request, HealthQuery) and not request.skip_writes:
            origin = origin_of_request(ctx.request_id)
            outcome: Outcome[Any] = await self.run(resolved, ctx, request, origin, writes)
        else:
            try:
                outcome = await run_operation(resolved.plugin, kind, ctx, request, writes)
            except BaseException as exc:
                unanswered = _unanswered_request(resolved.plugin, kind, ctx, exc)
                if unanswered is not None:
                    writes.record([unanswered])
                raise
        if isinstance(outcome.result, HealthResult):
            outcome = replace(outcome, result=await self.explained(ctx.device_id, outcome.result))
        return outcome

    async def settle(self, device: str, writes: WriteLog) -> list[HealthCheck]:
        """Before other work on the device (its lane held): wait for a read of its gained shard's
        journals, then restore its unfinished cycles if it has any."""
        for reading in list(self._reading):
            if reading.runs(device):
                await reading.done.wait()
        failed = [r for r in self._failed_reads if r.unread(device)]
        if device in self._pending or failed:
            checks = await self.restore_open(device, writes)  # reads the device's journals itself
            for reading in failed:
                reading.read.add(device)
            return checks
        return []

    async def explained(self, device: str, result: HealthResult) -> HealthResult:
        """A readiness result whose explicit caps are compared with what devicectl last set
        (`controller.desired.limits.explain_caps`): a cap devicectl did not set, or that moved, is
        flagged, a leftover test value included. As it was when the desired limits are unreadable,
        and without a read when no explicit cap is shown."""
        if not caps_to_explain(result.checks):
            return result
        try:
            desired = await self._store.desired_for(device)
        except Exception as exc:  # never a reason to run the device call again
            log.warning("cannot compare %s's caps with its desired limits: %s", device, describe(exc))
            return result
        return replace(result, checks=tuple(explain_caps(result.checks, desired)))

    async def restore_open(self, device: str, writes: WriteLog) -> list[HealthCheck]:
        """Restore the device's unfinished cycles from their journals (before anything else runs)."""
        out: list[HealthCheck] = []
        if self.shadow:
            return out  # nothing is written in shadow mode: the journal waits for a live process
        rows = await self._store.open_write_cycles([device])
        open_ids = {r.cycle_id for r in rows}
        for cycle_id in list(self._pending.get(device, ())):
            if cycle_id not in open_ids:  # closed meanwhile (by its own cycle, or another holder)
                self._settled(device, cycle_id)
        for row in rows:
            out += await uncancelled(self._close(row, [], writes, leftover=True))
        return out

    async def hold(self, runs: Callable[[str], bool]) -> list[str]:
        """In a lease round, for gained shards (`runs`: their devices): mark each device with an open
        journal pending, so no other work on it starts before its restore; one database read, no
        BMC call (the restores run apart: `restore_held`). The devices, sorted."""
        if self.shadow:
            return []  # nothing is restored in shadow mode (`recover` says so at the start)
        reading = _Reading(runs)
        self._reading.append(reading)
        try:
            rows = [r for r in await self._store.open_write_cycles() if runs(r.device)]
            for row in rows:
                self._mark(row.device, row.cycle_id)
        except BaseException:
            # NOTE: the shards run meanwhile: a request of one of their devices, waiting on this
            # read or coming later, reads its device's journals itself until a round reads them
            reading.failed = True
            self._failed_reads.append(reading)
            raise
        finally:
            self._reading.remove(reading)
            reading.done.set()
        self._failed_reads.clear()  # the round claims a failed read's shards again: read now
        if rows:
            log.warning(
                "%d write cycle(s) of gained shards were left unfinished: restoring them from their journal",
                len(rows),
            )
        return sorted({r.device for r in rows})

    async def restore_held(
        self, devices: Sequence[str], lane: Callable[[str], AbstractAsyncContextManager[Any]]
    ) -> None:
        """Restore `hold`'s devices, apart from the lease round: each while holding its lane (`lane`),
        so nothing else writes the node until it is restored; a device whose restore fails stays
        pending (its next request restores it first)."""
        slots = asyncio.Semaphore(RECOVERY_CONCURRENCY)

        async def one(device: str) -> None:
            async with slots, lane(device):
                if device not in self._pending:
                    return  # restored meanwhile (a request of the device got the lane first)
                try:
                    await self.restore_open(device, WriteLog())
                except Exception as exc:
                    log.error("unfinished write cycles of %s not restored yet: %s", device, describe(exc))

        await asyncio.gather(*(one(d) for d in devices))

    async def recover(self, runs: Callable[[str], bool]) -> int:
        """At a start: restore every open journal of a device this process runs; how many."""
        rows = [r for r in await self._store.open_write_cycles() if runs(r.device)]
        if not rows:
            return 0
        if self.shadow:
            log.error(
                "%d write cycle(s) were left unfinished and are NOT restored: shadow mode sends no write; "
                "run devicectl without --shadow to restore them from their journal (devices: %s)",
                len(rows),
                ", ".join(sorted({r.device for r in rows})),
            )
            return 0
        log.warning("%d write cycle(s) were left unfinished: restoring them from their journal", len(rows))
        for row in rows:
            self._mark(row.device, row.cycle_id)
        slots = asyncio.Semaphore(RECOVERY_CONCURRENCY)

        async def one(row: WriteCycleRow) -> None:
            # NOTE: one restore's error ends only its own: raised through `gather`, it left the
            # others running while the process went on to serve, beside the requests that settle
            # the same journals (its device stays pending: its next request restores it first)
            async with slots:
                try:
                    await self._close(row, [], WriteLog(), leftover=True)
                except Exception as exc:
                    log.error(
                        "unfinished write cycle %s of %s not restored yet: %s",
                        row.cycle_id,
                        row.device,
                        describe(exc),
                    )

        await asyncio.gather(*(one(r) for r in rows))
        return len(rows)

    async def _call(
        self, resolved: Resolved, ctx: DeviceContext, query: HealthQuery, writes: WriteLog
    ) -> Outcome[HealthResult]:
        """One plugin call; an out-of-process plugin's receipts go into `writes` at once (kept
        whatever happens next), and a writing call it never answered leaves an `unknown` one."""
        try:
            outcome: Outcome[HealthResult] = await run_operation(
                resolved.plugin, RequestKind.BMC_HEALTH, ctx, query, writes
            )
        except BaseException as exc:
            unanswered = _unanswered(resolved.plugin, query, exc)
            if unanswered is not None:
                writes.record([unanswered])
            raise
        # run_operation puts the whole log on the outcome too: those are not added again
        local = {id(w) for w in writes.entries()}
        writes.record([w for w in outcome.writes if id(w) not in local])
        return outcome

    async def _close(
        self,
        row: WriteCycleRow,
        applied: Sequence[HealthCheck],
        writes: WriteLog,
        *,
        leftover: bool = False,
    ) -> list[HealthCheck]:
        """Restore what the apply did not prove back, from the journal; close it once all is back,
        and no test write whose answer was lost may still land (`LOST_WRITE_SECONDS`). A leftover
        journal is taken over first. A component that devicectl set since the cycle began keeps
        that newer value."""
        if leftover:
            taken = await self._taken(row)
            if isinstance(taken, list):
                return taken
            row = taken
            unrecorded = not isinstance(row.report, Mapping)
            known = self._unrecorded.get(row.cycle_id) if unrecorded else None
            if known is not None:  # its cycle ran here: what its receipts showed
                unsure, recheck = _waiting(*known, datetime.now(UTC))
            else:
                unsure, recheck = _still_waiting(row)
            cut_off = unrecorded and known is None
        else:  # this cycle's test writes: those whose answer was lost may land after any restore
            unsure = _lost_writes(writes.entries(), row.priors)
            recheck = datetime.now(UTC) + timedelta(seconds=LOST_WRITE_SECONDS)
            cut_off = False
        needs = {k: v for k, v in row.priors.items() if not _proven_back(applied, k)}
        superseded: dict[str, str] = {}
        checks: list[HealthCheck] = []
        first = len(writes.entries())
        try:
            if needs:
                try:
                    superseded = await self._superseded(row, needs)
                except Exception as exc:  # unknown: restoring could undo a newer cap
                    why = f"cannot tell whether devicectl set it since the cycle began ({describe(exc)})"
                    checks = [HealthCheck(f"restore {k}", FAIL, f"not restored yet: {why}") for k in needs]
                needs = {k: v for k, v in needs.items() if k not in superseded}
                if needs and not checks:
                    checks = await self._restore(row, needs, writes)
        except _Lost as lost:
            self._settled(row.device, row.cycle_id)
            log.warning("write cycle %s of %s: not restored here: %s", row.cycle_id, row.device, lost)
            if not leftover and row.origin.startswith("verify "):
                self._reports[row.origin] = (
                    f"NOT restored here (a cap may still hold the test value): {lost}: "
                    + ", ".join(f"{k} to {prior_text(p)}" for k, p in needs.items())
                )
            return [HealthCheck(f"restore {k}", FAIL, f"not restored here: {lost}") for k in needs]
        restored = [k for k in row.priors if k not in needs and k not in superseded] + [
            c.name[8:] for c in checks if c.status == PASS
        ]
        missing = [k for k in needs if f"restore {k}" not in {c.name for c in checks if c.status == PASS}]
        # NOTE: not a cap devicectl set since the cycle began: a later restore would keep it anyway
        waiting = sorted(k for k in unsure if k not in missing and k not in superseded)
        report: dict[str, Any] = {
            "by": "the next start" if leftover else "the cycle",
            "owner": row.owner,
            "restored": {k: row.priors[k] for k in restored},
            "not_restored": {k: row.priors[k] for k in missing},
            "superseded": superseded,
            "checks": [c.to_json() for c in checks],
        }
        if leftover:  # the restore's receipts (a leftover's own request may be long answered)
            report["writes"] = [encode(w) for w in writes.entries()[first:]]
        text = self._report_text(row, needs, checks, missing) if needs or not superseded else ""
        if superseded:
            text = text or "no cap left to restore from its journal"
            text += "; kept what devicectl set since: " + ", ".join(
                f"{k} (request {r})" for k, r in superseded.items()
            )
        if waiting:
            report["lost_writes"], report["recheck_after"] = waiting, recheck.isoformat()
            why = (
                "the controller that ran the cycle left no record of its answers"
                if cut_off
                else "its answer was lost"
            )
            text = (text or "restored") + (
                f"; a test write to {', '.join(waiting)} may still land ({why}): the "
                f"journal stays open and the node is read, and restored where it landed, again at "
                f"{recheck.isoformat(timespec='seconds')}"
            )
        if not leftover and row.origin.startswith("verify "):
            self._reports[row.origin] = text
        unclosed = False
        try:  # only while this process still holds the journal (owner and epoch)
            held = await self._store.close_write_cycle(
                row.cycle_id,
                encode(report),
                datetime.now(UTC),
                owner=row.owner,
                epoch=row.epoch,
                restored=not missing and not waiting,
            )
        except Exception as exc:  # unknown whether it closed: the device's next request finds out
            log.error(
                "write cycle %s of %s: cannot close its journal (%s); the node's next request restores "
                "what it journaled (the values in force after this restore) and closes it first",
                row.cycle_id,
                row.device,
                describe(exc),
            )
            held = unclosed = True  # as far as this process knows
            if not isinstance(row.report, Mapping):  # a later restore must not take it for a crash's
                self._unrecorded[row.cycle_id] = (set(waiting), recheck)
        if not held:  # taken over meanwhile: the newer holder's record stands
            self._settled(row.device, row.cycle_id)
            log.warning(
                "write cycle %s of %s was taken over by another controller during its restore: %s",
                row.cycle_id,
                row.device,
                text,
            )
        elif missing or unclosed:
            # NOTE: settled with its journal possibly open, the node's requests went on and only the
            # next start restored it, over whatever caps those requests had set by then (a
            # newer desired limit is kept, a cap set by hand is not)
            self._mark(row.device, row.cycle_id, again_in=RETRY_SECONDS)
        elif waiting:
            left = (recheck - datetime.now(UTC)).total_seconds()
            self._mark(row.device, row.cycle_id, again_in=max(left, 0.0))
        else:
            self._settled(row.device, row.cycle_id)
        if leftover and held:
            level = logging.WARNING if not missing else logging.ERROR
            log.log(level, "unfinished write cycle of %s (%s): %s", row.device, row.origin, text)
            if row.origin.startswith("verify "):
                try:
                    await self._store.note_bmc_check(
                        row.origin.removeprefix("verify "),
                        f"interrupted during its write cycle; {text}",
                        [encode(w) for w in writes.entries()] or None,
                        datetime.now(UTC),
                    )
                except Exception as exc:
                    log.error("cannot record the restore on %s: %s", row.origin, exc)
        if leftover:
            checks = [replace(c, detail=f"unfinished write cycle ({row.origin}): {c.detail}") for c in checks]
        return checks

    async def _restore_call(
        self, device: str, call: Coroutine[Any, Any, Outcome[HealthResult]]
    ) -> Outcome[HealthResult]:
        """A restore's plugin call, under its own deadline (TimeoutError past it) and no longer than
        this process surely holds the node's shard lease, nor past `stop`: either cancels the call
        and raises `_Lost` (its journal stays open for the next holder or the next start)."""
        if self._stopped:
            # NOTE: a stop that came while the restore awaited its journal and device is seen here,
            # with no await between this check and the task's joining `_restoring` (which `stop`
            # cancels): no call starts after it
            call.close()
            raise _Lost("this controller is stopping; the node's next holder, or the next start, restores it")
        task = asyncio.ensure_future(call)
        self._restoring.add(task)
        try:
            if self._shards is None:
                return await asyncio.wait_for(task, RESTORE_SECONDS + 5)
            shard = self._shards.shard_for(device)
            return await self._shards.call_under_lease(task, RESTORE_SECONDS + 5, shard)
        except LeftForOwner:
            raise _Lost(
                "this controller's shard lease of the node lapsed during the restore (its calls were "
                "cancelled); its next holder restores it"
            ) from None
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self._stopped and task.cancelled() and (current is None or not current.cancelling()):
                raise _Lost(
                    "this controller stopped during the restore (its calls were cancelled); the "
                    "node's next holder, or the next start, restores it"
                ) from None
            raise
        finally:
            self._restoring.discard(task)

    async def _close_unwritten(self, row: WriteCycleRow) -> None:
        """Close a journal whose cycle ended before its first write (a cancel, a failed insert): left
        open, a later restore would write the node's old reads back over whatever it holds by then."""
        report = {"by": "the cycle", "owner": row.owner, "restored": {}, "not_restored": {}, "written": False}
        try:
            await self._store.close_write_cycle(
                row.cycle_id, report, datetime.now(UTC), owner=row.owner, epoch=row.epoch
            )
        except Exception as exc:  # it may stay open: the node's next request restores it first
            log.error(
                "write cycle %s of %s: cannot close its journal (%s); the node's next request restores "
                "what it journaled (nothing was written: the values in force) and closes it first",
                row.cycle_id,
                row.device,
                describe(exc),
            )
            self._unrecorded[row.cycle_id] = (set(), datetime.now(UTC))  # nothing was written
            self._mark(row.device, row.cycle_id)

    async def _taken(self, row: WriteCycleRow) -> WriteCycleRow | list[HealthCheck]:
        """Take a leftover journal over (compare-and-set of its epoch): the row as held here, or the
        checks to report when it moved on (none: closed meanwhile; failed: another holds it). Never
        where this process no longer surely holds the node's shard lease (a restore queued here
        while a rebalancing handed the shard on): taken, the journal would be its next holder's no
        more, and restored by nobody."""
        if self._shards is not None and self._shards.valid_for(self._shards.shard_for(row.device)) <= 0:
            self._settled(row.device, row.cycle_id)
            why = "this controller no longer holds the node's shard lease; its next holder restores it"
            log.warning("write cycle %s of %s: not restored here: %s", row.cycle_id, row.device, why)
            return [
                HealthCheck(
                    f"restore {k}", FAIL, f"unfinished write cycle ({row.origin}): not restored here: {why}"
                )
                for k in row.priors
            ]
        taken = await self._store.take_write_cycle(row, self._owner)
        if taken is not None:
            return taken
        now = next(
            (r for r in await self._store.open_write_cycles([row.device]) if r.cycle_id == row.cycle_id), None
        )
        self._settled(row.device, row.cycle_id)
        if now is None:
            return []  # closed meanwhile: nothing left to restore
        why = f"controller {now.owner or '?'} took its journal over (epoch {now.epoch}) and restores it"
        log.warning("write cycle %s of %s: %s", row.cycle_id, row.device, why)
        return [
            HealthCheck(
                f"restore {k}", FAIL, f"unfinished write cycle ({row.origin}): not restored here: {why}"
            )
            for k in row.priors
        ]

    async def _superseded(self, row: WriteCycleRow, needs: Mapping[str, Any]) -> dict[str, str]:
        """Components of a journal that a request of devicectl set after the cycle began: its
        desired limit now names another request than when the cycle opened (`desired_at_open`, read
        in the journal's own insert). Component -> that request; restoring them would undo it.
        Raises when the desired limits cannot be read (nothing is restored then).

        A journal opened by a release without `desired_at_open` falls back to comparing the limit's
        `set_at` with the journal's `created_at`: two hosts' clocks where replicas differ."""
        desired = {d.component: d for d in await self._store.desired_for(row.device)}
        out = {}
        for key in needs:
            component = "cpu" if key.startswith("cpu/") else key
            limit = desired.get(component)
            if limit is None:
                continue
            if row.desired_at_open is not None:
                newer = row.desired_at_open.get(component) != limit.request_id
            else:
                newer = limit.set_at > row.created_at
            if newer:
                out[key] = limit.request_id
        return out

    @staticmethod
    def _report_text(
        row: WriteCycleRow,
        needs: Mapping[str, Any],
        checks: Sequence[HealthCheck],
        missing: Sequence[str],
    ) -> str:
        if not needs:
            return "every cap restored by the cycle: " + ", ".join(
                f"{k} to {prior_text(p)}" for k, p in row.priors.items()
            )
        done = [f"{k} to {prior_text(p)}" for k, p in needs.items() if k not in missing]
        parts = []
        if done:
            parts.append("restored from its journal: " + ", ".join(done))
        if missing:
            why = {c.name[8:]: c.detail for c in checks if c.status != PASS}
            parts.append(
                "NOT restored (a cap may still hold the test value): "
                + "; ".join(f"{k} to {prior_text(needs[k])}: {why.get(k, 'not answered')}" for k in missing)
            )
        return "; ".join(parts)

    async def _restore(
        self, row: WriteCycleRow, needs: Mapping[str, Mapping[str, Any]], writes: WriteLog
    ) -> list[HealthCheck]:
        """One plugin call that puts the journaled priors back, under its own deadline; only while
        this process holds the node's shard lease and the journal and is not stopping (else
        `_Lost`), and cut short (`_Lost`) when the lease lapses or the process stops meanwhile (a
        stop is checked where the call starts, `_restore_call`)."""
        if self._shards is not None and self._shards.valid_for(self._shards.shard_for(row.device)) <= 0:
            raise _Lost("this controller no longer holds the node's shard lease; its next holder restores it")
        try:
            held = await self._store.holds_write_cycle(row)
        except Exception as exc:  # unknown: another holder may be restoring it now
            why = f"cannot tell whether this controller still holds its journal ({describe(exc)})"
            return [HealthCheck(f"restore {k}", FAIL, f"not restored yet: {why}") for k in needs]
        if not held:
            raise _Lost("another controller took its journal over and restores it")
        try:
            resolved = await self._resolve(row.device)
            ctx = DeviceContext(
                device_id=row.device,
                model=resolved.model,
                endpoint=resolved.endpoint,
                request_id=f"{INTERNAL_PREFIX}restore-{row.cycle_id}",
                deadline=time.monotonic() + RESTORE_SECONDS,
                state=resolved.state,
            )
            query = HealthQuery(restore={k: dict(v) for k, v in needs.items()})
            outcome = await self._restore_call(row.device, self._call(resolved, ctx, query, writes))
            checks = list(outcome.result.checks)
            if outcome.result.failure:
                checks.append(HealthCheck("restore", FAIL, outcome.result.failure))
        except _Lost:
            raise
        except Exception as exc:
            why = describe(exc)
            log.error("write cycle %s of %s: restore failed: %s", row.cycle_id, row.device, why)
            return [HealthCheck(f"restore {k}", FAIL, f"not restored: {why}") for k in needs]
        answered = {c.name for c in checks}
        checks += [
            HealthCheck(f"restore {k}", FAIL, "not restored: the plugin did not report it")
            for k in needs
            if f"restore {k}" not in answered
        ]
        return checks
