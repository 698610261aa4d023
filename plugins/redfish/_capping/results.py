"""The response to a batch of cap changes: per-element and per-GPU results, failure summaries.

Each element's result reports the cap in force as the BMC reads it back; `requested_watts` only
where that differs from the request or the write failed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from plugins.base import (
    AllocationResult,
    ComponentResult,
    ElementType,
    GpuPoliciesResult,
    GpuResult,
    Policy,
    WriteOutcome,
)
from plugins.redfish._capping.caps import CapChange
from plugins.redfish._capping.operations import Applied, Target
from plugins.redfish._device.device import Device

_GPU_PREFIX = re.compile(r"^GPU (\d+)(\b.*)$", re.S)


def allocation_result(
    applied: Applied, *, resource_group: str = "", policy: Policy | None = None, device: Device
) -> AllocationResult:
    """Assemble the per-component results of a batch into an `AllocationResult`."""
    by_element: dict[ElementType, list[Target]] = {}
    for target in applied.targets:
        by_element.setdefault(target.element, []).append(target)
    node = _element_result(ElementType.NODE, by_element.get(ElementType.NODE, []), applied.changes)
    cpu = _element_result(ElementType.CPU, by_element.get(ElementType.CPU, []), applied.changes)
    memory = _element_result(ElementType.MEMORY, by_element.get(ElementType.MEMORY, []), applied.changes)
    gpus = gpu_results(by_element.get(ElementType.GPU, []), applied.changes)
    failures = [r.message for r in (node, cpu, memory) if r is not None and not r.ok]
    failures += [g.message for g in gpus if not g.ok]
    failures += [t.error for t in by_element.get(ElementType.GPU, []) if t.component is None]
    power_cap = node.applied_watts if node is not None and node.ok else _node_cap_in_force(device)
    return AllocationResult(
        ok=not failures,
        error=summarize(failures),
        resource_group=resource_group,
        policy=policy,
        power_cap_watts=power_cap,
        gpu_policies=GpuPoliciesResult(resource_group, tuple(gpus)) if gpus else None,
        node=node,
        cpu=cpu,
        memory=memory,
    )


def gpu_results(targets: list[Target], changes: dict[str, CapChange]) -> list[GpuResult]:
    """One `GpuResult` per GPU target."""
    out = []
    for target in sorted(targets, key=lambda t: t.component.index if t.component else -1):
        if target.component is None:
            continue  # no GPU to report on (e.g. the BMC shows none): the error goes to the result
        gid = target.component.index
        change = changes.get(target.component.key)
        if target.error or change is None:
            out.append(
                GpuResult(
                    gid,
                    False,
                    requested_watts=target.watts,
                    message=target.error,
                    write=WriteOutcome.NOT_WRITTEN,
                )
            )
            continue
        applied = _in_force(change)
        requested = change.requested
        differs = requested is not None and abs(applied - requested) > 0.5
        out.append(
            GpuResult(
                gid,
                change.ok,
                applied_watts=applied,
                requested_watts=requested if differs or not change.ok else None,
                message=change.message
                or (_differs(target.component.label, requested, applied) if differs else ""),
                write=change.write,
            )
        )
    return out


def _element_result(
    element: ElementType, targets: list[Target], changes: dict[str, CapChange]
) -> ComponentResult | None:
    if not targets:
        return None
    errors = [t.error for t in targets if t.error]
    found = [
        changes[t.component.key] for t in targets if t.component is not None and t.component.key in changes
    ]
    errors += [c.message for c in found if not c.ok and c.message]
    applied = sum(_in_force(c) for c in found)
    requested_parts = [t.watts for t in targets if t.watts is not None]
    requested = (
        targets[0].total
        if targets[0].total is not None
        else (sum(requested_parts) if requested_parts else None)
    )
    ok = not errors and all(c.ok for c in found) and len(found) == len(targets)
    differs = requested is not None and abs(applied - requested) > 0.5 * max(len(found), 1)
    message = "; ".join(errors)
    if ok and differs:
        message = _differs(element.value, requested, applied)
    elif ok:  # e.g. a write settled as landed by its read-back after a gateway's error
        message = "; ".join(c.message for c in found if c.message)
    write = WriteOutcome.of_all(c.write for c in found)
    return ComponentResult(
        ok=ok,
        applied_watts=applied,
        requested_watts=requested if differs or not ok else None,
        message=message,
        write=write,
    )


def _in_force(change: CapChange) -> float:
    """The cap the response reports: the read-back, else (nothing written) the value read before."""
    if change.after is not None:
        return change.after.watts or 0.0
    if change.write is WriteOutcome.NOT_WRITTEN and change.before is not None:
        return change.before.watts or 0.0
    return 0.0  # unknown


def summarize(messages: Sequence[str]) -> str:
    """Join failure messages, folding identical per-GPU messages into one line ("GPU 0, 1, 2 …")."""
    folded: dict[str, list[str]] = {}
    order: list[str] = []
    for message in messages:
        match = _GPU_PREFIX.match(message)
        key, gpu = (match.group(2), match.group(1)) if match else (message, "")
        if key not in folded:
            folded[key] = []
            order.append(key)
        if gpu:
            folded[key].append(gpu)
    out = []
    for key in order:
        gpus = folded[key]
        if not gpus:
            out.append(key)
        elif len(gpus) == 1:
            out.append(f"GPU {gpus[0]}{key}")
        else:
            out.append(f"GPUs {', '.join(gpus)}{key}")
    return "; ".join(out)


def _differs(label: str, requested: float | None, applied: float) -> str:
    asked = "no cap" if requested is None else f"{requested:g} W"
    return f"{label}: requested {asked}, applied {applied:g} W (as reported by the BMC)"


def _node_cap_in_force(device: Device) -> float:
    total = 0.0
    for comp in device.discovery.node:
        value = device.state.applied(comp.key)
        if value is not None:
            total += value
    return total
