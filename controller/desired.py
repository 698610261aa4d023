"""Desired state: the limits a successful change leaves in force, and how drift from them is judged.

After a successful change the runner records each component's limit as read back (`desired_from`)
with the request that set it, in the completion's transaction (`controller/store/_desired.py`).
The drift check (`controller/drift.py`) compares them with what the device enforces.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from plugins.base import AllocationResult, GpuPoliciesResult, GpuResult, StdMetricsResult

if TYPE_CHECKING:  # the validator imports this module: keep it free of the store
    from controller.store import DesiredLimit

#: request ids of internal requests (re-applications); refused from callers (controller/validate.py)
INTERNAL_PREFIX = "devicectl-internal-"
#: watts of difference that count as drift (rounding to a BMC's Increment stays below it)
TOLERANCE_WATTS = 1.0


def is_internal(request_id: str) -> bool:
    return request_id.startswith(INTERNAL_PREFIX)


def desired_from(result: Any) -> dict[str, float | None] | None:
    """The limits a successful result leaves in force, by component ("node", "cpu", "gpu/0")."""
    out: dict[str, float | None] = {}
    gpus: tuple[GpuResult, ...] = ()
    if isinstance(result, AllocationResult):  # each component on its own: a partial success counts
        for name, comp in (("node", result.node), ("cpu", result.cpu), ("memory", result.memory)):
            if comp is not None and comp.ok:
                out[name] = comp.applied_watts or None
        gpus = result.gpu_policies.results if result.gpu_policies is not None else ()
    elif isinstance(result, GpuPoliciesResult):
        gpus = result.results
    for gpu in gpus:
        if gpu.ok:
            out[f"gpu/{gpu.gpu_id}"] = gpu.applied_watts or None
    return out or None


def enforced_from(result: StdMetricsResult) -> dict[str, float | None]:
    """What a metrics read says is enforced: each GPU's limit, and the CPUs' total."""
    node = result.metrics
    if node is None:
        return {}
    out: dict[str, float | None] = {f"gpu/{g.id}": g.limit_watts or None for g in node.gpus}
    if node.cpus and all(c.limit_watts for c in node.cpus):
        out["cpu"] = sum(c.limit_watts for c in node.cpus)
    return out


def compare(desired: list[DesiredLimit], enforced: dict[str, float | None]) -> dict[str, str]:
    """Components off their desired value, each with one line saying how."""
    drifted = {}
    for d in desired:
        if d.watts is None or d.component not in enforced:
            continue  # no cap asked for, or nothing to read it from (node, memory)
        now = enforced[d.component]
        if now is None or abs(now - d.watts) > TOLERANCE_WATTS:
            shown = "no cap" if now is None else f"{now:g} W"
            drifted[d.component] = f"desired {d.watts:g} W (set by {d.request_id}), enforced {shown}"
    return drifted
