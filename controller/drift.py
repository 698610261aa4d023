"""The periodic drift check: desired limits against what each device enforces, and re-application.

`DriftChecker` walks the devices that have desired limits, spread over `drift_interval`, reads
what each enforces (a `std_metrics` read through the device's plugin: NVML in-band, Redfish
out-of-band) and records what it finds (desired_limits row, an audit row of kind `drift`, the
`devicectl_drift` counter). Under `reapply` (devices matching `drift_reapply`) it re-sends the
requests that set the device's desired state, journaled as internal requests (ids starting
`INTERNAL_PREFIX`) that run in the device's lane like any other and are answered to no one; at
most `drift_max_reapply_per_hour` per device, after which drift is only reported (a tool fighting
devicectl is reported, not fought forever).
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from controller import metrics
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.config import Settings
from controller.desired import INTERNAL_PREFIX, compare, enforced_from
from controller.dispatch import Dispatcher, Job
from controller.logs import clip
from controller.runner import RequestRunner
from controller.store import DesiredLimit, DriftCheck, NewRequest, Store
from controller.supervise import describe
from plugins.base import DeviceContext, Empty, RequestKind, run_operation

log = logging.getLogger(__name__)


class DriftChecker:
    """The periodic drift check of every device with desired limits (supervised by the app)."""

    def __init__(
        self,
        store: Store,
        runner: RequestRunner,
        dispatcher: Dispatcher,
        settings: Settings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._runner = runner
        self._dispatcher = dispatcher
        self._settings = settings
        self._clock = clock
        self._reapplied: dict[str, deque[float]] = defaultdict(deque)

    def mode(self, device: str) -> str:
        """`reapply` for devices matching `drift_reapply` (globs, comma-separated), else `report`."""
        patterns = [p.strip() for p in self._settings.drift_reapply.split(",") if p.strip()]
        return "reapply" if any(fnmatch.fnmatchcase(device, p) for p in patterns) else "report"

    async def run(self) -> None:
        interval = max(self._settings.drift_interval, 0.05)
        while True:
            devices = await self._store.devices_with_desired()
            if not devices:
                await asyncio.sleep(interval)
                continue
            step = interval / len(devices)  # spread over the interval, never a burst
            for device in devices:
                started = self._clock()
                try:
                    await self.check(device)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # one device's failure never stops the others
                    log.warning("drift check of %s failed: %s", device, describe(exc))
                await asyncio.sleep(max(step - (self._clock() - started), 0.0))

    async def check(self, device: str) -> DriftCheck | None:
        """Check one device now; None when it was skipped (busy, or nothing to check)."""
        if self._dispatcher.busy(device):
            return None  # a request is queued or running: its result is the news, not drift
        desired = await self._store.desired_for(device)
        if not any(d.watts is not None for d in desired):
            return None
        resolved = await self._runner.resolve(device, b"", b"")
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
        if not outcome.result.ok:
            log.info("drift check of %s: cannot read the device: %s", device, clip(outcome.result.error))
            return None
        if self._dispatcher.busy(device) or await self._store.desired_for(device) != desired:
            return None  # a request came in while reading: what was read may be half its change
        enforced = enforced_from(outcome.result)
        drifted = compare(desired, enforced)
        action = "report"
        if drifted:
            if self.mode(device) == "reapply":
                action = await self._reapply(device, desired)
            for component in drifted:
                metrics.DRIFT.labels(component.split("/")[0], action.split(":")[0]).inc()
            log.warning(
                "drift on %s: %s (%s)", device, "; ".join(f"{c}: {d}" for c, d in drifted.items()), action
            )
        check = DriftCheck(
            device,
            datetime.now(UTC),
            {d.component: enforced.get(d.component) for d in desired if d.component in enforced},
            drifted,
            action,
        )
        await self._store.record_drift_check(check)
        return check

    async def _reapply(self, device: str, desired: list[DesiredLimit]) -> str:
        window = self._reapplied[device]
        now = self._clock()
        while window and now - window[0] > 3600.0:
            window.popleft()
        limit = self._settings.drift_max_reapply_per_hour
        if len(window) >= limit:
            return f"report: {limit} re-applications in the last hour (another tool may be changing it)"
        window.append(now)
        # every request behind the desired state, oldest first, so the end state is theirs again
        sources = sorted({(d.set_at, d.request_id) for d in desired})
        ids = []
        for _, source in sources:
            view = await self._store.get_request(source)
            if view is None:
                continue  # pruned by retention: nothing left to re-send
            ids.append(await self._resend(device, view.payload, source))
        return "reapply: " + ", ".join(ids) if ids else "report: the requests that set it were pruned"

    async def _resend(self, device: str, payload: bytes, source: str) -> str:
        msg = pb.DeviceControllerRequest.FromString(payload)
        request_id = f"{INTERNAL_PREFIX}reapply-{uuid.uuid4().hex[:12]}"
        msg.request_id = request_id
        msg.ClearField("device_state_json")  # the stored state is newer than the one it carried
        msg.trace_id = f"reapply of {source}"[:256]
        kind = RequestKind(msg.WhichOneof("request"))
        now = datetime.now(UTC)
        deadline = now + timedelta(seconds=msg.timeout_seconds or self._settings.device_call_timeout)
        row = NewRequest(
            request_id, device, kind.value, msg.SerializeToString(), msg.trace_id, now, deadline,
            self._settings.instance_id,
        )  # fmt: skip
        accepted = await self._store.accept_one(row)
        job = Job(accepted.seq, request_id, device, kind, row.payload, row.trace_id, deadline)
        if not self._dispatcher.submit(job):
            await self._runner.reject(job, "device queue full; re-application not run")
        return request_id
