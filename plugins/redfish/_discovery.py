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
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from plugins.redfish._client import BmcClient, Document
from plugins.redfish._errors import PlatformUnsupportedError
from plugins.redfish._layout import (
    AUTO,
    CONTROLS,
    ENVIRONMENT_METRICS,
    LEGACY_POWER,
    MECH_CONTROL,
    MECH_EM,
    MECH_LEGACY,
    MODEL_PLATFORMS,
    NODE_MANAGER,
    PLATFORMS,
    ROOT,
    Component,
    Discovery,
    link_of,
    members_of,
    platform_hint,
    processor_components,
    readings_only,
)
from plugins.redfish._platforms.controls import discover_controls
from plugins.redfish._platforms.environment_metrics import discover_generic_em, discover_nvidia_em
from plugins.redfish._platforms.legacy_power import discover_legacy
from plugins.redfish._platforms.node_manager import discover_node_manager

__all__ = [
    "AUTO",
    "CONTROLS",
    "ENVIRONMENT_METRICS",
    "LEGACY_POWER",
    "MECH_CONTROL",
    "MECH_EM",
    "MECH_LEGACY",
    "MODEL_PLATFORMS",
    "NODE_MANAGER",
    "PLATFORMS",
    "Component",
    "Discovery",
    "discover",
    "platform_hint",
]


async def discover(client: BmcClient, *, model: str, hint: str, deadline: float) -> Discovery:
    """Walk the BMC's resources and decide the platform (see the module docstring).

    Args:
        client: the BMC connection.
        model: the device model name (recorded; used for messages).
        hint: a platform name, or `auto` to probe.
        deadline: the request's deadline.
    """
    walker = _Walker(client, deadline, DISCOVERY_PATHS.get(hint))
    root = await walker.get(ROOT)
    firmware_task = asyncio.create_task(walker.firmware(root))
    try:
        nvidia_layout = hint in (ENVIRONMENT_METRICS, NODE_MANAGER)
        chassis = await walker.chassis(root, fetch=not nvidia_layout)
        systems = await walker.systems(root, chassis, nvidia=nvidia_layout)
        if not nvidia_layout:
            chassis = node_chassis(chassis, systems)
        processors = await walker.processors(systems)
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
    gpus = processor_components(processors, "gpu")
    cpus = processor_components(processors, "cpu")
    if hint == ENVIRONMENT_METRICS:
        return discover_nvidia_em(base, chassis, gpus, cpus)
    if hint == NODE_MANAGER:
        return discover_node_manager(base, chassis, gpus, cpus)
    controls = await walker.power_controls(chassis)
    if hint == CONTROLS or (hint == AUTO and controls):
        return discover_controls(base, chassis, controls, gpus, cpus)
    if hint == AUTO:
        em = await walker.em_caps(chassis, gpus, cpus)
        if em is not None:
            return discover_generic_em(base, chassis, gpus, cpus, em)
    legacy = await walker.legacy_power(chassis)
    if legacy is not None or hint == LEGACY_POWER:
        return discover_legacy(base, chassis, legacy, gpus, cpus)
    if await walker.has_node_manager(root):
        return discover_node_manager(base, chassis, gpus, cpus)
    return replace(
        readings_only(base, chassis, gpus, cpus),
        platform=LEGACY_POWER,
        note="the BMC offers no power-limit resource (no Power Control, EnvironmentMetrics "
        "PowerLimitWatts or Chassis Power PowerLimit)",
    )


# ---- what discovery may read ----------------------------------------------------------------------

_NVIDIA_PATHS = (
    "/redfish/v1",
    "/redfish/v1/Managers",
    "/redfish/v1/Managers/*",
    "/redfish/v1/Systems",
    "/redfish/v1/Systems/HGX_Baseboard_*",
    "/redfish/v1/Systems/HGX_Baseboard_*/Processors",
    "/redfish/v1/Systems/HGX_Baseboard_*/Processors/*",
    "/redfish/v1/Chassis",
)
#: GETs discovery may make per platform (`*` = within one path segment); None: follow links freely.
#: NVIDIA's match what the DPS proxy allows (dps.md §7).
DISCOVERY_PATHS: dict[str, tuple[str, ...]] = {
    ENVIRONMENT_METRICS: _NVIDIA_PATHS,
    NODE_MANAGER: _NVIDIA_PATHS,
}


def _pattern(pattern: str) -> re.Pattern[str]:
    return re.compile("[^/]*".join(re.escape(part) for part in pattern.split("*")))


# ---- following links ---------------------------------------------------------------------------

#: ComputerSystem types that are never the node's host (a SmartNIC's or DPU's SoC)
_NOT_HOST = frozenset({"DPU"})


