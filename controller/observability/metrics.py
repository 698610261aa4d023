"""Prometheus metrics (the HTTP endpoint that serves them is `controller.observability.endpoint`).

One home for every metric the controller exports. Counters and histograms are module-level
objects on prometheus_client's default registry (instrumented code calls them directly); gauges
that describe live state (queue depth, outbox backlog, table sizes) are read when scraped, from
the `Controller` the endpoint serves. In-process plugins add their own metrics to the same
default registry under their own names (the Redfish plugin: `devicectl_bmc_*`), so a plugin
never imports the controller; an out-of-process plugin's metrics stay in its own process.

Cardinality: every label set is bounded by code (kinds, outcomes, statuses, platforms, plugin
names) except the per-device power gauges, which are off by default (`metrics_per_device`) and,
when on, keep at most `metrics_max_devices` devices (the least recently changed are dropped).
At 10,000 devices with 4 components that would be 80,000 series: use per-device gauges for a
subset (a lab, a pilot rack), and fleet dashboards on the aggregated metrics.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import platform
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from prometheus_client import (
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)

from controller.observability.version import installed_version

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)
change_log = logging.getLogger("controller.changes")

# NOTE: prometheus_client exports a `*_created` gauge beside every counter and histogram child
# (OpenMetrics' creation timestamp); Prometheus' text format has no use for it and it doubles the
# series. Off for the whole process, plugins' metrics included (they share the default registry).
disable_created_metrics()

_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

REQUESTS = Counter(
    "devicectl_requests",
    "Requests answered, by kind and outcome (ok, failed, rejected, timeout, expired)",
    ["kind", "outcome"],
)
ACCEPTED = Counter("devicectl_requests_accepted", "Requests journaled and acknowledged, by kind", ["kind"])
ACK_SECONDS = Histogram(
    "devicectl_ack_duration_seconds", "From receipt to the durable ack (journal commit)", buckets=_LATENCY
)
QUEUE_SECONDS = Histogram(
    "devicectl_queue_wait_seconds",
    "From queueing on the device's lane to the start of the run",
    buckets=_LATENCY,
)
RUN_SECONDS = Histogram(
    "devicectl_run_duration_seconds", "Plugin call of one request, by kind", ["kind"], buckets=_LATENCY
)
DELIVERY_SECONDS = Histogram(
    "devicectl_delivery_duration_seconds",
    "One successful TopologyCallback.DeviceResponse call",
    buckets=_LATENCY,
)
DELIVERY_LAG_SECONDS = Histogram(
    "devicectl_delivery_lag_seconds", "From the response's completion to its delivery", buckets=_LATENCY
)
DELIVERY_ATTEMPTS = Counter(
    "devicectl_delivery_attempts",
    "Delivery attempts by result (ok, retry, receiver_down, dead_letter)",
    ["result"],
)
SHADOW_MODE = Gauge(
    "devicectl_shadow_mode",
    "1 while the controller runs in shadow mode (requests planned and recorded, no device write sent)",
)
DRIFT = Counter(
    "devicectl_drift",
    "Components found off their desired limit by a drift check, by component type, the path that read "
    "it (inband: NVML, outofband: the BMC) and action",
    ["component", "path", "action"],
)
DRIFT_DISAGREE = Counter(
    "devicectl_drift_paths_disagree",
    "Components of a node served both ways whose in-band and out-of-band limits disagree",
    ["component"],
)
WARMUP_DEVICES = Gauge(
    "devicectl_warmup_devices",
    "Devices of the warm-up at start (login and discovery before the first request), by state: "
    "pending, done, failed, skipped (busy with a request of its own)",
    ["state"],
)
GC_SECONDS = Counter(
    "devicectl_gc_cpu_seconds",
    "CPU seconds of the thread that ran CPython's cyclic garbage collector, by generation (a "
    'wave\'s share of it: docs/operations.md, "Sizing a data hall")',
    ["generation"],
)
POWER_REQUESTED = Gauge(
    "devicectl_power_limit_requested_watts",
    "Last requested power limit per device and component (metrics_per_device)",
    ["device", "component"],
)
POWER_ENFORCED = Gauge(
    "devicectl_power_limit_enforced_watts",
    "Power limit the device reported after the last change (metrics_per_device)",
    ["device", "component"],
)
#: the four values of `devicectl devices limits` in one family, so a panel or an alert compares them
#: (`kind`: requested, enforced, min, max; same devices and components as the two above)
POWER_LIMIT = Gauge(
    "devicectl_power_limit_watts",
    "Power limit per device and component: requested, enforced (read back) and the allowed min and "
    "max the device reports, by kind (metrics_per_device)",
    ["device", "component", "kind"],
)
LIMIT_KINDS = ("requested", "enforced", "min", "max")


BUILD_INFO = Gauge(
    "devicectl_build_info",
    "Always 1; the labels say which devicectl and Python this process runs",
    ["version", "python_version", "python_implementation"],
)


BUILD_INFO.labels(installed_version(), platform.python_version(), platform.python_implementation()).set(1)


#: (metric, label values) -> its child, for metrics whose label values code bounds and that count
#: every request (`labels` takes the metric's lock and builds its key on each call)
_CHILDREN: dict[tuple[object, tuple[str, ...]], Any] = {}

_Metric = TypeVar("_Metric", Counter, Gauge, Histogram)


def child(metric: _Metric, *values: str) -> _Metric:
    """`metric.labels(*values)`, looked up once per label set (never for unbounded values)."""
    key = (metric, values)
    found = _CHILDREN.get(key)
    if found is None:
        found = _CHILDREN[key] = metric.labels(*values)
    return found  # type: ignore[no-any-return]


def request_done(kind: str, outcome: str) -> None:
    child(REQUESTS, kind, outcome).inc()


# ---- applied changes (log line and per-device gauges) --------------------------------------------


class Change(NamedTuple):
    """One component's limit change as a plugin reported it (a tuple: several per request)."""

    component: str  # node, cpu, memory, gpu/<N> (as the CLI names them)
    requested: float | None
    enforced: float
    ok: bool


