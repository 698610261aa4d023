"""NVIDIA HGX trays (GB200/GB300 NVL, GH200, B200EM/B300EM, HGX H100 boards): caps from the
EnvironmentMetrics `PowerLimitWatts` each resource shows, on the scope its own evidence proves.

- A GPU's or CPU's cap is its own Processor EnvironmentMetrics' `PowerLimitWatts`, only where that
  resource (linked from the Processor) showed one when read; else the component is refused with
  that reason (a GB200 tray's `Processors/GPU_0/EnvironmentMetrics` offers no limit).
- A limit on a processor-module chassis (`ChassisType: Module`) is scoped by its evidence: the
  `PhysicalContext` of the excerpt, of the resource, or of the `Control` its `DataSourceUri` names,
  and that Control's `RelatedItem`. CPU evidence (GH200's Grace `ProcessorModule_n_EDPp` controls,
  `PhysicalContext: CPU`) makes it the cap of the module's CPU; a limit related to the module
  itself covers what the module contains (`Links.Contains`, the processors' `Links.Chassis`).
- The node cap is the modules' sum only where that is proven: every module's limit covers its whole
  module, and the modules together contain every GPU and CPU of the node, each once (a captured
  GB300 tray). Modules are chosen by what each chassis resource says (`ChassisType: Module`), their
  limits read where that resource links them (`EnvironmentMetrics.@odata.id`); no URI is built
  from a chassis' name. For a DPS model (`environment_metrics`) every chassis the collection links
  is read for that evidence; where DPS's proxy refuses a chassis (403, dps.md §7) or the BMC does
  not serve it (404: a capture taken through the proxy), only a DPS model
  that declares its node cap as the processor modules' (`DGX_GB200`, `DGX_GB300`) reads the module
  limit DPS documents, and takes it only where the BMC serves it as itself, the Control its
  `DataSourceUri` names could be read where it names one, and no evidence contradicts the rule (a
  CPU or part scope, Links covering part of the node). Anything else refuses the node cap with the
  reason.
- A module limit is written alone, or not at all: NVIDIA's bmcweb sets a chassis EnvironmentMetrics
  PATCH's `SetPoint` on every power Control of the chassis (`requestRoutesEnvironmentMetrics`,
  environment_metrics.hpp: one `patchPowerLimit` per endpoint of the chassis' `power_controls`),
  and the chassis' Controls collection lists those same Controls (`getPowercontrolObjects`,
  control.hpp). Where a module's collection lists more than one power Control (or one its limit's
  `DataSourceUri` does not name), or could not be read, the module's limit is no cap of anything
  (`Limits.fan_out`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from plugins.redfish._discovery.layout import (
    AUTO,
    ENVIRONMENT_METRICS,
    MECH_EM,
    Component,
    Discovery,
    id_of,
    link_of,
    links_of,
    members_of,
    natural_key,
    nvidia_node_metrics_uri,
)
from plugins.redfish._discovery.walk import Walker, has_node_manager, walker_em_caps
from plugins.redfish._platforms.classify import CPU_CONTEXTS, GPU_CONTEXTS
from plugins.redfish._platforms.platform import Platform, Probe
from plugins.redfish._wire.document import Document
from plugins.redfish._wire.errors import ProtocolError, RedfishHTTPError

#: `Component.quirk` of a Grace CPU whose own EnvironmentMetrics limit names its Control
#: (`DataSourceUri`): NVIDIA's bmcweb shows there only a Control whose `persistent` flag is set
#: (environment_util.hpp `getCpuPowerCapData`, called with `true`), and a PATCH of that limit sets
#: every power Control of the CPU (environment_metrics.hpp, `Item.Cpu`: one `patchPowerLimit` per
#: `power_controls` endpoint): a cap written there survives BMC and host resets (a captured
#: GB300's CPU limit names `..._TDPPowerNonvolatile_0`)
NONVOLATILE_CPU_LIMIT = "nvidia-nonvolatile-cpu-limit"
#: the most members of a module chassis' Controls collection read (a captured GB300 lists 1): more
#: listed count as unread, so the module's limit is refused rather than read without bound
MAX_MODULE_CONTROLS = 8
#: DPS models whose node cap DPS itself writes as the processor modules' sum (dps.md §7:
#: `Chassis/HGX_ProcessorModule_*/EnvironmentMetrics`)
MODULE_SUM_MODELS = frozenset({"DGX_GB200", "DGX_GB300"})
#: the processor-module limits DPS documents (its proxy's `GET,PATCH` entry, dps.md §7): read only
#: for those models, only where the chassis that would link them is refused (the proxy's 403) or not
#: served (404), and taken only where the BMC serves them as themselves
DPS_MODULE_METRICS = "/redfish/v1/Chassis/HGX_ProcessorModule_*/EnvironmentMetrics"
_DPS_MODULE_METRICS = re.compile("[^/]*".join(re.escape(part) for part in DPS_MODULE_METRICS.split("*")))


@dataclass(frozen=True)
class Limits:
    """What discovery read for an NVIDIA tray.

    Attributes:
        metrics: every EnvironmentMetrics read, by URI (with or without a limit).
        sources: the Controls that limits' `DataSourceUri` name, where they could be read.
        restricted: whether the chassis could not be read (DPS's allow-list): no `Links` evidence.
    """

    metrics: Mapping[str, Document]
    sources: Mapping[str, Document]
    restricted: bool = False
    #: under DPS's allow-list: the chassis the Chassis collection links, as read
    linked_chassis: tuple[Document, ...] = ()
    #: under DPS's allow-list: why a chassis the collection links could not be read
    unread: tuple[str, ...] = ()
    #: under DPS's allow-list, for a DPS model of the module-sum rule: (the refused chassis, the
    #: EnvironmentMetrics DPS documents for it) where the BMC serves that resource as itself
    documented: tuple[tuple[Document, str], ...] = ()
    #: where the BMC's evidence does not agree with DPS's documented rule: why
    disagree: tuple[str, ...] = ()
    #: module chassis -> why a PATCH of its limit may set more than that limit's own Control
    fan_out: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Scope:
    """What one module limit covers: `cpu` or `gpu` (those components), `group` (several processors
    together), `module` (what the module holds), `unknown`, or `controls` (its PATCH may set other
    Controls too: `Limits.fan_out`)."""

    kind: str
    keys: tuple[str, ...]
    evidence: str
    #: False where the limit names its Control (`DataSourceUri`) and shows no context itself, and
    #: that Control could not be read: the scope is then what is left, not what the BMC confirmed
    confirmed: bool = True


def limit_of(doc: Document | None) -> Mapping[str, Any] | None:
    """A resource's `PowerLimitWatts` object, when it shows one."""
    limit = doc.get("PowerLimitWatts") if doc is not None else None
    return limit if isinstance(limit, Mapping) else None


def data_source(doc: Document) -> str:
    """The `DataSourceUri` of a resource's `PowerLimitWatts` ('' when none)."""
    limit = limit_of(doc) or {}
    source = limit.get("DataSourceUri")
    return source.rstrip("/") if isinstance(source, str) and source.startswith("/redfish/v1/") else ""


def _related(doc: Document | None) -> list[str]:
    items = doc.get("RelatedItem") if doc is not None else None
    return [
        str(i["@odata.id"]).rstrip("/")
        for i in items or ()
        if isinstance(items, list) and isinstance(i, Mapping) and isinstance(i.get("@odata.id"), str)
    ]


def processor_places(
    processors: Sequence[Document], comps: Sequence[Component]
) -> dict[str, tuple[Component, ...]]:
    """The components at each URI: a Processor's own, and the chassis it lives in (`Links.Chassis`;
    several processors may share one)."""
    by_uri = {c.resource_uri.rstrip("/"): c for c in comps}
    out: dict[str, tuple[Component, ...]] = {uri: (c,) for uri, c in by_uri.items()}
    for doc in processors:
        comp = by_uri.get(doc.path.rstrip("/"))
        links = doc.get("Links")
        where = link_of(links, "Chassis") if isinstance(links, Mapping) else ""
        if comp is not None and where:
            out[where] = (*out.get(where, ()), comp)
    return out


def module_contents(module: Document, places: Mapping[str, tuple[Component, ...]]) -> tuple[str, ...]:
    """The keys of the processors a module holds: those living in it or in a chassis it contains
    (`Links.Contains`), and those it lists (`Links.Processors`)."""
    uris = [module.path.rstrip("/"), *links_of(module.body, "Contains"), *links_of(module.body, "Processors")]
    keys = {c.key for uri in uris for c in places.get(uri, ())}
    return tuple(sorted(keys, key=natural_key))


def module_scope(
    module: Document,
    metrics: Document,
    source: Document | None,
    places: Mapping[str, tuple[Component, ...]],
) -> Scope:
    """What a module's limit covers, from its evidence only (see the module docstring)."""
    limit = limit_of(metrics) or {}
    context = str(
        limit.get("PhysicalContext")
        or metrics.get("PhysicalContext")
        or (source.get("PhysicalContext") if source is not None else "")
        or ""
    )
    here = module.path.rstrip("/")
    related = [r for r in _related(source) if r != here]
    shown = [f"DataSourceUri {data_source(metrics) or 'none'}", f"PhysicalContext {context or 'not shown'}"]
    if source is not None and _related(source):
        shown.append("RelatedItem " + ", ".join(r.rsplit("/", 1)[-1] for r in _related(source)))
    evidence = "; ".join(shown)
    named = [c for r in related for c in places.get(r, ())]
    inside = module_contents(module, places)
    cpus_inside = tuple(k for k in inside if k.startswith("cpu/"))
    if context in CPU_CONTEXTS or (named and all(c.kind == "cpu" for c in named)):
        keys = tuple(c.key for c in named if c.kind == "cpu") or cpus_inside
        if len(keys) != 1:  # one limit over several CPUs is a budget they share, no one CPU's cap
            return Scope("group", tuple(sorted(keys, key=natural_key)), evidence)
        return Scope("cpu", keys, evidence)
    if context in GPU_CONTEXTS and named and all(c.kind == "gpu" for c in named):
        return Scope("gpu", tuple(c.key for c in named), evidence)
    if any(r not in places for r in related):
        return Scope("unknown", (), f"{evidence}: related to what is not this module")
    if named:  # several processors, not the module: a budget they share
        return Scope("group", tuple(sorted({c.key for c in named}, key=natural_key)), evidence)
    if data_source(metrics) and source is None and not context:
        # NOTE: the Control that says what this limit covers (GH200: a Grace CPU's EDPp) was not read
        unread = f"{evidence}; its DataSourceUri could not be read"
        return Scope("module", inside, unread, confirmed=False)
    return Scope("module", inside, evidence)


def discover_nvidia_hgx(
    base: Discovery,
    chassis: list[Document],
    processors: list[Document],
    gpus: list[Component],
    cpus: list[Component],
    limits: Limits,
) -> Discovery:
    """GPU/CPU caps where their own resource shows a limit; module limits on their proven scope."""
    evidence: list[str] = []
    metrics = limits.metrics
    places = processor_places(processors, gpus + cpus)

    def own(c: Component) -> Component:
        if not c.metrics_uri:
            return replace(c, reason=f"Processor {c.name} links no EnvironmentMetrics")
        doc = metrics.get(c.metrics_uri)
        if doc is None:
            return replace(c, reason=f"{c.metrics_uri} could not be read")
        if limit_of(doc) is None:
            why = f"{c.metrics_uri} carries no PowerLimitWatts: the BMC offers no {c.label} limit"
            return replace(c, reason=why)
        why = f"{c.label}'s own Processor EnvironmentMetrics PowerLimitWatts"
        if c.kind == "cpu" and data_source(doc):
            why += f" (from Control {data_source(doc)}: non-volatile, NVIDIA bmcweb shows no other there)"
            return replace(
                c, mechanism=MECH_EM, limit_uri=c.metrics_uri, reason=why, quirk=NONVOLATILE_CPU_LIMIT
            )
        return replace(c, mechanism=MECH_EM, limit_uri=c.metrics_uri, reason=why)

    gpu_caps = {c.key: own(c) for c in gpus}
    cpu_caps = {c.key: own(c) for c in cpus}
    read_chassis = list(limits.linked_chassis) if limits.restricted else chassis
    modules = _modules(read_chassis, metrics)
    modules += [(ch, uri) for ch, uri in limits.documented if uri in metrics]
    scopes: list[tuple[Document, str, Scope]] = []
    for ch, uri in modules:
        doc = metrics.get(uri)
        if limit_of(doc) is None or doc is None:
            evidence.append(f"{uri}: no PowerLimitWatts (processor module {id_of(ch)} offers no limit)")
            continue
        fan_out = limits.fan_out.get(ch.path.rstrip("/"))
        if fan_out:
            evidence.append(f"{uri}: skipped: {fan_out}")
            scopes.append((ch, uri, Scope("controls", (), fan_out)))
            continue
        scope = module_scope(ch, doc, limits.sources.get(data_source(doc)), places)
        scopes.append((ch, uri, scope))
    groups: list[Component] = []
    for ch, uri, scope in scopes:
        if scope.kind == "cpu":
            for key in scope.keys:
                comp = cpu_caps[key]
                if comp.mechanism:
                    evidence.append(f"{uri}: skipped: {comp.label} limit ({scope.evidence}); it has its own")
                    continue
                why = f"{comp.label}'s limit on processor module {id_of(ch)} ({scope.evidence})"
                cpu_caps[key] = replace(comp, mechanism=MECH_EM, limit_uri=uri, reason=why)
                evidence.append(f"{uri}: chosen: {why}")
            if not scope.keys:
                evidence.append(f"{uri}: skipped: a CPU limit ({scope.evidence}) whose CPU is not stated")
    node, why_not = _node(base, scopes, gpus, cpus, limits)
    for ch, uri, scope in scopes:
        if scope.kind not in ("cpu", "controls") and not node:
            covers = ",".join(scope.keys) or id_of(ch)
            index = len(base.groups) + len(groups)
            group = Component(
                key=f"group/{index}",
                kind="group",
                index=index,
                name=id_of(ch),
                mechanism=MECH_EM,
                limit_uri=uri,
                resource_uri=ch.path,
                covers=covers,
                reason=f"limits {covers} together ({scope.evidence})",
            )
            groups.append(group)
            evidence.append(f"{uri}: group budget of {covers}: never one component's cap ({scope.evidence})")
    evidence += [f"{c.limit_uri}: chosen: {c.reason}" for c in node]
    return replace(
        base,
        platform=ENVIRONMENT_METRICS,
        node=tuple(node),
        gpus=tuple(gpu_caps[c.key] for c in gpus),
        cpus=tuple(cpu_caps[c.key] for c in cpus),
        groups=(*base.groups, *groups),
        # the chassis as read: under DPS's allow-list those read one by one, else the walk's own
        node_metrics=(MECH_EM, nvidia_node_metrics_uri(chassis, read_chassis)),
        note="" if node else why_not,
        evidence=(*base.evidence, *evidence),
    )


def _modules(chassis: list[Document], metrics: Mapping[str, Document]) -> list[tuple[Document, str]]:
    """Processor-module chassis (`ChassisType: Module`, as the chassis resource itself says) and the
    EnvironmentMetrics each links (`EnvironmentMetrics.@odata.id`), where that was read; a URI is
    never built from a chassis' name."""
    out = []
    for ch in sorted(chassis, key=lambda c: natural_key(id_of(c))):
        if str(ch.get("ChassisType") or "") == "Module" and (uri := link_of(ch.body, "EnvironmentMetrics")):
            if uri in metrics:
                out.append((ch, uri))
    return out


def _node(
    base: Discovery,
    scopes: list[tuple[Document, str, Scope]],
    gpus: list[Component],
    cpus: list[Component],
    limits: Limits,
) -> tuple[list[Component], str]:
    """The node cap as the modules' sum where proven, else why not."""
    restricted = limits.restricted
    if restricted and limits.disagree:
        return [], (
            "DPS's rule (dps.md §7: the node cap is the processor modules' sum, at "
            f"{DPS_MODULE_METRICS}) does not agree with the BMC's evidence: " + _first(limits.disagree)
        )
    if not scopes and restricted and limits.unread:
        return [], (
            "the chassis could not be read ("
            + _first(limits.unread)
            + "): the EnvironmentMetrics a processor module links are unknown, and a URI is never "
            "built from a chassis' name"
        )
    if not scopes:
        return [], (
            "no resource of this BMC carries a node power limit: no processor module and no chassis "
            "EnvironmentMetrics, power Control or Power PowerLimit of the node offers one"
        )
    fanned = [s for _, _, s in scopes if s.kind == "controls"]
    if fanned:
        return [], f"a processor module's limit cannot be written alone ({fanned[0].evidence})"
    cpu_limits = [s for _, _, s in scopes if s.kind == "cpu"]
    if cpu_limits:
        return [], (
            "the processor modules' PowerLimitWatts are CPU limits ("
            + cpu_limits[0].evidence
            + "): they cap the CPUs only; this board offers no node limit"
        )
    if any(s.kind != "module" for _, _, s in scopes):
        odd = next(s for _, _, s in scopes if s.kind != "module")
        return [], f"a processor module's limit covers a part of the module only ({odd.evidence})"
    everything = {c.key for c in gpus + cpus}
    covered = [k for _, _, s in scopes for k in s.keys]
    unconfirmed = [s for _, _, s in scopes if not s.confirmed]
    proven = bool(everything) and sorted(covered) == sorted(everything) and not unconfirmed
    if proven:
        how = "the modules together contain every GPU and CPU of the node, each once (Links.Contains)"
    elif restricted and base.model.upper() in MODULE_SUM_MODELS and not covered and not unconfirmed:
        # NOTE: DPS's rule, only where the BMC's evidence agrees: each module's limit is on a
        # `ChassisType: Module` chassis' own EnvironmentMetrics link, or, where the DPS proxy
        # refuses the chassis, on the resource DPS documents that the BMC serves as itself; each
        # limit's evidence, read whole (the Control its DataSourceUri names included: GH200's
        # module limits are Grace EDPp controls), covers its module, and no module or processor
        # states what the modules contain, so nothing contradicts the rule
        how = (
            f"DPS model {base.model.upper()} writes its node cap as the processor modules' sum (dps.md §7), "
            "and the BMC's evidence agrees (each limit scoped to its module, no contrary Links)"
        )
    else:
        missing = sorted(everything - set(covered), key=natural_key)
        unread = f"; unread: {_first(limits.unread)}" if limits.unread else ""
        unknown = f"; what a limit covers is not known ({unconfirmed[0].evidence})" if unconfirmed else ""
        return [], (
            "the processor modules' limits are not proven to cover the node together"
            + (f" ({', '.join(missing)} in no module)" if missing else "")
            + unknown
            + unread
            + ": a node cap is never split over them"
        )
    node = [
        Component(
            key=f"module/{i}",
            kind="module",
            index=i,
            name=id_of(ch),
            mechanism=MECH_EM,
            limit_uri=uri,
            metrics_uri=uri,
            resource_uri=ch.path,
            reason=f"node cap share: processor module {id_of(ch)} ({s.evidence}); {how}",
        )
        for i, (ch, uri, s) in enumerate(scopes)
    ]
    return node, ""


async def nvidia_limits(
    walker: Walker,
    chassis: list[Document],
    gpus: list[Component],
    cpus: list[Component],
    *,
    restricted: bool,
    model: str = "",
) -> Limits:
    """The EnvironmentMetrics of an NVIDIA tray's processors and processor modules, and the Controls
    their limits name (`DataSourceUri`), each read once; only what this platform may read, and only
    URIs the BMC's own resources link.

    Under DPS's allow-list (`restricted`, the chassis collection read without its members) each
    member the collection links is read here; one that cannot be read (absent, or refused: the DPS
    proxy answers 403) is named in `unread`."""
    paths = [c.metrics_uri for c in gpus + cpus if c.metrics_uri]
    linked: list[Document] = []
    unread: list[str] = []
    refused: list[str] = []
    hidden: list[str] = []
    documented: list[tuple[Document, str]] = []
    disagree: list[str] = []
    if restricted:
        # NOTE: the members the Chassis collection links, each read for what it says it is
        # (ChassisType, the EnvironmentMetrics it links); a processor's own chassis need not link
        # its module (GB200: HGX_GPU_0 shows no ContainedBy, the module lists it in Links.Contains)
        for uri in sorted({ch.path.rstrip("/") for ch in chassis}, key=natural_key):
            doc, why = await _read(walker, uri)
            if doc is None:
                unread.append(f"{uri}: {why}")
                if why.startswith("the BMC answered 403"):
                    refused.append(uri)  # summed up below: DPS's proxy refuses most of them
                elif why != "absent":  # an absent one the walk names itself
                    walker.evidence.append(f"{uri}: not read ({why})")
                if why == "absent" or why.startswith("the BMC answered 403"):
                    hidden.append(uri)  # linked, not served: DPS's documented limit may stand in
            else:
                linked.append(doc)
        chassis = linked
        if refused:
            walker.evidence.append(
                f"chassis refused (the BMC answered 403; DPS's proxy allows no chassis resource but a "
                f"few, dps.md §7): {len(refused)}: " + ", ".join(u.rsplit("/", 1)[-1] for u in refused)
            )
        if model.upper() in MODULE_SUM_MODELS:
            documented, disagree = await _documented_modules(walker, hidden)
    paths += [uri for _, uri in documented]  # read already: taken from the walker's cache
    for ch in chassis:
        if str(ch.get("ChassisType") or "") == "Module":
            paths += [p for p in (link_of(ch.body, "EnvironmentMetrics"),) if p]
    for p in paths:
        if not walker.allowed(p):
            walker.evidence.append(f"{p}: skipped: outside the paths this platform reads")
    docs = await walker.find_many([p for p in paths if walker.allowed(p)])
    metrics = {d.path.rstrip("/"): d for d in docs}
    named_sources = sorted({data_source(d) for d in docs if limit_of(d) is not None} - {""})
    if restricted:
        # NOTE: DPS's proxy refuses the Controls (403): a limit whose Control was not read has an
        # unconfirmed scope (`Scope.confirmed`)
        read = await asyncio.gather(*(_read(walker, p) for p in named_sources))
        found = [d for d, _ in read if d is not None]
    else:
        found = await walker.find_many([p for p in named_sources if walker.allowed(p)])
    sources = {d.path.rstrip("/"): d for d in found}
    fan_out = await _fan_out(walker, chassis, metrics, restricted=restricted)
    return Limits(
        metrics,
        sources,
        restricted,
        tuple(linked),
        tuple(unread),
        tuple(documented),
        tuple(disagree),
        fan_out,
    )


async def _fan_out(
    walker: Walker, chassis: list[Document], metrics: Mapping[str, Document], *, restricted: bool
) -> dict[str, str]:
    """Module chassis whose limit a PATCH may set on more than that limit's own Control, and why (see
    the module docstring): their Controls collection lists several power Controls, or one the
    limit's `DataSourceUri` does not name, or none; or, read directly, it (or a member) could not
    be read. Under DPS's allow-list, which refuses Controls (403), an unread collection is only
    recorded: the module limits DPS documents are what DPS itself writes."""
    out: dict[str, str] = {}
    for ch, uri in _modules(chassis, metrics):
        doc = metrics[uri]
        path = link_of(ch.body, "Controls")
        if limit_of(doc) is None or not path:
            continue
        key = ch.path.rstrip("/")
        collection, why = await _read(walker, path)
        if collection is None:
            if restricted:
                walker.evidence.append(f"{path}: not read ({why})")
            else:
                out[key] = f"{path} not read ({why}): the Controls a PATCH of {uri} sets are not known"
            continue
        power: list[str] = []
        unread: list[str] = []
        members = members_of(collection)
        if len(members) > MAX_MODULE_CONTROLS:  # a BMC's listing bounds no read of ours
            unread.append(f"{len(members) - MAX_MODULE_CONTROLS} listed past the first {MAX_MODULE_CONTROLS}")
        listed = members[:MAX_MODULE_CONTROLS]
        read = await asyncio.gather(*(_read(walker, m) for m in listed))
        for member, (control, why) in zip(listed, read, strict=True):
            if control is None:
                unread.append(f"{member.rstrip('/')}: {why}")
            elif str(control.get("ControlType") or "") == "Power":
                power.append(member.rstrip("/"))
        named = ", ".join(p.rsplit("/", 1)[-1] for p in power) or "none"
        source = data_source(doc)
        if len(power) + len(unread) > 1 or (unread and not restricted):
            out[key] = (
                f"a PATCH of {uri} sets every power Control the chassis lists (NVIDIA bmcweb), and "
                f"{path} lists {len(power)}: {named}" + (f"; not read: {_first(unread)}" if unread else "")
            )
        elif len(power) == 1 and source and power[0] != source:
            out[key] = (
                f"its DataSourceUri names {source}, but {path} lists {named} as the chassis' power "
                f"Control, which a PATCH of {uri} sets (NVIDIA bmcweb)"
            )
        elif not power and not unread:
            out[key] = f"{path} lists no power Control, which a PATCH of {uri} would set (NVIDIA bmcweb)"
        elif power:
            walker.evidence.append(f"{path}: the one power Control a PATCH of {uri} sets: {named}")
        else:
            walker.evidence.append(f"{path}: its member not read: {_first(unread)}")
    return out


async def _documented_modules(
    walker: Walker, hidden: Sequence[str]
) -> tuple[list[tuple[Document, str]], list[str]]:
    """Under DPS's allow-list, the processor-module EnvironmentMetrics DPS documents (dps.md §7:
    the proxy allows `GET,PATCH` on them and refuses their chassis) for the chassis the collection
    links that the BMC refused (403) or does not serve (404: a capture taken through the proxy),
    each taken only where the BMC serves it as itself: its `@odata.id` is that path and its type an
    EnvironmentMetrics. Returns (the chassis, as the collection links it; that path) and, for each
    that does not agree, why."""
    out: list[tuple[Document, str]] = []
    disagree: list[str] = []
    for uri in hidden:
        path = f"{uri}/EnvironmentMetrics"
        if not _DPS_MODULE_METRICS.fullmatch(path) or not walker.allowed(path):
            continue
        doc = await walker.find(path)
        if doc is None:
            continue  # absent: this chassis is no module of DPS's rule
        served = str(doc.get("@odata.id") or "").rstrip("/")
        kind = str(doc.get("@odata.type") or "")
        if served != path or "EnvironmentMetrics" not in kind:
            disagree.append(f"{path} answers as {served or 'no @odata.id'} ({kind or 'no @odata.type'})")
            continue
        walker.evidence.append(
            f"{path}: read at the path DPS documents (dps.md §7): chassis {uri} is refused or not "
            "served; the BMC serves this resource as itself"
        )
        out.append((Document(uri, {"@odata.id": uri, "Id": uri.rsplit("/", 1)[-1]}), path))
    return out, disagree


def _first(reasons: Sequence[str], n: int = 3) -> str:
    more = f"; and {len(reasons) - n} more" if len(reasons) > n else ""
    return "; ".join(reasons[:n]) + more


async def _read(walker: Walker, uri: str) -> tuple[Document | None, str]:
    """A resource the BMC links (a chassis, a limit's Control), or why it cannot be read: absent,
    refused (the DPS proxy's allow-list refuses most chassis and every Control with 403), another
    error status, or a reply that is no Redfish document. One that cannot be read never fails
    discovery (nor does a link out of the Redfish tree, which `Walker.find` never follows)."""
    if not walker.allowed(uri):
        return None, "outside the paths this platform reads"
    try:
        doc = await walker.find(uri)
    except RedfishHTTPError as exc:
        return None, f"the BMC answered {exc.status}"
    except ProtocolError as exc:
        return None, f"not a Redfish document ({exc})"
    return (doc, "") if doc is not None else (None, "absent")


def nvidia_tray(processors: list[Document]) -> bool:
    """Whether the processors are NVIDIA HGX's (`Systems/HGX_Baseboard_*`, redfish.md §2.1)."""
    return any("/Systems/HGX_Baseboard" in p.path for p in processors)


async def probe(p: Probe) -> Discovery | None:
    """The DPS model's layout (`environment_metrics`), or a probed tray whose processors are
    `Systems/HGX_Baseboard_*` and whose EnvironmentMetrics show a limit."""
    if p.hint == ENVIRONMENT_METRICS:
        limits = await nvidia_limits(p.walker, p.chassis, p.gpus, p.cpus, restricted=True, model=p.base.model)
        return discover_nvidia_hgx(p.base, p.chassis, p.processors, p.gpus, p.cpus, limits)
    if p.hint != AUTO or not nvidia_tray(p.processors):
        return None
    if not await walker_em_caps(p.walker, p.chassis, p.gpus, p.cpus):
        return None
    # NOTE: a tray's Controls are only recorded here (a GPU-total budget is never one GPU's cap)
    p.walker.evidence.append("NVIDIA HGX tray (Systems/HGX_Baseboard_*): processor EnvironmentMetrics caps")
    limits = await nvidia_limits(p.walker, p.every_chassis, p.gpus, p.cpus, restricted=False)
    grouped = replace(p.base, groups=tuple(p.classified.groups))
    tray = discover_nvidia_hgx(grouped, p.every_chassis, p.processors, p.gpus, p.cpus, limits)
    if not tray.node and p.classified.node is not None:
        # a power Control whose evidence makes it the node's own cap (`classify`)
        return replace(tray, node=(p.classified.node,), note="")
    if not tray.node and await has_node_manager(p.walker, p.root):
        note = (
            f"{tray.note}; the BMC's managers offer NVIDIA/AMI Node Manager domains instead, whose "
            "payload is unpublished (unsupported)"
        )
        return replace(tray, note=note)
    return tray


PLATFORM = Platform(
    name="nvidia-hgx",
    matches=(
        "processors under Systems/HGX_Baseboard_* (or a DPS model of the EnvironmentMetrics family) "
        "whose Processor or processor-module EnvironmentMetrics show PowerLimitWatts"
    ),
    writes='PATCH <EnvironmentMetrics> {"PowerLimitWatts": {"SetPoint": N}} where it shows the limit',
    restores="the ClearOOBSetPoint action it lists, else its DefaultSetPoint, else the prior SetPoint",
    probe=probe,
    quirks=(
        "a processor-module limit whose evidence says CPU (GH200 EDPp) is that CPU's cap",
        "the node cap is the modules' sum only where they contain every processor (GB300)",
        "Oem.Nvidia.PowerLimitPersistency only where the resource shows it (NVIDIA/bmcweb)",
        "a Grace CPU limit that names its Control is non-volatile: its caps are said to survive "
        "resets (NVIDIA/bmcweb getCpuPowerCapData)",
    ),
    refuses=(
        "a GPU or CPU cap whose own Processor EnvironmentMetrics carries no PowerLimitWatts (GB200 "
        "firmware without GPU limits)",
        "a node cap unless the processor-module limits are proven to cover every GPU and CPU of the node "
        "once (a GH200's module limits are CPU EDPp limits: no node limit)",
        "a limit covering several processors (a GPU-total budget) as any one component's cap",
        "a processor-module limit whose PATCH sets more than its own Control: its chassis lists several "
        "power Controls, or they could not be read (NVIDIA/bmcweb sets them all)",
    ),
)
