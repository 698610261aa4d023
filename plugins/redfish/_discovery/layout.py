"""The discovery result's data model (`Component`, `Discovery`) and small Redfish document helpers.

Shared by discovery (`plugins.redfish._discovery.discovery`) and the platform modules that build its result.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from plugins.redfish._wire.document import Document

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
MECH_HPE_ACC = "hpe_acc_power_limit"
#: node power from a DMTF `Sensor` resource (a Control's `Sensor.DataSourceUri`)
SENSOR = "sensor"

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

#: model names of standard DMTF BMCs (the simulator's `dmtf` and `dmtf-legacy`): probed as `auto`
GENERIC_MODELS = ("GENERIC_DMTF", "GENERIC_DMTF_LEGACY")

ROOT = "/redfish/v1"
#: chassis types that are a part of a node (a module, a card, a cable cartridge), never the node itself
PART_TYPES = frozenset({"Module", "Component", "Card", "Zone", "Cartridge", "Sidecar", "Expansion"})
#: bump when the shape changes: older cached discoveries are then redone
#: 4: components placed by the BMC's evidence (write gate, scope), platform matched; 5: an NVIDIA
#: module limit whose PATCH may set other Controls too is no cap (`nvidia_hgx.Limits.fan_out`), and
#: a non-volatile Grace CPU limit is marked (`nvidia_hgx.NONVOLATILE_CPU_LIMIT`)
DISCOVERY_VERSION = 5


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
        cap_mode: the ControlMode caps are written with when a vendor quirk decides it.
        reason: one line saying why this resource carries the component's cap (or why none does).
        quirk: vendor behaviour matched from what the firmware shows (`hpe-cray-ex`,
            `limit-exception`, `limit-exception-fixed`), see `plugins.redfish._platforms`.
        covers: for a group budget (`kind` `group`): the keys of the components it limits together.
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
    #: the ControlMode a cap is written with, when a vendor quirk decides it (see `controls.QUIRKS`)
    cap_mode: str = ""
    reason: str = ""
    quirk: str = ""
    covers: str = ""

    @property
    def label(self) -> str:
        """How messages name the component ("GPU 0", "CPU 1", "node", "module 0")."""
        if self.kind == "node":
            return "node"
        if self.kind == "group":
            return f"group budget {self.name}"
        return f"{self.kind.upper() if self.kind in ('gpu', 'cpu') else self.kind} {self.index}"

    def to_json(self) -> dict[str, Any]:
        """JSON for the device state (every field a string or a number)."""
        return {name: getattr(self, name) for name in _COMPONENT_FIELDS}


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
    #: node power readings: (kind, uri); kind is `environment_metrics`, `legacy_power`, `control` or
    #: `sensor`
    node_metrics: tuple[str, str] = ("", "")
    #: why a control path is missing (shown in "unsupported" messages)
    note: str = ""
    discovered_at: str = ""
    #: the ComputerSystem `Id` this device is (the `system` option), '' when not named
    system: str = ""
    #: the node systems the BMC serves (several: one BMC for several nodes)
    systems: tuple[str, ...] = ()
    #: limits shared by several components (never one component's cap)
    groups: tuple[Component, ...] = ()
    #: one line per resource considered: chosen or skipped, and why
    evidence: tuple[str, ...] = ()
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
        """JSON for the device state: `dataclasses.asdict`'s result (its recursive walk and copies
        cost about 0.25 ms per first contact, this a tenth of it), built field by field: a `Component`'s
        fields are all strings and numbers, the tuples of strings are immutable, `extra` is copied."""
        data: dict[str, Any] = {name: getattr(self, name) for name in _DISCOVERY_FIELDS}
        for name in _COMPONENT_TUPLES:
            data[name] = tuple(c.to_json() for c in data[name])
        data["node_metrics"] = list(self.node_metrics)
        data["extra"] = copy.deepcopy(self.extra)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Discovery | None:
        """Parse a stored discovery; None when missing, malformed or of another version."""
        try:
            if int(data.get("version", 0)) != DISCOVERY_VERSION or data.get("platform") not in PLATFORMS:
                return None
            comps = {name: tuple(Component(**c) for c in data.get(name) or ()) for name in _COMPONENT_TUPLES}
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
                system=str(data.get("system", "")),
                systems=tuple(str(s) for s in data.get("systems") or ()),
                groups=comps["groups"],
                evidence=tuple(str(e) for e in data.get("evidence") or ()),
                extra=dict(data.get("extra") or {}),
            )
        except (TypeError, ValueError, KeyError, IndexError):
            return None


_COMPONENT_FIELDS = tuple(f.name for f in fields(Component))
_DISCOVERY_FIELDS = tuple(f.name for f in fields(Discovery))
#: the `Discovery` fields that hold components
_COMPONENT_TUPLES = ("node", "gpus", "cpus", "groups")


def platform_hint(model_name: str, option: str | None) -> str:
    """The platform to use: the `platform` option, else the DPS model's, else `auto` (probe)."""
    if option and option != AUTO:
        return option
    return MODEL_PLATFORMS.get(model_name.upper(), AUTO)


