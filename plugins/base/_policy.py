"""Policy arithmetic shared by plugins: from a node policy to per-component cap targets.

Rules (DPS policy semantics):
- watts for an element are node totals, split evenly across the components of that type;
- percentages resolve against the maximum (component max, times the count for element totals);
- a GPU-specific policy overrides that GPU's share; one without a limit falls back to the share;
- a target outside the component's [min, max] is rejected for that component, with a message
  naming the limits, while the other components still proceed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from plugins.base._fields import plain_init
from plugins.base._spec import ComponentSpec, SystemSpec
from plugins.base._types import ElementType, GpuPolicy, Policy, PowerLimit


@plain_init
@dataclass(frozen=True)
class CapTarget:
    """The cap one component should get. `error` set means the target was rejected."""

    component: str
    watts: float | None
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error


def check_range(component: str, watts: float, spec: ComponentSpec) -> str:
    """An error message when `watts` is outside the component's limits, else ''."""
    lo, hi = spec.min_watts, spec.max_watts
    span = f"allowed {_fmt(lo)}..{_fmt(hi)} W"
    if lo is not None and watts < lo - 1e-9:
        return f"{component}: {_fmt(watts)} W is below the minimum of {_fmt(lo)} W ({span})"
    if hi is not None and watts > hi + 1e-9:
        return f"{component}: {_fmt(watts)} W is above the maximum of {_fmt(hi)} W ({span})"
    return ""


def element_share(spec: SystemSpec, policy: Policy | None, element: ElementType) -> CapTarget | None:
    """Per-component target for `element` from the node policy (None when it sets no limit).

    For NODE this is the node cap itself; for other elements it is the total divided by the count.
    """
    if policy is None:
        return None
    limit = policy.limit_for(element)
    if limit is None:
        return None
    comp = spec.component(element)
    count = max(comp.count, 1)
    label = element.value
    try:
        total = limit.resolve(comp.max_watts * count if comp.max_watts is not None else None)
    except ValueError as exc:
        return CapTarget(label, None, f"{label}: {exc}")
    share = total / count
    return CapTarget(label, share, check_range(label if count == 1 else f"{label} share", share, comp))


def gpu_targets(
    spec: SystemSpec,
    policy: Policy | None,
    gpu_policies: Sequence[GpuPolicy] = (),
    gpu_ids: Iterable[int] | None = None,
) -> dict[int, CapTarget]:
    """Per-GPU targets: the policy's GPU share, overridden by GPU-specific policies.

    GPUs with neither get no entry. A GPU-specific policy naming a GPU the node does not have
    gets an error entry.
    """
    ids = list(gpu_ids) if gpu_ids is not None else list(range(spec.gpu.count))
    share = element_share(spec, policy, ElementType.GPU)
    out: dict[int, CapTarget] = {}
    if share is not None:
        for gpu in ids:
            label = f"GPU {gpu}"
            err = share.error.replace("gpu share", label) if share.error else ""
            out[gpu] = CapTarget(label, share.watts, err)
    for item in gpu_policies:
        label = f"GPU {item.gpu_id}"
        if item.gpu_id not in ids:
            out[item.gpu_id] = CapTarget(
                label, None, f"{label}: no such GPU on this node (GPUs: {_ids(ids)})"
            )
            continue
        if item.limit is None:
            continue  # the GPU-specific policy is removed: keep the share (if any)
        out[item.gpu_id] = gpu_target(label, item.limit, spec.gpu)
    return out


def gpu_target(label: str, limit: PowerLimit, spec: ComponentSpec) -> CapTarget:
    try:
        watts = limit.resolve(spec.max_watts)
    except ValueError as exc:
        return CapTarget(label, None, f"{label}: {exc}")
    return CapTarget(label, watts, check_range(label, watts, spec))


def _fmt(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value:g}"


def _ids(ids: Sequence[int]) -> str:
    return ", ".join(str(i) for i in ids) or "none"
