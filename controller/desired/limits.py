"""Desired state: the limits a successful change leaves in force, and how drift from them is judged.

After a change the runner records each component's limit as read back (`desired_from`)
with the request that set it, in the completion's transaction (`controller/store/_desired.py`).
The drift check (`controller/desired/drift.py`) compares them with what the device enforces, through one
path or, for a node the inventory serves in-band and out-of-band (`bmc`), through both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from plugins.base import (
    AllocationResult,
    ComponentResult,
    GpuPoliciesResult,
    GpuResult,
    HealthCheck,
    StdMetricsResult,
    WriteOutcome,
)

if TYPE_CHECKING:  # the validator imports this module: keep it free of the store
    from controller.store import DesiredLimit

#: request ids of internal requests (re-applications); refused from callers (controller/api/validate.py)
INTERNAL_PREFIX = "devicectl-internal-"
#: a re-application's requests: REAPPLY_PREFIX + "<event>-<n>" (one event may re-send several)
REAPPLY_PREFIX = INTERNAL_PREFIX + "reapply-"
#: the two ways a node's limits are read: from the node itself (NVML) or from its BMC (Redfish)
INBAND, OUTOFBAND = "inband", "outofband"
PATH_NAMES = {INBAND: "in-band", OUTOFBAND: "out-of-band"}
#: a drift finding that is not one path off the desired value: the two paths differ from each other
DISAGREE = "disagree"
#: plugins that read a node's GPUs from the node itself; every other plugin reads them out-of-band
IN_BAND_PLUGINS = frozenset({"nvml"})
#: watts of difference that count as drift (rounding to a BMC's Increment stays below it)
TOLERANCE_WATTS = 1.0


def is_internal(request_id: str) -> bool:
    return request_id.startswith(INTERNAL_PREFIX)


def reapply_event(request_id: str) -> str:
    """The re-application a re-sent request belongs to (the `<event>` of its id)."""
    return request_id.removeprefix(REAPPLY_PREFIX).split("-", 1)[0]


def path_of(plugin: str) -> str:
    """The path a device's own plugin reads its limits through."""
    return INBAND if plugin in IN_BAND_PLUGINS else OUTOFBAND


def desired_from(result: Any) -> dict[str, float | None] | None:
    """The limits a result leaves in force, by component ("node", "cpu", "gpu/0").

    Each component on its own, whether the request as a whole succeeded or not: one that succeeded
    or whose write the device accepted (its read-back), and one whose write's answer never came
    (the value asked for: the drift check's next read tells whether it landed, and a re-application
    completes it rather than undoing it). A component not written leaves the earlier desired value.
    """
    out: dict[str, float | None] = {}
    gpus: tuple[GpuResult, ...] = ()
    if isinstance(result, AllocationResult):
        for name, comp in (("node", result.node), ("cpu", result.cpu), ("memory", result.memory)):
            if comp is not None and _changed(comp):
                out[name] = _left_in_force(comp)
        gpus = result.gpu_policies.results if result.gpu_policies is not None else ()
    elif isinstance(result, GpuPoliciesResult):
        gpus = result.results
    for gpu in gpus:
        if _changed(gpu):
            out[f"gpu/{gpu.gpu_id}"] = _left_in_force(gpu)
    return out or None


def _changed(comp: ComponentResult | GpuResult) -> bool:
    """Whether the component's desired value follows this result."""
    unknown = comp.write is WriteOutcome.UNKNOWN and comp.requested_watts is not None
    return comp.ok or comp.write is WriteOutcome.WRITTEN or unknown


def _left_in_force(comp: ComponentResult | GpuResult) -> float | None:
    if comp.ok or comp.write is WriteOutcome.WRITTEN:
        return comp.applied_watts or None
    return comp.requested_watts


def enforced_from(result: StdMetricsResult) -> dict[str, float | None]:
    """What a metrics read says is enforced: each GPU's limit, and the CPUs' total."""
    node = result.metrics
    if node is None:
        return {}
    out: dict[str, float | None] = {f"gpu/{g.id}": g.limit_watts or None for g in node.gpus}
    if node.cpus and all(c.limit_watts for c in node.cpus):
        out["cpu"] = sum(c.limit_watts for c in node.cpus)
    return out


#: a component that is the sum of others: its members' kind (a GB200 node cap is split over its
#: processor modules; the `cpu` element is the total of the CPUs)
MEMBERS_OF = {"node": "module", "cpu": "cpu"}


def caps_from_state(state: Mapping[str, Any] | None) -> dict[str, float | None]:
    """The caps a plugin's state records as just read (the Redfish plugin's `readings`, refreshed by
    every metrics read) that the metrics type cannot carry: the node cap (its own reading, else the
    sum of its modules'), each module's, and each CPU's. Values that are not numbers are left out."""
    section = state.get("readings") if isinstance(state, Mapping) else None
    if not isinstance(section, Mapping):
        return {}
    out: dict[str, float | None] = {}
    for key, reading in section.items():
        kind, _, index = str(key).partition("/")
        if not isinstance(reading, Mapping) or not (key == "node" or (index and kind in ("module", "cpu"))):
            continue
        watts = reading.get("watts")
        if watts is None or (isinstance(watts, int | float) and not isinstance(watts, bool)):
            out[str(key)] = float(watts) if watts is not None else None
    modules = [v for k, v in out.items() if k.startswith("module/")]
    if "node" not in out and modules:
        known = [v for v in modules if v is not None]
        out["node"] = sum(known) if len(known) == len(modules) else None
    return out


