"""A device's readiness for power management: the query (DPS `BMCHealthDeviceRequest`) and its checks.

Each check says pass, warn or fail (or skip: not applicable, or not reached because an earlier
check failed) with one line of detail and its evidence (JSON), so an operator sees why. The
verdict of a verification is its worst check.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"
#: worst first: the verdict of several checks is the first of these any of them has
SEVERITY = (FAIL, WARN, PASS, SKIP)

#: DPS `dpsctl verify bmc-health` defaults (dps.md §2.4)
DEFAULT_TELEMETRY_INTERVAL_MS = 500
DEFAULT_WRITE_RESOLUTION_MS = 1000
MAX_WRITE_RESOLUTION_MS = 60_000
#: telemetry reads when the request says 0 (the first, and one to see it move)
DEFAULT_TELEMETRY_SAMPLES = 2
MAX_TELEMETRY_SAMPLES = 20
#: latency GETs of a limit resource and the p95 a BMC must stay under (docs/operations.md)
DEFAULT_LATENCY_SAMPLES = 20
DEFAULT_LATENCY_P95_MS = 1000.0


@dataclass(frozen=True)
class HealthQuery:
    """What to verify. Fields as DPS 0.8+ sends them, plus the controller's own.

    Attributes:
        samples_per_telemetry: telemetry reads (0: the default, 2).
        skip_writes: read-only (the default here; DPS's write probes need `write_cycle`).
        telemetry_interval_ms: pause between telemetry reads (0 on the wire means the default).
        write_resolution_timeout_ms: how long a written cap may take to read back (capped at 60 s).
        latency_samples: GETs of a limit resource for the latency check.
        latency_p95_ms: the p95 above which latency is a warning (twice it: a failure).
        inband_gpu_limits: GPU index -> the limit the host enforces in band (NVML), watts; the
            controller fills it where an inventory option links the node's NVML device.
        force_writes: write-cycle even while a resource group is active on the node.
        apply: the write cycle's second step (the controller journaled the priors first): skip the
            read-only checks (the first step ran them) and cycle only the components in `priors`.
        priors: component key -> {"watts", "capped", "mode"}: the value each cap had when the
            cycle was planned, as journaled. A cap no longer showing it is not written; the
            restore puts this value back.
        restore: component key -> a prior as above: only put these values back (an unfinished
            cycle's journal) and report each one as a `restore KEY` check; nothing else runs.

    A write cycle is a journaled transaction run by the controller in two calls: a read-only one
    (its `cap KEY` checks' evidence is the plan: value, mode and resource of every cap), then,
    once the controller has made those priors durable, one with `apply` and `priors`. A plugin
    keeps no state: whatever a crash interrupts, the controller restores from its journal with
    `restore`.
    """

    samples_per_telemetry: int = 0
    skip_writes: bool = True
    telemetry_interval_ms: int = 0
    write_resolution_timeout_ms: int = 0
    latency_samples: int = DEFAULT_LATENCY_SAMPLES
    latency_p95_ms: float = DEFAULT_LATENCY_P95_MS
    inband_gpu_limits: Mapping[int, float] = field(default_factory=dict)
    force_writes: bool = False
    apply: bool = False
    priors: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    restore: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def may_write(self) -> bool:
        """Whether this run may write the device: a write cycle, its apply, or a restore."""
        return not self.skip_writes or self.apply or bool(self.restore)

    @property
    def samples(self) -> int:
        n = self.samples_per_telemetry or DEFAULT_TELEMETRY_SAMPLES
        return max(1, min(n, MAX_TELEMETRY_SAMPLES))

    @property
    def interval(self) -> float:
        """Seconds between telemetry reads."""
        return max(0, self.telemetry_interval_ms or DEFAULT_TELEMETRY_INTERVAL_MS) / 1000.0

    @property
    def resolution(self) -> float:
        """Seconds a write may take to read back (the read-back window, capped at 60 s)."""
        ms = self.write_resolution_timeout_ms or DEFAULT_WRITE_RESOLUTION_MS
        return max(0, min(ms, MAX_WRITE_RESOLUTION_MS)) / 1000.0

    def check(self) -> str:
        """One line naming the first bad field, or ''."""
        for name in ("samples_per_telemetry", "telemetry_interval_ms", "write_resolution_timeout_ms"):
            if getattr(self, name) < 0:
                return f"{name} must not be negative (got {getattr(self, name)})"
        if not 1 <= self.latency_samples <= 1000:
            return f"latency_samples must be 1..1000 (got {self.latency_samples})"
        if not self.latency_p95_ms > 0:
            return f"latency_p95_ms must be positive (got {self.latency_p95_ms:g})"
        return ""


@dataclass(frozen=True)
class HealthCheck:
    """One check: `name` (e.g. `tls`, `cap gpu/0`), its status, one line of detail, the evidence."""

    name: str
    status: str
    detail: str = ""
    evidence: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "detail": self.detail,
            "evidence": dict(self.evidence),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HealthCheck:
        status = str(data.get("status", ""))
        if status not in SEVERITY:
            raise ValueError(f"unknown check status {status!r}")
        evidence = data.get("evidence") or {}
        return cls(str(data.get("name", "")), status, str(data.get("detail", "")), dict(evidence))


@dataclass(frozen=True)
class HealthResult:
    """Every check of one device; `failure` says why none could run (then there are none, or few)."""

    checks: tuple[HealthCheck, ...]
    failure: str = ""

    @property
    def ok(self) -> bool:
        return not self.failure and all(c.status != FAIL for c in self.checks)

    @property
    def error(self) -> str:
        """Why it is not ok: the failure, else each failed check with its detail ('' when ok)."""
        return self.failure or "; ".join(f"{c.name}: {c.detail}" for c in self.checks if c.status == FAIL)

    @property
    def verdict(self) -> str:
        return worst(c.status for c in self.checks) if not self.failure else FAIL

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "error": self.error, "checks": [c.to_json() for c in self.checks]}


def worst(statuses: Any) -> str:
    """The verdict of several statuses (`skip` only when nothing else is there)."""
    seen = set(statuses)
    return next((s for s in SEVERITY if s in seen), SKIP)


#: the message of a cancel that cuts even the work `uncancelled` shields: the caller no longer holds
#: the device (its shard lease lapsed, or it hands the device on at a stop), so a write started from
#: now on could land beside the device's next holder's (`relinquish(task)` sends it)
RELINQUISHED = "devicectl: the device is no longer this caller's to write"


#: the tasks `relinquish` cancelled: the mark outlives the cancel's message, which a plain cancel that
#: reaches the task in the same loop turn replaces (`asyncio.Task.cancel` keeps the first cancel's error)
_HANDED_ON: weakref.WeakSet[asyncio.Future[Any]] = weakref.WeakSet()


def relinquish(task: asyncio.Future[Any]) -> bool:
    """Cancel `task` with `RELINQUISHED` and mark it so (`relinquished` sees the mark even where a
    plain cancel, a deadline's, reached the task in the same loop turn and its message came in
    place of ours). Returns what `cancel` returns."""
    _HANDED_ON.add(task)
    return task.cancel(RELINQUISHED)


def relinquished(exc: BaseException) -> bool:
    """Whether a `CancelledError` is the cancel that hands the device on: it says `RELINQUISHED`, or
    it reached a task that `relinquish` cancelled (the task this runs in)."""
    if not isinstance(exc, asyncio.CancelledError):
        return False
    if exc.args[:1] == (RELINQUISHED,):
        return True
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop: only the message tells
        return False
    return task is not None and task in _HANDED_ON


async def uncancelled(work: Coroutine[Any, Any, T]) -> T:
    """Run `work` to its end even when the caller is cancelled meanwhile; the cancel is re-raised
    after it. A write cycle's restore is never abandoned half way (a shutdown, a deadline), except
    by the cancel that hands the device on (`RELINQUISHED`): `work` is cancelled with it then, and
    waited for, so that it starts no write from then on."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError as exc:
            if task.done():
                result = task.result()
                break
            if relinquished(exc):
                relinquish(task)
                await asyncio.wait((task,))
                if not task.cancelled():
                    task.exception()  # retrieved: what it ended with came after the device was handed on
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return result