def changes_of(result: Any, request: Any = None) -> list[Change]:
    """The limit changes a plugin result reports (allocation and GPU-policy results), else none.

    Plugins report `requested_watts` only where it differs from what the device enforces or the
    write failed (plugins/redfish/_capping/results.py, `gpu_results`); otherwise the request's own watts
    are the requested value, and without them (a percentage) the enforced value is, since the
    plugin found both equal."""
    asked = requested_in(request)
    out: list[Change] = []
    for name in ("node", "cpu", "memory"):
        part = getattr(result, name, None)
        if part is not None and hasattr(part, "applied_watts"):
            out.append(Change(name, _requested(part, asked.get(name)), part.applied_watts, part.ok))
    gpus = getattr(result, "gpu_policies", None) or result
    for gpu in getattr(gpus, "results", ()) or ():
        if hasattr(gpu, "gpu_id"):
            component = f"gpu/{gpu.gpu_id}"
            out.append(Change(component, _requested(gpu, asked.get(component)), gpu.applied_watts, gpu.ok))
    return out


def _requested(part: Any, asked: float | None) -> float | None:
    if part.requested_watts is not None:
        return float(part.requested_watts)
    if asked is not None:
        return asked
    return float(part.applied_watts) if part.ok else None


def requested_in(request: Any) -> dict[str, float]:
    """The watts a plugin request names, by component (percentages need the device: left out)."""
    out: dict[str, float] = {}
    if request is None:
        return out
    policy = getattr(getattr(request, "policy", None), "policy", None)
    for item in getattr(policy, "limits", ()) or ():
        if item.limit.watts is not None:
            out[item.element.value] = float(item.limit.watts)
    gpus = getattr(request, "gpu_policies", None) or request
    for gpu in getattr(gpus, "policies", ()) or ():
        if hasattr(gpu, "gpu_id") and gpu.limit is not None and gpu.limit.watts is not None:
            out[f"gpu/{gpu.gpu_id}"] = float(gpu.limit.watts)
    return out