def members_line(component: str, enforced: Mapping[str, float | None]) -> str:
    """` (module/0 1410 W, module/1 1410 W)`: what each member of a total read, or ''."""
    kind = MEMBERS_OF.get(component)
    parts = sorted((k, v) for k, v in enforced.items() if kind and k.startswith(f"{kind}/"))
    return " (" + ", ".join(f"{k} {_shown(v)}" for k, v in parts) + ")" if parts else ""


def gpu_pairs(inband: Mapping[str, Any], bmc_gpus: Sequence[int]) -> dict[str, str]:
    """Each in-band GPU component ("gpu/<NVML index>") -> the BMC's component of the same GPU.

    Both plugins name GPUs by index in their metrics; `bmc_gpus` (inventory) gives the BMC's index
    of each NVML index where the two orders differ. An NVML index beyond it has no pair."""
    out = {}
    for component in inband:
        kind, _, index = component.partition("/")
        if kind != "gpu" or not index.isdigit():
            continue
        if not bmc_gpus:
            out[component] = component
        elif int(index) < len(bmc_gpus):
            out[component] = f"gpu/{bmc_gpus[int(index)]}"
    return out


@dataclass(frozen=True)
class Finding:
    """One way a component is off: `kind` is the path that is off its desired value, or DISAGREE."""

    component: str
    kind: str
    line: str


def compare_paths(
    desired: list[DesiredLimit], readings: Mapping[str, Mapping[str, float | None]]
) -> list[Finding]:
    """Findings per component for readings by path ({"inband": {...}, "outofband": {...}}, each in
    the device's own component names): each path off its desired value, and the two paths off each
    other. With one path the line is the single-path one of `compare`."""
    both = len(readings) > 1
    findings = []
    for d in desired:
        if d.watts is None:
            continue  # no cap asked for
        seen = {p: r[d.component] for p, r in sorted(readings.items()) if d.component in r}
        for path, now in seen.items():
            if now is None or abs(now - d.watts) > TOLERANCE_WATTS:
                line = f"desired {d.watts:g} W (set by {d.request_id}), enforced {_shown(now)}"
                line += members_line(d.component, readings[path])
                findings.append(Finding(d.component, path, f"{PATH_NAMES[path]}: {line}" if both else line))
        if len(seen) == 2 and _differ(seen[INBAND], seen[OUTOFBAND]):
            line = (
                f"in-band {_shown(seen[INBAND])}, out-of-band {_shown(seen[OUTOFBAND])} (the paths disagree)"
            )
            findings.append(Finding(d.component, DISAGREE, line))
    return findings


def _shown(watts: float | None) -> str:
    return "no cap" if watts is None else f"{watts:g} W"


def _differ(a: float | None, b: float | None) -> bool:
    return (a is None) != (b is None) or (a is not None and b is not None and abs(a - b) > TOLERANCE_WATTS)


def _explicit(check: HealthCheck) -> bool:
    """A passing `cap KEY` check showing an explicit cap with its value (what `explain_caps` explains)."""
    ev = check.evidence
    return (
        check.name.startswith("cap ")
        and check.status == "pass"
        and bool(ev.get("capped"))
        and ev.get("watts") is not None
    )


def caps_to_explain(checks: Sequence[HealthCheck]) -> bool:
    """Whether `explain_caps` has anything to explain (else the desired limits need no read)."""
    return any(_explicit(c) for c in checks)


def explain_caps(checks: Sequence[HealthCheck], desired: Sequence[DesiredLimit]) -> list[HealthCheck]:
    """A readiness verification's `cap KEY` checks against what devicectl last set (desired limits).

    An explicit cap in force that devicectl did not set, or that differs from what it last set, is a
    warning naming both values (set out of band, or a test value a write cycle left behind), never an
    unexplained pass; one devicectl set says which request set it. The CPUs' caps are compared as
    their total, as devicectl sets them ("cpu")."""
    wanted = {d.component: d for d in desired}
    cpu_total = sum(
        float(c.evidence.get("watts") or 0)
        for c in checks
        if c.name.startswith("cap cpu/") and c.evidence.get("capped")
    )
    out: list[HealthCheck] = []
    for check in checks:
        ev = check.evidence
        watts = ev.get("watts")
        if not _explicit(check) or watts is None:
            out.append(check)
            continue
        key = check.name[4:]
        as_cpu = key.startswith("cpu/") and "cpu" in wanted
        limit = wanted.get("cpu" if as_cpu else key)
        in_force = cpu_total if as_cpu else float(watts)
        what = f"{'the CPUs total ' if as_cpu else ''}{in_force:g} W"
        if limit is None:
            detail = (
                f"{check.detail}; explicit cap {what} that devicectl did not set: set out of band, or a "
                "test value left behind; check it before capping"
            )
            out.append(HealthCheck(check.name, "warn", detail, {**ev, "desired": None}))
        elif limit.watts is None or abs(limit.watts - in_force) > 0.5:
            last = f"{limit.watts:g} W" if limit.watts is not None else "no cap"
            detail = (
                f"{check.detail}; explicit cap {what} differs from what devicectl last set ({last}, "
                f"request {limit.request_id})"
            )
            out.append(
                HealthCheck(
                    check.name, "warn", detail, {**ev, "desired": limit.watts, "set_by": limit.request_id}
                )
            )
        else:
            detail = f"{check.detail}; set by devicectl (request {limit.request_id})"
            out.append(
                HealthCheck(
                    check.name,
                    check.status,
                    detail,
                    {**ev, "desired": limit.watts, "set_by": limit.request_id},
                )
            )
    return out
