"""A write cycle as a journaled transaction (`devicectl verify --write-cycle`, and `bmc_health` with
`write_cycle`), run by the controller in plugin calls (`HealthQuery.apply`, `priors`, `restore`):

1. plan: the read-only checks; their `cap KEY` evidence is the value, mode and resource of every cap;
2. journal: those priors are committed to ``write_cycles`` before the first write;
3. apply: the plugin cycles each cap and restores it to its journaled prior (never to a read that
   could be a leftover test value);
4. close: wherever the apply did not prove a cap back (a failure, a deadline, a cancel), the journal
   is restored by the controller, under its own deadline (`RESTORE_SECONDS`), never the request's,
   and a cancel waits for it; the journal is closed only once every cap is proven back.

A cycle left open (a crash, a restore that failed) is restored from its journal at the next start,
before any request of the node runs (`recover`), and before the node's next cycle; the report names
each component, its value and whether it was restored, on the verification's record. A readiness
result's explicit caps are compared with what devicectl last set (`WriteCycles.explained`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from controller.desired.limits import INTERNAL_PREFIX, explain_caps
from controller.execution.resolve import Resolved
from controller.process.supervise import describe
from controller.store import Store, WriteCycleRow
from plugins.base import (
    DeviceContext,
    DeviceWrite,
    HealthCheck,
    HealthQuery,
    HealthResult,
    Outcome,
    RequestKind,
    WriteLog,
    run_operation,
    uncancelled,
)
from plugins.base.codec import encode
from plugins.base.health import FAIL, PASS

log = logging.getLogger(__name__)

#: a restore's own deadline (the request's may be what ran out)
RESTORE_SECONDS = 90.0
#: journals restored at once at a start
RECOVERY_CONCURRENCY = 16


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


def _proven_back(checks: Sequence[HealthCheck], key: str) -> bool:
    """Whether the apply's `write KEY` check shows the cap restored, or nothing written (a cycle
    the plugin refused as a whole, e.g. for an active resource group, wrote nothing)."""
    if any(c.name == "write" for c in checks):
        return True
    check = next((c for c in checks if c.name == f"write {key}"), None)
    if check is None:
        return False
    return check.evidence.get("restored") is True or check.evidence.get("wrote") is False


class WriteCycles:
    """Runs write cycles through a device's plugin with their journal (see the module docstring)."""

    def __init__(
        self, store: Store, resolve: Callable[[str], Awaitable[Resolved]], owner: str, *, shadow: bool = False
    ) -> None:
        #: shadow mode: no write is sent, a restore from a journal neither (the journal stays open)
        self.shadow = shadow
        self._store = store
        self._resolve = resolve
        self._owner = owner
        #: origin -> the last close's one-line report (a stopped verification records it)
        self.reports: dict[str, str] = {}
        #: devices whose journal a restore here could not close: restored again before their next
        #: request runs (`operation`)
        self.pending: set[str] = set()

    async def run(
        self, resolved: Resolved, ctx: DeviceContext, query: HealthQuery, origin: str, writes: WriteLog
    ) -> Outcome[HealthResult]:
        """Plan, journal, apply, close; the result has the read-only checks, then the write checks."""
        device = ctx.device_id
        remote: list[DeviceWrite] = []
        leftover = await self.restore_open(device, writes)
        if any(c.status == FAIL for c in leftover):
            why = "an unfinished write cycle of this node could not be restored (see its restore checks)"
            refused = HealthCheck("write", FAIL, f"write cycle refused: {why}")
            return Outcome(HealthResult((*leftover, refused)), writes=tuple(writes.entries()))
        plan_query = replace(query, skip_writes=True, apply=False, priors={}, restore={})
        planned = await self._call(resolved, ctx, plan_query, writes, remote)
        checks: list[HealthCheck] = [*leftover, *planned.result.checks]
        if not any(c.name == "login" and c.status == PASS for c in planned.result.checks):
            return replace(planned, result=HealthResult(tuple(checks)), writes=self._writes(writes, remote))
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
            await uncancelled(self._store.open_write_cycle(row))
        applied: Outcome[HealthResult] | None = None
        try:
            applied = await self._call(
                resolved, ctx, replace(query, apply=True, priors=priors, restore={}), writes, remote
            )
        finally:  # a failure, a deadline, a cancel: whatever the apply did not prove back is restored
            done = list(applied.result.checks) if applied is not None else []
            closing = await uncancelled(self._close(row, done, writes, remote)) if priors else []
        checks += [*done, *closing]
        last = applied if applied is not None else planned
        return replace(last, result=HealthResult(tuple(checks)), writes=self._writes(writes, remote))

    async def operation(
        self, resolved: Resolved, kind: RequestKind, ctx: DeviceContext, request: Any, writes: WriteLog
    ) -> Outcome[Any]:
        """A journaled request's device call: a `bmc_health` write cycle through `run`, any other
        kind as the plugin serves it; a readiness result `explained`. A device whose unfinished
        write cycle could not be restored yet is restored first."""
        if ctx.device_id in self.pending and not ctx.dry_run:
            await self.restore_open(ctx.device_id, writes)
        if isinstance(request, HealthQuery) and not request.skip_writes:
            origin = origin_of_request(ctx.request_id)
            outcome: Outcome[Any] = await self.run(resolved, ctx, request, origin, writes)
        else:
            outcome = await run_operation(resolved.plugin, kind, ctx, request, writes)
        if isinstance(outcome.result, HealthResult):
            outcome = replace(outcome, result=await self.explained(ctx.device_id, outcome.result))
        return outcome

    async def explained(self, device: str, result: HealthResult) -> HealthResult:
        """A readiness result whose explicit caps are compared with what devicectl last set
        (`controller.desired.limits.explain_caps`): a cap devicectl did not set, or that moved, is
        flagged, a leftover test value included. As it was when the desired limits are unreadable."""
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
        for row in await self._store.open_write_cycles([device]):
            out += await uncancelled(self._close(row, [], writes, [], leftover=True))
        return out

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
        slots = asyncio.Semaphore(RECOVERY_CONCURRENCY)

        async def one(row: WriteCycleRow) -> None:
            async with slots:
                await self._close(row, [], WriteLog(), [], leftover=True)

        await asyncio.gather(*(one(r) for r in rows))
        return len(rows)

    async def _call(
        self,
        resolved: Resolved,
        ctx: DeviceContext,
        query: HealthQuery,
        writes: WriteLog,
        remote: list[DeviceWrite],
    ) -> Outcome[HealthResult]:
        outcome: Outcome[HealthResult] = await run_operation(
            resolved.plugin, RequestKind.BMC_HEALTH, ctx, query, writes
        )
        # an out-of-process plugin's writes come back on its outcome; in-process ones are in
        # `writes` (run_operation puts the whole log on the outcome too: those are not added again)
        local = {id(w) for w in writes.entries()}
        remote += [w for w in outcome.writes if id(w) not in local]
        return outcome

    @staticmethod
    def _writes(writes: WriteLog, remote: Sequence[DeviceWrite]) -> tuple[DeviceWrite, ...]:
        return (*remote, *writes.entries())

    async def _close(
        self,
        row: WriteCycleRow,
        applied: Sequence[HealthCheck],
        writes: WriteLog,
        remote: list[DeviceWrite],
        *,
        leftover: bool = False,
    ) -> list[HealthCheck]:
        """Restore what the apply did not prove back, from the journal; close it once all is back.
        A leftover's component that devicectl set since the cycle began keeps that newer value."""
        needs = {k: v for k, v in row.priors.items() if not _proven_back(applied, k)}
        superseded = await self._superseded(row, needs) if leftover else {}
        needs = {k: v for k, v in needs.items() if k not in superseded}
        checks: list[HealthCheck] = []
        if needs:
            checks = await self._restore(row, needs, writes, remote)
        restored = [k for k in row.priors if k not in needs and k not in superseded] + [
            c.name[8:] for c in checks if c.status == PASS
        ]
        missing = [k for k in needs if f"restore {k}" not in {c.name for c in checks if c.status == PASS}]
        if missing:
            self.pending.add(row.device)
        else:
            self.pending.discard(row.device)
        report = {
            "by": "the next start" if leftover else "the cycle",
            "restored": {k: row.priors[k] for k in restored},
            "not_restored": {k: row.priors[k] for k in missing},
            "superseded": superseded,
            "checks": [c.to_json() for c in checks],
        }
        text = self._report_text(row, needs, checks, missing) if needs or not superseded else ""
        if superseded:
            text = text or "no cap left to restore from its journal"
            text += "; kept what devicectl set since: " + ", ".join(
                f"{k} (request {r})" for k, r in superseded.items()
            )
        self.reports[row.origin] = text
        try:
            await self._store.close_write_cycle(
                row.cycle_id, encode(report), datetime.now(UTC), restored=not missing
            )
        except Exception as exc:  # the journal stays open: the next start restores (a no-op) again
            log.error("write cycle %s of %s: cannot close its journal: %s", row.cycle_id, row.device, exc)
        if leftover:
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
            checks = [replace(c, detail=f"unfinished write cycle ({row.origin}): {c.detail}") for c in checks]
        return checks

    async def _superseded(self, row: WriteCycleRow, needs: Mapping[str, Any]) -> dict[str, str]:
        """Components of a leftover journal that a request of devicectl set after the cycle began
        (its desired limit is newer): component -> that request. Restoring them would undo it."""
        try:
            desired = {d.component: d for d in await self._store.desired_for(row.device)}
        except Exception as exc:
            log.warning("cannot read %s's desired limits: %s", row.device, describe(exc))
            return {}
        out = {}
        for key in needs:
            limit = desired.get("cpu" if key.startswith("cpu/") else key)
            if limit is not None and limit.set_at > row.created_at:
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
        self,
        row: WriteCycleRow,
        needs: Mapping[str, Mapping[str, Any]],
        writes: WriteLog,
        remote: list[DeviceWrite],
    ) -> list[HealthCheck]:
        """One plugin call that puts the journaled priors back, under its own deadline."""
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
            outcome = await asyncio.wait_for(
                self._call(resolved, ctx, query, writes, remote), RESTORE_SECONDS + 5
            )
            checks = list(outcome.result.checks)
            if outcome.result.failure:
                checks.append(HealthCheck("restore", FAIL, outcome.result.failure))
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