def node_systems(systems: list[Document], chassis: list[Document]) -> list[Document]:
    """The node's host systems: not a DPU/SmartNIC SoC, and linked from a chassis when any chassis
    names its systems (`Links.ComputerSystems`)."""
    hosts = [s for s in systems if str(s.get("SystemType") or "") not in _NOT_HOST] or systems
    linked = {uri for ch in chassis for uri in links_of(ch.body, "ComputerSystems")}
    chosen = [s for s in hosts if s.path.rstrip("/") in linked]
    return chosen or hosts


def node_chassis(chassis: list[Document], systems: list[Document]) -> list[Document]:
    """The chassis of the node's own systems (`Links.ComputerSystems`), in collection order; all
    chassis when none names a system (an enclosure's cap is never taken for the node's)."""
    ours = {s.path.rstrip("/") for s in systems}
    linked = [ch for ch in chassis if ours & set(links_of(ch.body, "ComputerSystems"))]
    return linked or chassis


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


# ---- the walk ------------------------------------------------------------------------------------


class _Walker:
    """GETs for discovery, each resource at most once, two at a time (the BMC limit applies anyway)."""

    def __init__(self, client: BmcClient, deadline: float, allowed: tuple[str, ...] | None = None) -> None:
        self.client = client
        self.deadline = deadline
        self._seen: dict[str, Document] = {}
        self._allowed = [_pattern(p) for p in allowed] if allowed is not None else None

    async def get(self, path: str) -> Document:
        doc = self._seen.get(path)
        if doc is None:
            clean = path.rstrip("/") or "/"
            if self._allowed is not None and not any(p.fullmatch(clean) for p in self._allowed):
                # a BMC whose links lead elsewhere: refuse rather than walk past the platform's paths
                raise PlatformUnsupportedError(
                    f"{self.client.origin}: discovery would read {clean}, which is not among the paths "
                    "this platform needs (docs/redfish.md, Discovery)"
                )
            doc = await self.client.get(path, deadline=self.deadline)
            self._seen[path] = doc
        return doc

    async def get_many(self, paths: Sequence[str]) -> list[Document]:
        return list(await asyncio.gather(*(self.get(p) for p in paths)))

    async def members(self, collection_path: str) -> list[str]:
        doc = await self.get(collection_path)
        return members_of(doc)

    async def firmware(self, root: Document) -> str:
        managers = link_of(root.body, "Managers")
        if not managers:
            return ""
        ids = await self.members(managers)
        if not ids:
            return ""
        # NOTE: the BMC's own manager is `BMC` on NVIDIA bmcweb (dps.md §7), often `1` elsewhere
        ids.sort(key=lambda m: (not m.rstrip("/").endswith("/BMC"), m))
        manager = await self.get(ids[0])
        return str(manager.get("FirmwareVersion") or "")

    async def systems(self, root: Document, chassis: list[Document], *, nvidia: bool) -> list[Document]:
        """The node's own ComputerSystems (see `node_systems`); on NVIDIA only `HGX_Baseboard_*`."""
        systems_path = link_of(root.body, "Systems")
        if not systems_path:
            return []
        paths = await self.members(systems_path)
        if nvidia:
            # NOTE: NVIDIA HGX puts GPUs and Grace CPUs under Systems/HGX_Baseboard_0 (redfish.md §2.1),
            # and the DPS proxy allows no other system (dps.md §7): the host's System_0 is never read
            paths = [p for p in paths if p.rstrip("/").rsplit("/", 1)[-1].startswith("HGX_Baseboard")]
            return await self.get_many(paths)
        return node_systems(await self.get_many(paths), chassis)

    async def processors(self, systems: list[Document]) -> list[Document]:
        """The processors of the given systems only (never a SmartNIC's or another node's)."""
        out: list[Document] = []
        for system in systems:
            procs_path = link_of(system.body, "Processors")
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
        chassis_path = link_of(root.body, "Chassis")
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
            path = link_of(ch.body, "Controls")
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
        paths += [p for ch in chassis if (p := link_of(ch.body, "EnvironmentMetrics"))]
        if not paths:
            return None
        docs = await self.get_many(paths)
        caps = {d.path: d for d in docs if isinstance(d.get("PowerLimitWatts"), Mapping)}
        return caps or None

    async def legacy_power(self, chassis: list[Document]) -> tuple[Document, Document] | None:
        for ch in chassis:
            path = link_of(ch.body, "Power")
            if not path:
                continue
            power = await self.get(path)
            controls = power.get("PowerControl") or []
            if any(isinstance(c, Mapping) and isinstance(c.get("PowerLimit"), Mapping) for c in controls):
                return ch, power
        return None

    async def has_node_manager(self, root: Document) -> bool:
        managers = link_of(root.body, "Managers")
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
