"""Runs readiness verifications (`devicectl verify`) in the background of a controller that executes
requests: journaled first (`bmc_checks`, status `queued`), claimed, run through the device's plugin
(`DevicePlugin.bmc_health`), and recorded with every check and the receipts of a write cycle.

A controller that restarts marks the verifications it was running `interrupted` and claims the
queued ones again (`recover`), so a fleet's verification is never lost. A write cycle is a journaled
transaction (`controller.execution.write_cycle`): one stopped by a shutdown is restored and recorded
`interrupted` with the restore's report and every receipt; one cut by a crash is restored from its
journal at the next start, and its record says which cap was restored to which value. A write cycle
holds the device's lane (`Dispatcher.exclusive`), in the one process that holds the device's shard
lease (with `--workers`, a process claims only verifications of devices whose shard it holds): no
request of the device runs anywhere while its caps are cycled.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, datetime

from controller.cluster.shards import LeftForOwner
from controller.config import Settings
from controller.desired.limits import INTERNAL_PREFIX, enforced_from, gpu_pairs
from controller.desired.receipts import failed_writes_note
from controller.execution.dispatch import Dispatcher
from controller.execution.runner import RequestRunner, receipts
from controller.execution.write_cycle import origin_of_check
from controller.inventory import DeviceEntry
from controller.observability import metrics, reachability
from controller.observability.logs import request_context
from controller.process.supervise import Outage, describe
from controller.store import BmcAccess, BmcCheckRow, Store
from plugins.base import (
    DeviceContext,
    DeviceControllerError,
    Empty,
    HealthCheck,
    HealthQuery,
    HealthResult,
    RequestKind,
    WriteLog,
    recording,
    run_operation,
)

log = logging.getLogger(__name__)

#: verifications of a fleet running at once (each holds one BMC session's worth of GETs)
CONCURRENCY = 32
#: the longest one verification may take: read-only, and with a write cycle (a read-back window per cap)
READ_ONLY_SECONDS = 120.0
WRITE_CYCLE_SECONDS = 600.0


class VerifyRefused(ValueError):
    """A verification that must not be started (unknown device, a write cycle not allowed)."""


def select(
    inventory: Mapping[str, DeviceEntry],
    devices: Sequence[str],
    *,
    all_devices: bool = False,
    model: str = "",
) -> list[str]:
    """The devices a verification names: ids, every device, or every device of a model (any case)."""
    if all_devices or model:
        picked = [
            e.id
            for e in inventory.values()
            if not model or str(e.model.get("Model") or e.model.get("model") or "").lower() == model.lower()
        ]
        if not picked:
            raise VerifyRefused(f"no device of model {model!r} in the inventory" if model else "no devices")
        return sorted(picked)
    unknown = [d for d in devices if d not in inventory]
    if unknown:
        raise VerifyRefused(f"unknown device(s): {', '.join(unknown)}")
    if not devices:
        raise VerifyRefused("name devices, --all or --model")
    return list(dict.fromkeys(devices))


async def journal(store: Store, devices: Sequence[str], query: HealthQuery) -> list[BmcCheckRow]:
    """Journal one verification per device (one batch, status `queued`); a checker runs them."""
    problem = query.check()
    if problem:
        raise VerifyRefused(problem)
    batch = uuid.uuid4().hex[:12]
    width = max(4, len(str(len(devices) - 1)))  # ids sort as the devices were given, 20,000 too
    now = datetime.now(UTC)
    data = {k: v for k, v in asdict(query).items() if k != "inband_gpu_limits"}
    rows = [
        BmcCheckRow(
            check_id=f"{batch}-{i:0{width}d}",
            batch_id=batch,
            device=d,
            write_cycle=not query.skip_writes,
            status="queued",
            verdict="",
            query=data,
            result=None,
            writes=None,
            error="",
            owner="",
            created_at=now,
            started_at=None,
            finished_at=None,
        )
        for i, d in enumerate(devices)
    ]
    await store.add_bmc_checks(rows)
    kind = " (write cycle)" if not query.skip_writes else ""
    log.info("verification %s: %d device(s) queued%s", batch, len(rows), kind)
    return rows


class BmcChecker:
    """Journals, runs and records readiness verifications (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        runner: RequestRunner,
        dispatcher: Dispatcher,
        settings: Settings,
        inventory: Mapping[str, DeviceEntry],
        *,
        concurrency: int = CONCURRENCY,
    ) -> None:
        self._store = store
        self._runner = runner
        self._dispatcher = dispatcher
        self._settings = settings
        self._inventory = inventory
        self._owner = settings.instance_id
        self._slots = asyncio.Semaphore(concurrency)
        self._concurrency = concurrency
        self._running: set[asyncio.Task[None]] = set()

    async def recover(self) -> int:
        """Mark what this controller was running when it stopped `interrupted` (queued ones just run).
        Unfinished write cycles were restored before (`WriteCycles.recover`, at the start)."""
        count = await self._store.interrupt_bmc_checks(self._owner, datetime.now(UTC))
        if count:
            log.warning("%d readiness verification(s) were interrupted by a restart (verify list)", count)
        return count

    async def run(self, interval: float = 0.5) -> None:
        """Claim queued verifications and run them, at most `concurrency` at once."""
        outage = Outage("readiness verifications", log)
        await self.recover()
        try:
            await self._loop(outage, interval)
        finally:  # stopping: what runs is cancelled and reported interrupted at the next start
            await self.stop()

    async def _loop(self, outage: Outage, interval: float) -> None:
        while True:
            try:
                free = self._concurrency - len(self._running)
                devices = self._runnable_devices()
                rows = (
                    await self._store.claim_bmc_checks(self._owner, free, datetime.now(UTC), devices)
                    if free and devices != []
                    else []
                )
                outage.ok()
            except Exception as exc:  # a database outage must not end verification for good
                await asyncio.sleep(max(outage.failed(exc), interval))
                continue
            for row in rows:
                task = asyncio.create_task(self._run(row), name=f"verify:{row.device}")
                self._running.add(task)
                task.add_done_callback(self._running.discard)
            if not rows:
                await asyncio.sleep(interval)

    def _runnable_devices(self) -> list[str] | None:
        """The inventory devices whose shard this process holds (None: it holds every shard)."""
        shards = self._runner.shards
        if not shards.leased:
            return None
        return [d for d in self._inventory if shards.runs(shards.shard_for(d))]

    async def _run(self, row: BmcCheckRow) -> None:
        with request_context(row.device, row.check_id, ""):
            log_ = WriteLog(dry_run=self._settings.shadow)  # shadow mode: no write leaves
            status, verdict, result, error = "failed", "", None, ""
            try:
                async with self._slots:
                    res = await self._check(row, log_)
                status, verdict, result = "done", res.verdict, res.to_json()
                metrics.record_verification(row.device, res)
                await self._record_certificate(row.device, res)
            except asyncio.CancelledError:
                if row.write_cycle:  # stopping: the cycle restored what it wrote; say so, with receipts
                    report = self._runner.write_cycles.report_of(origin_of_check(row.check_id))
                    # NOTE: with no journal report (stopped before its journal, or in a restore of an
                    # earlier leftover), the receipts say what was written, never "nothing" over them
                    done = report or failed_writes_note(log_.entries()) or "nothing was written"
                    await self._store.finish_bmc_check(
                        row.check_id,
                        "interrupted",
                        writes=receipts(log_.entries()),
                        error="stopped by a controller shutdown during its write cycle; " + done,
                        at=datetime.now(UTC),
                    )
                raise  # read-only: the row stays `running` and the next start reports it interrupted
            except Exception as exc:
                error = describe(exc)
                log.warning("verification %s of %s could not run: %s", row.check_id, row.device, error)
            finally:  # kept only until its verification ends
                self._runner.write_cycles.report_of(origin_of_check(row.check_id))
            writes = receipts(log_.entries())
            await self._store.finish_bmc_check(
                row.check_id,
                status,
                verdict=verdict,
                result=result,
                writes=writes,
                error=error,
                at=datetime.now(UTC),
            )

    async def _record_certificate(self, device: str, res: HealthResult) -> None:
        """The BMC certificate's expiry its `tls` check saw: the device's health row and gauge."""
        for check in res.checks:
            not_after = check.evidence.get("not_after") if check.name == "tls" else None
            if not isinstance(not_after, str):
                continue
            try:
                at = datetime.fromisoformat(not_after)
            except ValueError:
                continue
            at = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
            await self._store.record_bmc_access(
                [BmcAccess(device, datetime.now(UTC), ended=True, cert_not_after=at)]
            )
            reachability.BMC_HEALTH.certificate(device, at.timestamp())

    async def _check(self, row: BmcCheckRow, writes: WriteLog) -> HealthResult:
        query = HealthQuery(**{k: v for k, v in row.query.items() if k in HealthQuery.__dataclass_fields__})
        if self._settings.shadow and not query.skip_writes:
            raise DeviceControllerError(
                "shadow mode: the write cycle was not run (no write is sent in shadow mode); "
                "run `devicectl verify` without --write-cycle"
            )
        limit = READ_ONLY_SECONDS if query.skip_writes else WRITE_CYCLE_SECONDS
        inband, unread = await self._inband_limits(row.device, limit)
        if inband:
            query = HealthQuery(**{**asdict(query), "inband_gpu_limits": inband})
        resolved = await self._runner.resolve(row.device, b"", b"")
        ctx = DeviceContext(
            device_id=row.device,
            model=resolved.model,
            endpoint=resolved.endpoint,
            request_id=f"{INTERNAL_PREFIX}verify-{row.check_id}",
            deadline=time.monotonic() + limit,
            state=resolved.state,
        )
        cycles = self._runner.write_cycles
        shards = self._runner.shards
        shard = shards.shard_for(row.device)
        if cycles.unsettled(row.device) and not self._settings.shadow:  # a leftover test value first
            # NOTE: counted as the shard's work, as a write cycle is: a rebalancing does not hand the
            # shard on while this restore writes the node
            async with self._dispatcher.exclusive(row.device):
                with self._runner.working_in(shard):
                    await cycles.settle(row.device, writes)
        if query.skip_writes:
            call = resolved.plugin.bmc_health(ctx, query)
            with recording(writes):
                outcome = await asyncio.wait_for(call, limit)
            return _with_unread(await self._runner.write_cycles.explained(row.device, outcome.result), unread)
        async with self._dispatcher.exclusive(row.device):  # one writer per device
            if not shards.runs(shard):
                raise VerifyRefused(f"the shard lease of {row.device} is no longer held here; run it again")
            with self._runner.working_in(shard):  # its lease is not handed on while the caps cycle
                cycle = self._runner.write_cycles.run(
                    resolved, ctx, query, origin_of_check(row.check_id), writes
                )
                try:
                    # NOTE: as a request's call: cancelled (and its caps restored, `WriteCycles.run`)
                    # once this process no longer surely holds the lease, so the shard's next
                    # holder, which restores the journal, never has a test write of ours in flight
                    outcome = await shards.call_under_lease(cycle, limit, shard)
                except LeftForOwner:
                    raise VerifyRefused(
                        f"the shard lease of {row.device} lapsed here during the write cycle: its device "
                        "calls were cancelled; the shard's next holder restores what the journal names"
                    ) from None
        return _with_unread(await self._runner.write_cycles.explained(row.device, outcome.result), unread)

    async def _inband_limits(self, device: str, limit: float) -> tuple[dict[int, float], str]:
        """The GPU limits the node's in-band device (an inventory entry with `bmc = DEVICE`) enforces,
        by the BMC's GPU index, and why a linked device gave none ('' when none is linked: the
        check says skip; else it warns with the reason)."""
        linked = next((e for e in self._inventory.values() if e.bmc == device), None)
        if linked is None:
            return {}, ""
        why = f"linked NVML device {linked.id} could not be read: "
        try:
            resolved = await self._runner.resolve(linked.id, b"", b"")
            ctx = DeviceContext(
                device_id=linked.id,
                model=resolved.model,
                endpoint=resolved.endpoint,
                request_id=f"{INTERNAL_PREFIX}verify-inband",
                deadline=time.monotonic() + limit,
                state=resolved.state,
            )
            outcome = await asyncio.wait_for(
                run_operation(resolved.plugin, RequestKind.STD_METRICS, ctx, Empty()), limit
            )
        except Exception as exc:
            log.info("verification of %s: cannot read %s in band: %s", device, linked.id, describe(exc))
            return {}, why + describe(exc)
        if not outcome.result.ok and not getattr(outcome.result, "metrics", None):
            return {}, why + (outcome.result.error or "no answer")
        enforced = enforced_from(outcome.result)
        out: dict[int, float] = {}
        for inband, bmc in gpu_pairs(enforced, linked.bmc_gpus).items():
            watts = enforced.get(inband)
            if watts is not None:
                out[int(bmc.split("/")[1])] = float(watts)
        return out, "" if out else why + "it reports no GPU power limits"

    async def stop(self) -> None:
        """Cancel running verifications (they are reported interrupted at the next start)."""
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)


def _with_unread(result: HealthResult, unread: str) -> HealthResult:
    """A linked NVML device that could not be read is a warning naming why, not "no linked NVML
    device" (the plugin's skip)."""
    if not unread:
        return result
    checks = tuple(
        HealthCheck("inband", "warn", unread, {"reason": unread})
        if c.name == "inband" and c.status == "skip"
        else c
        for c in result.checks
    )
    return HealthResult(checks, result.failure)
