"""The periodic drift check: desired limits against what each device enforces, and re-application.

`DriftChecker` sweeps the devices that have desired limits once per `drift_interval`: up to
`drift_concurrency` checks at once (each BMC's plugin still paces its own calls), each under its own
timeout (`device_call_timeout`), so a hung BMC costs its timeout once and never the sweep. It reads
what each enforces (a `std_metrics` read through the device's plugin: NVML in-band, Redfish
out-of-band; for a node the inventory serves both ways, `bmc`, through both plugins) and records
what it finds (desired_limits row, an audit row of kind `drift`, the `devicectl_drift` and
`devicectl_drift_paths_disagree` counters). Under `reapply` (devices matching `drift_reapply`) it
re-sends the requests that set the device's desired state, journaled as internal requests (ids
starting `REAPPLY_PREFIX`) that run in the device's lane like any other and are answered to no one;
at most `drift_max_reapply_per_hour` per device, counted in the journal (so the cap holds across
restarts and processes), after which drift is only reported (a tool fighting devicectl is
reported, not fought forever).
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.config import Settings
from controller.desired.limits import (
    DISAGREE,
    INBAND,
    INTERNAL_PREFIX,
    OUTOFBAND,
    PATH_NAMES,
    REAPPLY_PREFIX,
    Finding,
    caps_from_state,
    compare_paths,
    enforced_from,
    gpu_pairs,
    path_of,
    reapply_event,
)
from controller.execution.dispatch import Dispatcher, Job
from controller.execution.runner import RequestRunner
from controller.inventory import DeviceEntry, node_partner
from controller.observability import metrics, reachability
from controller.observability.logs import clip
from controller.process.supervise import describe
from controller.store import BmcAccess, DesiredLimit, DriftCheck, NewRequest, Store
from plugins.base import DeviceContext, Empty, Ping, RequestKind, run_operation

log = logging.getLogger(__name__)

Reading = dict[str, float | None]


@dataclass
class Sweep:
    """What one sweep did: devices in the order their checks finished, and each failure's reason."""

    total: int = 0
    finished: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