def applied(device: str, result: Any, request: Any = None, state: Any = None) -> None:
    """One log line for the components a request changed (each before → requested → enforced),
    one for those it did not, and the per-device gauges. "before" is the last value this process
    saw enforced ("unknown" if none)."""
    changes = changes_of(result, request)
    if not changes:
        return
    if change_log.isEnabledFor(logging.INFO):
        before = POWER.last(device)
        done = [c for c in changes if c.ok]
        if done:
            change_log.info("applied %s", "; ".join(_applied_text(before.get(c.component), c) for c in done))
    failed = [c for c in changes if not c.ok]
    if failed:
        change_log.warning(
            "not applied %s", "; ".join(f"{c.component}: requested {_watts(c.requested)}" for c in failed)
        )
    POWER.record(device, changes, limit_ranges(state) if POWER.enabled else None)


def limit_ranges(state: Any) -> dict[str, tuple[float | None, float | None]]:
    """The allowed range per metrics component (node, cpu, gpuN) the device state records: a
    GB200 tray's node is the sum of its modules, the CPU element the sum of its CPUs."""
    from controller.desired.in_force import in_force

    found: dict[str, tuple[float | None, float | None]] = {}
    summed: dict[str, list[tuple[float | None, float | None]]] = {}
    for c in in_force(state if isinstance(state, dict) else None).components:
        kind, _, index = c.component.partition("/")
        if kind == "gpu" and index.isdigit():
            found[f"gpu/{index}"] = (c.min, c.max)
        elif kind in ("node", "cpu", "memory") and not index:
            found[kind] = (c.min, c.max)
        elif kind in ("module", "cpu"):
            summed.setdefault("node" if kind == "module" else "cpu", []).append((c.min, c.max))
    for name, parts in summed.items():
        if name not in found and all(lo is not None and hi is not None for lo, hi in parts):
            found[name] = (sum(lo or 0.0 for lo, _ in parts), sum(hi or 0.0 for _, hi in parts))
    return found


def _applied_text(before: float | None, c: Change) -> str:
    return f"{c.component}: {_watts(before)} -> requested {_watts(c.requested)} -> enforced {c.enforced:g} W"


def _watts(value: float | None) -> str:
    return f"{value:g} W" if value is not None else "unknown"


_NONE_SEEN: Mapping[str, float] = MappingProxyType({})


class PowerGauges:
    """Per-device requested/enforced gauges for at most `max_devices` devices, and the last
    enforced value per component this process saw (the "before" of the next change's log line)."""

    def __init__(self, enabled: bool, max_devices: int) -> None:
        self.enabled = enabled
        self._max = max(1, max_devices)
        self._last: OrderedDict[str, dict[str, float]] = OrderedDict()

    def before(self, device: str, component: str) -> float | None:
        return self._last.get(device, {}).get(component)

    def last(self, device: str) -> Mapping[str, float]:
        """The last enforced value per component this process saw for `device`."""
        return self._last.get(device, _NONE_SEEN)

    def record(
        self,
        device: str,
        changes: Iterable[Change],
        ranges: dict[str, tuple[float | None, float | None]] | None = None,
    ) -> None:
        seen = self._last.setdefault(device, {})
        self._last.move_to_end(device)
        for c in changes:
            if not c.ok:
                continue  # a failed write enforced nothing new
            seen[c.component] = c.enforced
            if self.enabled:
                if c.requested is not None:
                    POWER_REQUESTED.labels(device, c.component).set(c.requested)
                    POWER_LIMIT.labels(device, c.component, "requested").set(c.requested)
                POWER_ENFORCED.labels(device, c.component).set(c.enforced)
                POWER_LIMIT.labels(device, c.component, "enforced").set(c.enforced)
                lo, hi = (ranges or {}).get(c.component, (None, None))
                for kind, value in (("min", lo), ("max", hi)):
                    if value is not None:
                        POWER_LIMIT.labels(device, c.component, kind).set(value)
        while len(self._last) > self._max:
            old, components = self._last.popitem(last=False)
            if self.enabled:
                for component in components:
                    for gauge in (POWER_REQUESTED, POWER_ENFORCED):
                        with contextlib.suppress(KeyError):
                            gauge.remove(old, component)
                    for kind in LIMIT_KINDS:
                        with contextlib.suppress(KeyError):
                            POWER_LIMIT.remove(old, component, kind)


# ---- live state, read at scrape time -----------------------------------------------------------


#: the process's per-device power accounting; `configure` applies the settings
POWER = PowerGauges(enabled=False, max_devices=1000)


def configure(per_device: bool, max_devices: int) -> None:
    global POWER
    POWER = PowerGauges(per_device, max_devices)


