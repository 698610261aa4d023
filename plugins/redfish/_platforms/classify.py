"""Which component a power `Control` limits, on DMTF semantics, with a one-line reason each.

A Control limits what its `RelatedItem` names (Control.v1 schema): a Processor, the chassis a
Processor lives in (`Processor.Links.Chassis`: NVIDIA names `Chassis/HGX_CPU_0`, not the Processor),
the node's chassis or system. `PhysicalContext` says what kind of part it is, and must agree.

- related to exactly one Processor (or its chassis): that GPU's or CPU's cap;
- related to several components: a group budget (NVIDIA GB300 `TotalGPU_Power_0` names GPU_0..3):
  kept as a kind of its own, never one component's cap;
- related to the node's chassis or system, or to nothing while on the node's own chassis, with a
  node-wide `PhysicalContext` (`Chassis`, `SystemBoard`, none): the node cap;
- with no `RelatedItem` and a GPU/CPU context: the cap of the only GPU/CPU, else skipped (which one
  it limits is not stated: HPE Cray EX235a has four `Accelerator*PowerLimit` for eight GPUs);
- anything else (a part of the node such as a processor module, a memory or fan context, a URI that
  is not of this node) is skipped with its reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from plugins.redfish._discovery.layout import MECH_CONTROL, PART_TYPES, Component, id_of, link_of
from plugins.redfish._platforms.controls import control_quirk
from plugins.redfish._platforms.platform import ControlCaps
from plugins.redfish._wire.document import Document

GPU_CONTEXTS = frozenset({"GPU", "Accelerator", "GPUSubsystem"})
CPU_CONTEXTS = frozenset({"CPU", "CPUSubsystem"})
NODE_CONTEXTS = frozenset({"", "Chassis", "SystemBoard", "ComputeBay", "Board"})


def classify_controls(
    chassis: list[Document],
    controls: list[tuple[Document, Document]],
    processors: list[Document],
    gpus: list[Component],
    cpus: list[Component],
    evidence: list[str],
) -> ControlCaps:
    """Sort every power Control of the node's chassis (see the module docstring)."""
    procs = {c.resource_uri.rstrip("/"): c for c in gpus + cpus}
    proc_chassis: dict[str, Component] = {}
    for doc in processors:
        comp = procs.get(doc.path.rstrip("/"))
        where = link_of((doc.get("Links") or {}), "Chassis") if isinstance(doc.get("Links"), Mapping) else ""
        if comp is not None and where:
            proc_chassis[where] = comp
    node_uris = {ch.path.rstrip("/") for ch in chassis if str(ch.get("ChassisType") or "") not in PART_TYPES}
    node_uris |= {link for ch in chassis for link in _links(ch.body, "ComputerSystems")}
    part_types = {ch.path.rstrip("/"): str(ch.get("ChassisType")) for ch in chassis}
    out = ControlCaps()
    for ch, control in controls:
        if control.get("ControlType") != "Power":
            continue
        uri = control.path.rstrip("/")
        if control.get("SetPointType", "Single") != "Single":
            evidence.append(
                f"{uri}: skipped (SetPointType {control.get('SetPointType')}, not a single limit)"
            )
            continue
        context = str(control.get("PhysicalContext") or "")
        related = [
            str(i["@odata.id"]).rstrip("/")
            for i in control.get("RelatedItem") or ()
            if isinstance(i, Mapping) and isinstance(i.get("@odata.id"), str)
        ]
        keys: list[str] = []
        unknown: list[str] = []
        for r in related:
            comp = procs.get(r) or proc_chassis.get(r)
            if comp is not None:
                keys.append(comp.key)
            elif r in node_uris:
                keys.append("node")
            else:
                unknown.append(r)
        keys = sorted(set(keys))
        base = Component(
            key="",
            kind="",
            index=0,
            name=id_of(control),
            mechanism=MECH_CONTROL,
            limit_uri=control.path,
            resource_uri=ch.path,
            quirk=control_quirk(control.body),
        )
        if base.quirk:
            base = replace(base, cap_mode="Automatic")
        verdict = _verdict(out, base, context, keys, unknown, part_types, ch, gpus, cpus)
        evidence.append(f"{uri}: {verdict}")
    return out


def _verdict(
    out: ControlCaps,
    base: Component,
    context: str,
    keys: list[str],
    unknown: list[str],
    part_types: dict[str, str],
    ch: Document,
    gpus: list[Component],
    cpus: list[Component],
) -> str:
    """File one Control into `out`; returns the evidence line's verdict."""
    shown = f"PhysicalContext {context or 'none'}"
    if unknown:
        kinds = ", ".join(f"{u} ({part_types[u]})" if u in part_types else u for u in unknown)
        return f"skipped: RelatedItem {kinds} is a part of the node or not of this node ({shown})"
    if len(keys) > 1:
        group = replace(base, key=f"group/{len(out.groups)}", kind="group", index=len(out.groups))
        group = replace(group, covers=",".join(keys), reason=f"limits {', '.join(keys)} together ({shown})")
        out.groups.append(group)
        return f"group budget of {', '.join(keys)}: never one component's cap ({shown})"
    if not keys:
        kind_of = "gpu" if context in GPU_CONTEXTS else "cpu" if context in CPU_CONTEXTS else ""
        if kind_of:
            found = gpus if kind_of == "gpu" else cpus
            if len(found) != 1:
                why = (
                    f"Control {base.name} names no RelatedItem and the node has {len(found)} "
                    f"{kind_of.upper()}s: which one it limits is not stated"
                )
                out.why_not.setdefault(kind_of, why)
                return f"skipped: {why} ({shown})"
            keys = [found[0].key]
        elif context in NODE_CONTEXTS and str(ch.get("ChassisType") or "") not in PART_TYPES:
            keys = ["node"]
        else:
            return f"skipped: no RelatedItem, {shown} on chassis {id_of(ch)} is not the node"
    key = keys[0]
    if key == "node":
        if context not in NODE_CONTEXTS:
            group = replace(base, key=f"group/{len(out.groups)}", kind="group", index=len(out.groups))
            group = replace(group, covers="node", reason=f"a {context} budget of the node ({shown})")
            out.groups.append(group)
            return f"group budget: a {context} budget of the node, never the node's cap ({shown})"
        if out.node is not None:
            return f"skipped: the node cap is already {out.node.limit_uri}"
        reason = f"the node cap ({shown}, on the node's chassis {id_of(ch)})"
        out.node = replace(base, key="node", kind="node", reason=reason)
        return "chosen: " + reason
    target = next(c for c in gpus + cpus if c.key == key)
    wanted = GPU_CONTEXTS if target.kind == "gpu" else CPU_CONTEXTS
    if context and context not in wanted:
        return f"skipped: related to {target.label} but {shown}"
    if key in out.components:
        return f"skipped: {target.label}'s cap is already {out.components[key].limit_uri}"
    reason = f"{target.label}'s cap (RelatedItem {target.name}, {shown})"
    out.components[key] = replace(
        target,
        mechanism=MECH_CONTROL,
        limit_uri=base.limit_uri,
        cap_mode=base.cap_mode,
        quirk=base.quirk,
        reason=reason,
    )
    return "chosen: " + reason


def _links(body: Mapping[str, object], name: str) -> list[str]:
    links = body.get("Links")
    items = links.get(name) if isinstance(links, Mapping) else None
    if not isinstance(items, list):
        return []
    return [str(i["@odata.id"]).rstrip("/") for i in items if isinstance(i, Mapping) and "@odata.id" in i]