class DriftChecker:
    """The periodic drift check of every device with desired limits (supervised by the app)."""

    def __init__(
        self,
        store: Store,
        runner: RequestRunner,
        dispatcher: Dispatcher,
        settings: Settings,
        clock: Callable[[], float] = time.monotonic,
        inventory: Mapping[str, DeviceEntry] | None = None,
    ) -> None:
        self._store = store
        self._runner = runner
        self._dispatcher = dispatcher
        self._settings = settings
        self._clock = clock
        self._inventory = inventory or {}
        #: the last finished sweep (None before the first)
        self.last_sweep: Sweep | None = None
        #: devices whose access the running sweep has recorded
        self._reached: set[str] = set()

    def mode(self, device: str) -> str:
        """`reapply` for devices matching `drift_reapply` (globs, comma-separated), else `report`."""
        patterns = [p.strip() for p in self._settings.drift_reapply.split(",") if p.strip()]
        return "reapply" if any(fnmatch.fnmatchcase(device, p) for p in patterns) else "report"

    async def run(self) -> None:
        interval = max(self._settings.drift_interval, 0.05)
        while True:
            started = self._clock()
            # every device with desired limits, and every inventory device: its reachability
            devices = sorted({*await self._store.devices_with_desired(), *self._inventory})
            if devices:
                self.last_sweep = await self.sweep(devices)
            await asyncio.sleep(max(interval - (self._clock() - started), 0.0))

    async def sweep(self, devices: Sequence[str]) -> Sweep:
        """Check every device once, at most `drift_concurrency` at a time, each under its own
        timeout; one device's failure or hang never stops or delays the others beyond it."""
        out = Sweep(total=len(devices))
        limit = asyncio.Semaphore(max(1, self._settings.drift_concurrency))
        timeout = self._settings.device_call_timeout

        async def one(device: str) -> None:
            async with limit:
                self._reached.discard(device)
                try:
                    check = await asyncio.wait_for(self.check(device), timeout)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # one device's failure never stops the others
                    why = f"no answer in {timeout:g} s" if isinstance(exc, TimeoutError) else describe(exc)
                    log.warning("drift check of %s failed: %s", device, why)
                    out.failed[device] = why
                    await self._accessed(device, why)
                else:
                    (out.checked if check is not None else out.skipped).append(device)
                if device not in self._reached:  # skipped before any access: only not syncing
                    await self._store.record_bmc_access([BmcAccess(device, datetime.now(UTC), ended=True)])
                out.finished.append(device)

        now = datetime.now(UTC)  # every device's check is under way (`sync_in_progress`)
        await self._store.record_bmc_access([BmcAccess(d, now, syncing=True) for d in devices])
        await asyncio.gather(*(one(d) for d in devices))
        return out

    async def check(self, device: str) -> DriftCheck | None:
        """Check one device now; None when it was skipped (busy, another process's shard, or
        nothing to check)."""
        if not await self._runs_here(device):
            return None
        partner = node_partner(self._inventory, device)
        involved = [device, *([partner.id] if partner is not None else [])]
        if any(self._dispatcher.busy(d) for d in involved):
            return None  # a request is queued or running: its result is the news, not drift
        desired = await self._store.desired_for(device)
        if not any(d.watts is not None for d in desired):
            await self._probe(device)  # nothing to compare: its reachability only
            return None
        own_path, readings = await self._read_paths(device, partner)
        if own_path not in readings:
            return None
        if (
            any(self._dispatcher.busy(d) for d in involved)
            or await self._store.desired_for(device) != desired
        ):
            return None  # a request came in while reading: what was read may be half its change
        findings = compare_paths(desired, readings)
        lines, kinds = _by_component(findings)
        action = await self._act(device, desired, own_path, partner, kinds) if findings else "report"
        for f in findings:
            kind = f.component.split("/")[0]
            if f.kind == DISAGREE:
                metrics.DRIFT_DISAGREE.labels(kind).inc()
            else:
                metrics.DRIFT.labels(kind, f.kind, action.split(":")[0]).inc()
        if findings:
            said = "; ".join(f"{f.component}: {f.line}" for f in findings)
            log.warning("drift on %s: %s (%s)", device, said, action)
        own = readings[own_path]
        paired = len(readings) > 1  # a node read both ways: each path's value, and the findings
        check = DriftCheck(
            device,
            datetime.now(UTC),
            {d.component: own.get(d.component) for d in desired if d.component in own},
            {c: "; ".join(f) for c, f in lines.items()},
            action,
            paths={
                d.component: {p: r[d.component] for p, r in readings.items() if d.component in r}
                for d in desired
            }
            if paired
            else {},
            findings=kinds if paired else {},
        )
        await self._store.record_drift_check(check)
        return check

    async def _read_paths(self, device: str, partner: DeviceEntry | None) -> tuple[str, dict[str, Reading]]:
        """The device's own path, and what each path read, in the device's component names."""
        if partner is None:
            path, own = await self._read(device)
            return path, ({path: own} if own is not None else {})
        entry = self._inventory[device]
        inband_id, bmc_id = (device, partner.id) if entry.bmc else (partner.id, device)
        own_path = INBAND if device == inband_id else OUTOFBAND
        (_, inband), (_, outofband) = await asyncio.gather(
            self._read(inband_id, partner=own_path != INBAND),
            self._read(bmc_id, partner=own_path != OUTOFBAND),
        )
        readings = {p: r for p, r in ((INBAND, inband), (OUTOFBAND, outofband)) if r is not None}
        if inband is not None and outofband is not None:
            pairs = gpu_pairs(inband, self._inventory[inband_id].bmc_gpus)
            if own_path == INBAND:  # the BMC's readings under the in-band names, or the reverse
                readings[OUTOFBAND] = {c: outofband[b] for c, b in pairs.items() if b in outofband}
            else:
                readings[INBAND] = {b: inband[c] for c, b in pairs.items()}
        elif own_path in readings:
            log.info("drift check of %s: read %s only this time", device, PATH_NAMES[own_path])
        return own_path, readings

    async def _read(self, device: str, partner: bool = False) -> tuple[str, Reading | None]:
        """The path of the device's plugin, and what the device enforces (None: not readable).
        A partner that cannot be read leaves the check with the device's own path."""
        if partner:
            try:
                return await self._read(device)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.info("drift check: cannot read %s, the node's other path: %s", device, describe(exc))
                await self._accessed(device, describe(exc))
                return "", None
        resolved = await self._runner.resolve(device, b"", b"")
        path = path_of(resolved.entry.plugin)
        timeout = self._settings.device_call_timeout
        ctx = DeviceContext(
            device_id=device,
            model=resolved.model,
            endpoint=resolved.endpoint,
            request_id=f"{INTERNAL_PREFIX}drift-check",
            deadline=time.monotonic() + timeout,
            state=resolved.state,
        )
        operation = run_operation(resolved.plugin, RequestKind.STD_METRICS, ctx, Empty())
        outcome = await asyncio.wait_for(operation, timeout)
        await self._accessed(device, *_access_error(outcome))
        if not outcome.result.ok:
            log.info("drift check of %s: cannot read the device: %s", device, clip(outcome.result.error))
            return path, None
        enforced = enforced_from(outcome.result)
        # the node cap and each module's and CPU's, which only the state's readings carry (the
        # CPUs' total from the metrics stays: both are the same sum where both exist)
        for component, watts in caps_from_state(outcome.state).items():
            enforced.setdefault(component, watts)
        return path, enforced

    async def _probe(self, device: str) -> None:
        """Whether a device without desired limits answers (a ping through its plugin)."""
        if device not in self._inventory:
            return
        resolved = await self._runner.resolve(device, b"", b"")
        timeout = self._settings.device_call_timeout
        ctx = DeviceContext(
            device_id=device,
            model=resolved.model,
            endpoint=resolved.endpoint,
            request_id=f"{INTERNAL_PREFIX}health-check",
            deadline=time.monotonic() + timeout,
            state=resolved.state,
        )
        outcome = await asyncio.wait_for(
            run_operation(resolved.plugin, RequestKind.PING, ctx, Ping()), timeout
        )
        await self._accessed(device, *_access_error(outcome))

    async def _accessed(self, device: str, error: str, answered: bool = False) -> None:
        """Record one access to the device (its reachability: `devicectl devices health`);
        `answered`: it answered, with `error` (a 503): reached, and that is its last error."""
        self._reached.add(device)
        at = datetime.now(UTC)
        await self._store.record_bmc_access([BmcAccess(device, at, error=clip(error), answered=answered)])
        reachability.BMC_HEALTH.record(device, error, at.timestamp(), answered=answered)

    async def _act(
        self,
        device: str,
        desired: list[DesiredLimit],
        own_path: str,
        partner: DeviceEntry | None,
        kinds: Mapping[str, list[str]],
    ) -> str:
        """What is done about a drift: re-applied (mode, own path off, under the cap) or reported."""
        if self.mode(device) != "reapply":
            return "report"
        if not any(own_path in k for k in kinds.values()):
            # re-sending through this device writes its own path, which holds the desired value
            where = f" (through {partner.id})" if partner is not None else ""
            return f"report: only {PATH_NAMES[OUTOFBAND if own_path == INBAND else INBAND]} drifted{where}"
        return await self._reapply(device, desired)

    async def _reapply(self, device: str, desired: list[DesiredLimit]) -> str:
        limit = self._settings.drift_max_reapply_per_hour
        # counted in the journal: the cap holds across restarts and controllers sharing the database
        since = datetime.now(UTC) - timedelta(hours=1)
        done = {reapply_event(r) for r in await self._store.request_ids_since(device, REAPPLY_PREFIX, since)}
        if len(done) >= limit:
            return f"report: {len(done)} re-applications in the last hour (another tool may be changing it)"
        # every request behind the desired state, oldest first, so the end state is theirs again
        sources = sorted({(d.set_at, d.request_id) for d in desired})
        event = uuid.uuid4().hex[:12]
        ids: list[str] = []
        for _, source in sources:
            view = await self._store.get_request(source)
            if view is None:
                continue  # pruned by retention: nothing left to re-send
            ids.append(
                await self._resend(device, view.payload, source, f"{REAPPLY_PREFIX}{event}-{len(ids)}")
            )
        return "reapply: " + ", ".join(ids) if ids else "report: the requests that set it were pruned"

    async def _runs_here(self, device: str) -> bool:
        """Whether this process holds the device's shard (each device is checked by one process)."""
        shards = self._runner.shards
        if not shards.leased:
            return shards.executes
        view = await self._store.get_device(device)  # a device known only from its model JSON
        return shards.runs(shards.shard_for_model(device, view.model_json if view is not None else None))

    async def _resend(self, device: str, payload: bytes, source: str, request_id: str) -> str:
        msg = pb.DeviceControllerRequest.FromString(payload)
        msg.request_id = request_id
        msg.ClearField("device_state_json")  # the stored state is newer than the one it carried
        msg.trace_id = f"reapply of {source}"[:256]
        kind = RequestKind(msg.WhichOneof("request"))
        now = datetime.now(UTC)
        deadline = now + timedelta(seconds=msg.timeout_seconds or self._settings.device_call_timeout)
        shard = self._runner.shards.shard_for(device, msg.device_model_json)  # as when accepted
        row = NewRequest(
            request_id, device, kind.value, msg.SerializeToString(), msg.trace_id, now, deadline,
            self._settings.instance_id, shard,
        )  # fmt: skip
        accepted = await self._store.accept_one(row)
        job = Job(accepted.seq, request_id, device, kind, row.payload, row.trace_id, deadline, shard)
        if not self._dispatcher.submit(job):
            await self._runner.reject(job, "device queue full; re-application not run")
        return request_id


def _access_error(outcome: Any) -> tuple[str, bool]:
    """The access's error ('' when it succeeded) and whether the device answered: not reached
    (the plugin's own word, else the result's error where the device was never reached), or
    reached with a failed result (a 503 from its BMC: reached, and that is its last error)."""
    if outcome.reach_error:
        return str(outcome.reach_error), False
    if not outcome.result.ok:
        error = str(getattr(outcome.result, "error", "") or "")
        if outcome.reached_at is None:
            return error or "not reached", False
        return error or "the device answered with a failure", True
    return "", False


def _by_component(findings: list[Finding]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Each drifted component's finding lines, and their kinds (inband, outofband, disagree)."""
    lines: dict[str, list[str]] = {}
    kinds: dict[str, list[str]] = {}
    for f in findings:
        lines.setdefault(f.component, []).append(f.line)
        kinds.setdefault(f.component, []).append(f.kind)
    return lines, kinds