# ---- readiness verifications (`devicectl verify`) ------------------------------------------------

VERIFY_RESULT = Gauge(
    "devicectl_verify_result",
    "Devices whose last readiness verification gave this result for this check (`cap` and `write` "
    "checks by family: the worst of the device's caps)",
    ["check", "result"],
)
VERIFY_LATENCY_P95 = Gauge(
    "devicectl_verify_latency_p95_seconds",
    "p95 of the latency GETs of each BMC's last readiness verification (at most metrics_max_devices)",
    ["device"],
)
#: each device's last verification, by check family -> result (the gauges are counts over these)
_VERIFIED: OrderedDict[str, dict[str, str]] = OrderedDict()
_SEVERITY = ("fail", "warn", "pass", "skip")


def record_verification(device: str, result: Any) -> None:
    """A device's readiness verification finished (`plugins.base.HealthResult`)."""
    families: dict[str, str] = {}
    for check in result.checks:
        family = check.name.split(" ", 1)[0]
        seen = families.get(family)
        if seen is None or _SEVERITY.index(check.status) < _SEVERITY.index(seen):
            families[family] = check.status
        if check.name == "latency" and check.evidence.get("p95_ms") is not None:
            VERIFY_LATENCY_P95.labels(device).set(float(check.evidence["p95_ms"]) / 1000)
    for family, status in _VERIFIED.pop(device, {}).items():
        VERIFY_RESULT.labels(family, status).dec()
    for family, status in families.items():
        VERIFY_RESULT.labels(family, status).inc()
    _VERIFIED[device] = families
    while len(_VERIFIED) > POWER._max:
        old, gone = _VERIFIED.popitem(last=False)
        for family, status in gone.items():
            VERIFY_RESULT.labels(family, status).dec()
        try:
            VERIFY_LATENCY_P95.remove(old)
        except KeyError:
            pass


# ---- rebuilt from the database at start ----------------------------------------------------------


async def load_from_database(store: Any, inventory: Iterable[str]) -> None:
    """Every gauge that describes devices, from the database rather than from what this process
    changed: each device's health, its last readiness verification (`devicectl_verify_result`
    counts every verified device after a restart), and with `metrics_per_device` the four limit
    values of `devicectl devices limits` (at most `metrics_max_devices` devices)."""
    from controller.observability import reachability
    from plugins.base import HealthCheck, HealthResult

    reachability.BMC_HEALTH.load(await store.bmc_health())
    for device, row in (await store.last_bmc_checks()).items():
        checks = (row.result or {}).get("checks") if isinstance(row.result, dict) else None
        try:
            parsed = tuple(HealthCheck.from_json(c) for c in checks or () if isinstance(c, dict))
        except ValueError:
            continue  # a row this version cannot read: left out, never guessed
        if parsed:
            record_verification(device, HealthResult(parsed))
    if POWER.enabled:
        await _load_power(store, sorted(inventory))


async def _load_power(store: Any, inventory: list[str]) -> None:
    from controller.desired.in_force import in_force

    views = await store.list_devices(limit=POWER._max)
    desired = await store.desired_for_devices([v.id for v in views])
    for v in views:
        changes = []
        ranges: dict[str, tuple[float | None, float | None]] = {}
        for c in in_force(
            v.state_json if isinstance(v.state_json, dict) else None, desired.get(v.id, [])
        ).components:
            if c.enforced is not None:
                changes.append(Change(c.component, c.requested, c.enforced, True))
                ranges[c.component] = (c.min, c.max)
        if changes:
            POWER.record(v.id, changes, ranges)


class GcTimer:
    """Adds each cyclic garbage collection's CPU time to `GC_SECONDS` (`gc.callbacks`)."""

    def __init__(self) -> None:
        self._started = 0.0
        self._children = [GC_SECONDS.labels(str(generation)) for generation in range(3)]

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.thread_time()
        elif self._started:
            self._children[info["generation"]].inc(max(0.0, time.thread_time() - self._started))
            self._started = 0.0


def time_garbage_collection() -> None:
    """Count the collector's CPU time in `GC_SECONDS` from now on (once per process)."""
    if not any(isinstance(callback, GcTimer) for callback in gc.callbacks):
        gc.callbacks.append(GcTimer())