def processor_components(processors: list[Document], kind: str) -> list[Component]:
    """GPUs or CPUs (`kind`) among Processor documents, numbered 0..n-1 in the BMC's order."""
    wanted = kind.upper()
    picked = []
    for doc in processors:
        ptype = str(doc.get("ProcessorType") or "").upper()
        pid = str(doc.get("Id") or doc.path.rstrip("/").rsplit("/", 1)[-1])
        if ptype != wanted and not (not ptype and pid.upper().startswith(wanted)):
            continue
        em = link_of(doc.body, "EnvironmentMetrics")
        oem = (doc.get("Oem") or {}).get("Nvidia") or {}
        wpps = link_of(oem, "WorkloadPowerProfile") if isinstance(oem, Mapping) else ""
        picked.append((pid, doc.path, em, wpps, str(doc.get("Model") or "")))
    picked.sort(key=lambda p: natural_key(p[0]))
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


def nvidia_node_metrics_uri(chassis: list[Document], read: Sequence[Document] = ()) -> str:
    """The node's EnvironmentMetrics on NVIDIA HGX BMCs, DPS's node telemetry (dps.md §7): the
    tray's chassis `Chassis_0`, else the baseboard's `HGX_Chassis_0`. Where that chassis was read
    (`read`), only the EnvironmentMetrics it links; where it was not (the NVIDIA walk reads the
    collection only, and DPS's proxy refuses most chassis), the path DPS's allow-list names for
    it. Else a RackMount chassis' own link; never a path built from another chassis' name ('':
    no node reading is offered)."""
    bodies = {d.path.rstrip("/"): d.body for d in read}
    ids = [id_of(ch) for ch in chassis]
    for wanted in ("Chassis_0", "HGX_Chassis_0"):
        if wanted not in ids:
            continue
        path = chassis[ids.index(wanted)].path.rstrip("/")
        if path not in bodies:
            return f"{path}/EnvironmentMetrics"  # the path dps.md §7 allows (GET) for this chassis
        if linked := link_of(bodies[path], "EnvironmentMetrics"):
            return linked
    for ch in (*read, *chassis):
        if str(ch.get("ChassisType")) == "RackMount" and link_of(ch.body, "EnvironmentMetrics"):
            return link_of(ch.body, "EnvironmentMetrics")
    return ""


def generic_node_metrics(chassis: list[Document], node: Sequence[Component]) -> tuple[str, str]:
    """(kind, uri) of the node power reading on a generic BMC."""
    for ch in chassis:
        em = link_of(ch.body, "EnvironmentMetrics")
        # NOTE: node power is the node's own chassis's, never a part's (GB300's cable cartridge
        # Chassis/CBC_0 has EnvironmentMetrics without PowerWatts)
        if em and str(ch.get("ChassisType")) not in PART_TYPES:
            return MECH_EM, em
    for comp in node:
        if comp.mechanism == MECH_LEGACY:
            return MECH_LEGACY, comp.limit_uri
        if comp.mechanism == MECH_CONTROL:
            return MECH_CONTROL, comp.limit_uri
    for ch in chassis:
        power = link_of(ch.body, "Power")
        if power:
            return MECH_LEGACY, power
    return "", ""


def members_of(doc: Document) -> list[str]:
    """`@odata.id`s of a collection's members."""
    out = []
    for item in doc.get("Members") or ():
        if isinstance(item, Mapping) and isinstance(item.get("@odata.id"), str):
            out.append(item["@odata.id"])
    return out


def links_of(body: Mapping[str, Any], name: str) -> list[str]:
    """`@odata.id`s of a `Links` array property."""
    links = body.get("Links")
    items = links.get(name) if isinstance(links, Mapping) else None
    if not isinstance(items, list):
        return []
    return [
        str(i["@odata.id"]).rstrip("/")
        for i in items
        if isinstance(i, Mapping) and isinstance(i.get("@odata.id"), str)
    ]


def link_of(body: Mapping[str, Any], name: str) -> str:
    """The `@odata.id` of a navigation property (without a trailing slash), or ''."""
    value = body.get(name)
    if isinstance(value, Mapping) and isinstance(value.get("@odata.id"), str):
        return str(value["@odata.id"]).rstrip("/")
    return ""


def id_of(doc: Document) -> str:
    """A resource's `Id` (else the last URI segment)."""
    return str(doc.get("Id") or doc.path.rstrip("/").rsplit("/", 1)[-1])


def natural_key(text: str) -> tuple[Any, ...]:
    """Sort key ordering `GPU_2` before `GPU_10`."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


def readings_only(
    base: Discovery, chassis: list[Document], gpus: list[Component], cpus: list[Component]
) -> Discovery:
    """A discovery with readings but no writable caps."""

    def fill(c: Component) -> Component:
        return replace(c, metrics_uri=c.metrics_uri or "")

    return replace(
        base,
        gpus=tuple(fill(c) for c in gpus),
        cpus=tuple(fill(c) for c in cpus),
        # NOTE: NVIDIA's layout is fixed (dps.md §7) and its chassis are not fetched; elsewhere only
        # a linked resource: a guessed `{chassis}/EnvironmentMetrics` is a 404 on most BMCs
        node_metrics=(MECH_EM, nvidia_node_metrics_uri(chassis))
        if base.platform in (ENVIRONMENT_METRICS, NODE_MANAGER) and chassis
        else generic_node_metrics(chassis, ()),
    )
