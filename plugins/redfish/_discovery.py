"""Discovery: which control path a BMC offers, and the URIs of every cap and metric resource.

The platform comes from the device model (NVIDIA DPS model names), from the `platform` option, or,
when the model says `auto` or is not a known name, from probing in the order of redfish.md §1.6:
`Chassis/{id}/Controls` (a `ControlType: Power` member) → `EnvironmentMetrics.PowerLimitWatts` →
legacy `Chassis/{id}/Power` → the NVIDIA/AMI Node Manager (not supported yet).

The result (`Discovery`) is JSON: the plugin returns it inside the device state, so later requests
skip probing; it is also cached in process by BMC URL. URIs are static per firmware; a 404 on a
cached URI drops the cache and the next request discovers again.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from plugins.redfish._client import BmcClient, Document

ENVIRONMENT_METRICS = "environment_metrics"
CONTROLS = "controls"
LEGACY_POWER = "legacy_power"
NODE_MANAGER = "node_manager"
AUTO = "auto"
PLATFORMS = (ENVIRONMENT_METRICS, CONTROLS, LEGACY_POWER, NODE_MANAGER)

# cap mechanisms of one component
MECH_EM = "environment_metrics"
MECH_CONTROL = "control"
MECH_LEGACY = "legacy_power"

#: DPS topology models and their power-policy interface (redfish.md §2.1)
MODEL_PLATFORMS: dict[str, str] = {
    "DGX_GB200": ENVIRONMENT_METRICS,
    "DGX_GB300": ENVIRONMENT_METRICS,
    "DGX_B200EM": ENVIRONMENT_METRICS,
    "DGX_B300EM": ENVIRONMENT_METRICS,
    "DGX_VR_NVL72": ENVIRONMENT_METRICS,
    "DGX_H100": NODE_MANAGER,
    "DGX_H200": NODE_MANAGER,
    "DGX_B200": NODE_MANAGER,
    "DGX_B300": NODE_MANAGER,
}

ROOT = "/redfish/v1"
#: bump when the shape changes: older cached discoveries are then redone
DISCOVERY_VERSION = 1


@dataclass(frozen=True)
class Component:
    """One cap-able (or at least measurable) part of the node.

    Attributes:
        key: state key, e.g. `gpu/0`, `cpu/1`, `node`, `module/0`.
        kind: `gpu`, `cpu`, `node` or `module`.
        index: 0-based index within its kind (GPU ids are 0..n-1, ordered by the BMC's numbering).
        name: the BMC's id (`GPU_0`, `GPU_SXM_1`, `HGX_ProcessorModule_0`, `PowerLimit`).
        mechanism: how the cap is written (`environment_metrics`, `control`, `legacy_power`), or
            empty when this component has no writable cap on this platform.
        limit_uri: the resource holding the cap.
        member: index in `PowerControl[]` (legacy Power only).
        members: length of `PowerControl[]` (legacy Power only; PATCH pads the others with `{}`).
        resource_uri: the Processor or Chassis resource.
        metrics_uri: EnvironmentMetrics with the component's readings (may equal `limit_uri`).
        wpps_uri: the NVIDIA WorkloadPowerProfile resource (GPUs with WPPS).
        model: the component's model, when known.
    """

    key: str
    kind: str
    index: int
    name: str
    mechanism: str = ""
    limit_uri: str = ""
    member: int = 0
    members: int = 1
    resource_uri: str = ""
    metrics_uri: str = ""
    wpps_uri: str = ""
    model: str = ""

    @property
    def label(self) -> str:
        """How messages name the component ("GPU 0", "CPU 1", "node", "module 0")."""
        if self.kind == "node":
            return "node"
        return f"{self.kind.upper() if self.kind in ('gpu', 'cpu') else self.kind} {self.index}"


@dataclass(frozen=True)
class Discovery:
    """What discovery found on one BMC; stored in the device state under `discovery`."""

    platform: str
    url: str = ""
    model: str = ""
    vendor: str = ""
    product: str = ""
    redfish_version: str = ""
    firmware: str = ""
    #: node-cap components: one (Control / legacy Power) or the processor modules (split evenly)
    node: tuple[Component, ...] = ()
    gpus: tuple[Component, ...] = ()
    cpus: tuple[Component, ...] = ()
    #: node power readings: (kind, uri); kind is `environment_metrics`, `legacy_power` or `control`
    node_metrics: tuple[str, str] = ("", "")
    #: why a control path is missing (shown in "unsupported" messages)
    note: str = ""
    discovered_at: str = ""
    version: int = DISCOVERY_VERSION
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def node_split(self) -> bool:
        """Whether the node cap is the sum of several module caps."""
        return len(self.node) > 1 or any(c.kind == "module" for c in self.node)

    def components(self) -> list[Component]:
        """Every component (node parts, GPUs, CPUs)."""
        return [*self.node, *self.gpus, *self.cpus]

    def by_key(self, key: str) -> Component | None:
        """A component by state key."""
        for comp in self.components():
            if comp.key == key:
                return comp
        return None

    def to_json(self) -> dict[str, Any]:
        """JSON for the device state."""
        data = asdict(self)
        data["node_metrics"] = list(self.node_metrics)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Discovery | None:
        """Parse a stored discovery; None when missing, malformed or of another version."""
        try:
            if int(data.get("version", 0)) != DISCOVERY_VERSION or data.get("platform") not in PLATFORMS:
                return None
            comps = {
                name: tuple(Component(**c) for c in data.get(name) or ()) for name in ("node", "gpus", "cpus")
            }
            metrics = data.get("node_metrics") or ("", "")
            return cls(
                platform=str(data["platform"]),
                url=str(data.get("url", "")),
                model=str(data.get("model", "")),
                vendor=str(data.get("vendor", "")),
                product=str(data.get("product", "")),
                redfish_version=str(data.get("redfish_version", "")),
                firmware=str(data.get("firmware", "")),
                node=comps["node"],
                gpus=comps["gpus"],
                cpus=comps["cpus"],
                node_metrics=(str(metrics[0]), str(metrics[1])),
                note=str(data.get("note", "")),
                discovered_at=str(data.get("discovered_at", "")),
                extra=dict(data.get("extra") or {}),
            )
        except (TypeError, ValueError, KeyError, IndexError):
            return None


def platform_hint(model_name: str, option: str | None) -> str:
    """The platform to use: the `platform` option, else the DPS model's, else `auto` (probe)."""
    if option and option != AUTO:
        return option
    return MODEL_PLATFORMS.get(model_name.upper(), AUTO)


async def discover(client: BmcClient, *, model: str, hint: str, deadline: float) -> Discovery:
    """Walk the BMC's resources and decide the platform (see the module docstring).

    Args:
        client: the BMC connection.
        model: the device model name (recorded; used for messages).
        hint: a platform name, or `auto` to probe.
        deadline: the request's deadline.
    """
    walker = _Walker(client, deadline)
    root = await walker.get(ROOT)
    firmware_task = asyncio.create_task(walker.firmware(root))
    try:
        nvidia_layout = hint in (ENVIRONMENT_METRICS, NODE_MANAGER)
        processors = await walker.processors(root)
        chassis = await walker.chassis(root, fetch=not nvidia_layout)
        firmware = await firmware_task
    finally:
        if not firmware_task.done():
            firmware_task.cancel()
    base = Discovery(
        platform=hint,
        url=client.origin,
        model=model,
        vendor=str(root.get("Vendor") or ""),
        product=str(root.get("Product") or ""),
        redfish_version=str(root.get("RedfishVersion") or ""),
        firmware=firmware,
        discovered_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    gpus = _processor_components(processors, "gpu")
    cpus = _processor_components(processors, "cpu")
    if hint == ENVIRONMENT_METRICS:
        return _nvidia_em(base, chassis, gpus, cpus)
    if hint == NODE_MANAGER:
        return _node_manager(base, chassis, gpus, cpus)
    controls = await walker.power_controls(chassis)
    if hint == CONTROLS or (hint == AUTO and controls):
        return _controls(base, chassis, controls, gpus, cpus)
    if hint == AUTO:
        em = await walker.em_caps(chassis, gpus, cpus)
        if em is not None:
            return _generic_em(base, chassis, gpus, cpus, em)
    legacy = await walker.legacy_power(chassis)
    if legacy is not None or hint == LEGACY_POWER:
        return _legacy(base, chassis, legacy, gpus, cpus)
    if await walker.has_node_manager(root):
        return _node_manager(base, chassis, gpus, cpus)
    return replace(
        _readings_only(base, chassis, gpus, cpus),
        platform=LEGACY_POWER,
        note="the BMC offers no power-limit resource (no Power Control, EnvironmentMetrics "
        "PowerLimitWatts or Chassis Power PowerLimit)",
    )


# ---- the walk -----------------------------------------------------------------------------------


class _Walker:
    """GETs for discovery, each resource at most once, two at a time (the BMC limit applies anyway)."""

    def __init__(self, client: BmcClient, deadline: float) -> None:
        self.client = client
        self.deadline = deadline
        self._seen: dict[str, Document] = {}

    async def get(self, path: str) -> Document:
        doc = self._seen.get(path)
        if doc is None:
            doc = await self.client.get(path, deadline=self.deadline)
            self._seen[path] = doc
        return doc

    async def get_many(self, paths: Sequence[str]) -> list[Document]:
        return list(await asyncio.gather(*(self.get(p) for p in paths)))

    async def members(self, collection_path: str) -> list[str]:
        doc = await self.get(collection_path)
        return _members(doc)

    async def firmware(self, root: Document) -> str:
        managers = _link(root.body, "Managers")
        if not managers:
            return ""
        ids = await self.members(managers)
        if not ids:
            return ""
        # NOTE: the BMC's own manager is `BMC` on NVIDIA bmcweb (dps.md §7), often `1` elsewhere
        ids.sort(key=lambda m: (not m.rstrip("/").endswith("/BMC"), m))
        manager = await self.get(ids[0])
        return str(manager.get("FirmwareVersion") or "")

    async def processors(self, root: Document) -> list[Document]:
        systems_path = _link(root.body, "Systems")
        if not systems_path:
            return []
        systems = await self.members(systems_path)
        # NOTE: NVIDIA HGX puts GPUs and Grace CPUs under Systems/HGX_Baseboard_0 (redfish.md §2.1)
        systems.sort(key=lambda s: ("Baseboard" not in s, s))
        out: list[Document] = []
        for system_path in systems:
            system = await self.get(system_path)
            procs_path = _link(system.body, "Processors")
            if not procs_path:
                continue
            out += await self.get_many(await self.members(procs_path))
        return out

    async def chassis(self, root: Document, *, fetch: bool) -> list[Document]:
        """Chassis documents; with `fetch=False` only the collection is read and ids are used.

        NOTE: the DPS allow-list for NVIDIA BMCs permits GET on `Chassis/HGX_ProcessorModule_*`'s
        EnvironmentMetrics but not on the chassis resource itself (dps.md §7), so on NVIDIA
        platforms the walk stops at the collection and builds `{chassis}/EnvironmentMetrics`.
        """
        chassis_path = _link(root.body, "Chassis")
        if not chassis_path:
            return []
        members = await self.members(chassis_path)
        if fetch:
            return await self.get_many(members)
        return [Document(m, {"@odata.id": m, "Id": m.rstrip("/").rsplit("/", 1)[-1]}) for m in members]

    async def power_controls(self, chassis: list[Document]) -> list[tuple[Document, Document]]:
        """(chassis, control) pairs for every `ControlType: Power` control."""
        found: list[tuple[Document, Document]] = []
        for ch in chassis:
            path = _link(ch.body, "Controls")
            if not path:
                continue
            for control in await self.get_many(await self.members(path)):
                if (
                    control.get("ControlType") == "Power"
                    and control.get("SetPointType", "Single") == "Single"
                ):
                    found.append((ch, control))
        return found

    async def em_caps(
        self, chassis: list[Document], gpus: list[Component], cpus: list[Component]
    ) -> dict[str, Document] | None:
        """EnvironmentMetrics documents that carry `PowerLimitWatts`, keyed by URI; None if none."""
        paths = [c.metrics_uri for c in gpus + cpus if c.metrics_uri]
        paths += [p for ch in chassis if (p := _link(ch.body, "EnvironmentMetrics"))]
        if not paths:
            return None
        docs = await self.get_many(paths)
        caps = {d.path: d for d in docs if isinstance(d.get("PowerLimitWatts"), Mapping)}
        return caps or None

    async def legacy_power(self, chassis: list[Document]) -> tuple[Document, Document] | None:
        for ch in chassis:
            path = _link(ch.body, "Power")
            if not path:
                continue
            power = await self.get(path)
            controls = power.get("PowerControl") or []
            if any(isinstance(c, Mapping) and isinstance(c.get("PowerLimit"), Mapping) for c in controls):
                return ch, power
        return None

    async def has_node_manager(self, root: Document) -> bool:
        managers = _link(root.body, "Managers")
        if not managers:
            return False
        for path in await self.members(managers):
            manager = await self.get(path)
            oem = manager.get("Oem") or {}
            if isinstance(oem, Mapping) and any(
                isinstance(v, Mapping) and "NodeManager" in v for v in oem.values()
            ):
                return True
        return False


# ---- building the result ------------------------------------------------------------------------


def _processor_components(processors: list[Document], kind: str) -> list[Component]:
    wanted = kind.upper()
    picked = []
    for doc in processors:
        ptype = str(doc.get("ProcessorType") or "").upper()
        pid = str(doc.get("Id") or doc.path.rstrip("/").rsplit("/", 1)[-1])
        if ptype != wanted and not (not ptype and pid.upper().startswith(wanted)):
            continue
        em = _link(doc.body, "EnvironmentMetrics")
        oem = (doc.get("Oem") or {}).get("Nvidia") or {}
        wpps = _link(oem, "WorkloadPowerProfile") if isinstance(oem, Mapping) else ""
        picked.append((pid, doc.path, em, wpps, str(doc.get("Model") or "")))
    picked.sort(key=lambda p: _natural(p[0]))
    return [
        Component(
            key=f"{kind}/{i}",
            kind=kind,
            index=i,
            name=pid,
            resource_uri=path,
            metrics_uri=em,
            wpps_uri=wpps,
            model=model,
        )
        for i, (pid, path, em, wpps, model) in enumerate(picked)
    ]


def _nvidia_em(
    base: Discovery, chassis: list[Document], gpus: list[Component], cpus: list[Component]
) -> Discovery:
    def capped(c: Component) -> Component:
        uri = c.metrics_uri or f"{c.resource_uri}/EnvironmentMetrics"
        return replace(c, mechanism=MECH_EM, limit_uri=uri, metrics_uri=uri)

    modules = sorted(
        (ch for ch in chassis if "ProcessorModule" in _id(ch)),
        key=lambda ch: _natural(_id(ch)),
    )
    node = tuple(
        Component(
            key=f"module/{i}",
            kind="module",
            index=i,
            name=_id(ch),
            mechanism=MECH_EM,
            limit_uri=f"{ch.path}/EnvironmentMetrics",
            metrics_uri=f"{ch.path}/EnvironmentMetrics",
            resource_uri=ch.path,
        )
        for i, ch in enumerate(modules)
    )
    note = "" if node else "this platform has no processor-module caps (Chassis/*ProcessorModule*)"
    return replace(
        base,
        platform=ENVIRONMENT_METRICS,
        node=node,
        gpus=tuple(capped(c) for c in gpus),
        cpus=tuple(capped(c) for c in cpus),
        node_metrics=(MECH_EM, _node_metrics_uri(chassis)),
        note=note,
    )


def _node_manager(
    base: Discovery, chassis: list[Document], gpus: list[Component], cpus: list[Component]
) -> Discovery:
    return replace(
        _readings_only(base, chassis, gpus, cpus),
        platform=NODE_MANAGER,
        note="power limits on this platform go through NVIDIA/AMI Node Manager domains "
        "(Managers/BMC/NodeManager/Domains), whose payload is unpublished; devicectl does not support "
        "them yet",
    )


def _readings_only(
    base: Discovery, chassis: list[Document], gpus: list[Component], cpus: list[Component]
) -> Discovery:
    def fill(c: Component) -> Component:
        return replace(c, metrics_uri=c.metrics_uri or "")

    return replace(
        base,
        gpus=tuple(fill(c) for c in gpus),
        cpus=tuple(fill(c) for c in cpus),
        node_metrics=(MECH_EM, _node_metrics_uri(chassis)) if chassis else ("", ""),
    )


def _controls(
    base: Discovery,
    chassis: list[Document],
    controls: list[tuple[Document, Document]],
    gpus: list[Component],
    cpus: list[Component],
) -> Discovery:
    by_uri = {c.resource_uri: c for c in gpus + cpus}
    node: list[Component] = []
    updated: dict[str, Component] = {}
    for ch, control in controls:
        related = [
            str(item.get("@odata.id"))
            for item in control.get("RelatedItem") or ()
            if isinstance(item, Mapping)
        ]
        target = next((by_uri[r] for r in related if r in by_uri), None)
        if target is not None:
            updated[target.key] = replace(target, mechanism=MECH_CONTROL, limit_uri=control.path)
        elif not node:
            node.append(
                Component(
                    key="node",
                    kind="node",
                    index=0,
                    name=str(control.get("Id") or ""),
                    mechanism=MECH_CONTROL,
                    limit_uri=control.path,
                    resource_uri=ch.path,
                )
            )
    return replace(
        base,
        platform=CONTROLS,
        node=tuple(node),
        gpus=tuple(updated.get(c.key, c) for c in gpus),
        cpus=tuple(updated.get(c.key, c) for c in cpus),
        node_metrics=_generic_node_metrics(chassis, node),
        note="" if node else "no node-level Power Control on this BMC",
    )


def _generic_em(
    base: Discovery,
    chassis: list[Document],
    gpus: list[Component],
    cpus: list[Component],
    caps: dict[str, Document],
) -> Discovery:
    def capped(c: Component) -> Component:
        if c.metrics_uri in caps:
            return replace(c, mechanism=MECH_EM, limit_uri=c.metrics_uri)
        return c

    node: list[Component] = []
    modules = [ch for ch in chassis if _link(ch.body, "EnvironmentMetrics") in caps]
    module_like = [ch for ch in modules if str(ch.get("ChassisType")) == "Module"]
    if module_like:
        for i, ch in enumerate(sorted(module_like, key=lambda c: _natural(_id(c)))):
            uri = _link(ch.body, "EnvironmentMetrics")
            node.append(Component(f"module/{i}", "module", i, _id(ch), MECH_EM, uri, resource_uri=ch.path))
    elif modules:
        ch = modules[0]
        uri = _link(ch.body, "EnvironmentMetrics")
        node.append(
            Component("node", "node", 0, _id(ch), MECH_EM, uri, resource_uri=ch.path, metrics_uri=uri)
        )
    return replace(
        base,
        platform=ENVIRONMENT_METRICS,
        node=tuple(node),
        gpus=tuple(capped(c) for c in gpus),
        cpus=tuple(capped(c) for c in cpus),
        node_metrics=_generic_node_metrics(chassis, node),
        note="" if node else "no chassis-level EnvironmentMetrics power limit on this BMC",
    )


def _legacy(
    base: Discovery,
    chassis: list[Document],
    legacy: tuple[Document, Document] | None,
    gpus: list[Component],
    cpus: list[Component],
) -> Discovery:
    node: tuple[Component, ...] = ()
    if legacy is not None:
        ch, power = legacy
        controls = list(power.get("PowerControl") or [])
        member = next(i for i, c in enumerate(controls) if isinstance(c, Mapping) and "PowerLimit" in c)
        node = (
            Component(
                key="node",
                kind="node",
                index=0,
                name=f"PowerControl/{member}",
                mechanism=MECH_LEGACY,
                limit_uri=power.path,
                member=member,
                members=len(controls),
                resource_uri=ch.path,
            ),
        )
    return replace(
        base,
        platform=LEGACY_POWER,
        node=node,
        gpus=tuple(gpus),
        cpus=tuple(cpus),
        node_metrics=_generic_node_metrics(chassis, list(node)),
        note="the legacy Chassis Power resource caps the whole node only" if node else "no PowerLimit",
    )


def _node_metrics_uri(chassis: list[Document]) -> str:
    ids = [_id(ch) for ch in chassis]
    # NOTE: NVIDIA node readings are Chassis_0 (whole tray) then HGX_Chassis_0 (dps.md §7)
    for wanted in ("Chassis_0", "HGX_Chassis_0"):
        if wanted in ids:
            return f"{chassis[ids.index(wanted)].path}/EnvironmentMetrics"
    for ch in chassis:
        if str(ch.get("ChassisType")) == "RackMount" and _link(ch.body, "EnvironmentMetrics"):
            return _link(ch.body, "EnvironmentMetrics")
    return f"{chassis[0].path}/EnvironmentMetrics" if chassis else ""


def _generic_node_metrics(chassis: list[Document], node: Sequence[Component]) -> tuple[str, str]:
    for ch in chassis:
        em = _link(ch.body, "EnvironmentMetrics")
        if em and str(ch.get("ChassisType")) != "Module":
            return MECH_EM, em
    for comp in node:
        if comp.mechanism == MECH_LEGACY:
            return MECH_LEGACY, comp.limit_uri
        if comp.mechanism == MECH_CONTROL:
            return MECH_CONTROL, comp.limit_uri
    for ch in chassis:
        power = _link(ch.body, "Power")
        if power:
            return MECH_LEGACY, power
    return "", ""


def _members(doc: Document) -> list[str]:
    out = []
    for item in doc.get("Members") or ():
        if isinstance(item, Mapping) and isinstance(item.get("@odata.id"), str):
            out.append(item["@odata.id"])
    return out


def _link(body: Mapping[str, Any], name: str) -> str:
    value = body.get(name)
    if isinstance(value, Mapping) and isinstance(value.get("@odata.id"), str):
        return str(value["@odata.id"]).rstrip("/")
    return ""


def _id(doc: Document) -> str:
    return str(doc.get("Id") or doc.path.rstrip("/").rsplit("/", 1)[-1])


def _natural(text: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))
