"""Which resource carries each cap, and why: the lines `devicectl inventory check --login` prints.

Built from the discovery in a device's state (`Discovery.evidence` and each component's `reason`),
so an operator sees, before anything is written, which Redfish resource a node, GPU or CPU cap
would go to, which resources were skipped, and which links the BMC could not serve.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plugins.redfish._discovery.layout import Component, Discovery
from plugins.redfish._platforms import unsupported_message


def cap_plan(state: Mapping[str, Any]) -> list[str]:
    """One line per component (or run of components with the same outcome), then the evidence."""
    data = state.get("discovery")
    found = Discovery.from_json(data) if isinstance(data, Mapping) else None
    if found is None:
        return []
    where = f"platform {found.platform}" + (f", system {found.system}" if found.system else "")
    firmware = f"firmware {found.firmware}" if found.firmware else "firmware not shown"
    lines = [f"{found.vendor or found.product or 'BMC'}, {firmware} ({where})"]
    if found.extra.get("matched"):
        lines.append(f"matched {found.extra['matched']}: {found.extra.get('matches', '')}")
    if found.node:
        for comp in found.node:
            lines.append(f"{comp.label}: {comp.limit_uri} ({comp.reason or comp.mechanism})")
    else:
        lines.append(unsupported_message(found, "node: refused", found.note))
    for kind, comps in (("GPU", found.gpus), ("CPU", found.cpus)):
        lines += _runs(found, kind, comps)
    for group in found.groups:
        lines.append(f"{group.label}: {group.limit_uri} (limits {group.covers}; never written as one cap)")
    kind, uri = found.node_metrics
    lines.append(f"node power: {uri} ({kind})" if uri else "node power: no resource reports it")
    lines += [f"  {line}" for line in found.evidence]
    return lines


def _runs(found: Discovery, kind: str, comps: tuple[Component, ...]) -> list[str]:
    """Components with the same outcome on one line ("GPU 0-7: refused (...)")."""
    out: list[str] = []
    run: list[Component] = []
    for comp in (*comps, None):
        if run and (comp is None or _outcome(found, comp) != _outcome(found, run[0])):
            span = f"{run[0].index}" if len(run) == 1 else f"{run[0].index}-{run[-1].index}"
            out.append(f"{kind} {span}: {_outcome(found, run[0])}")
            run = []
        if comp is not None:
            run.append(comp)
    return out


def _outcome(found: Discovery, comp: Component) -> str:
    if comp.mechanism:
        return f"{comp.limit_uri} ({comp.reason or comp.mechanism})"
    return f"refused ({comp.reason or found.note or 'no writable limit'})"
