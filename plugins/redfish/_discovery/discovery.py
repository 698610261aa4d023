"""Discovery: which control path a BMC offers, and the URIs of every cap and metric resource.

The platform comes from the device model (NVIDIA DPS model names), from the `platform` option, or,
when the model says `auto` or is not a known name, from probing: the platform registry
(`plugins.redfish._platforms.registry`) tries each platform module in the order of redfish.md §1.6
(an NVIDIA HGX tray → DMTF power Controls → EnvironmentMetrics → legacy `Chassis/{id}/Power` → HPE
Apollo 6500's `AccPowerService` → the NVIDIA/AMI Node Manager); the first whose evidence the BMC
shows decides, and the result names it (`inventory check --login`).

Only the node's own systems and chassis are read for caps: a BMC serving several nodes (HPE Cray EX)
needs the inventory option `system`, else its caps are refused with the list of its systems. A link
the BMC cannot serve is absent, with its reason, never a failed node (`walk`). Every resource chosen
or skipped leaves one line in `Discovery.evidence`.

The result (`Discovery`) is JSON: the plugin returns it inside the device state, so later requests
skip probing; it is also cached in process by BMC URL. URIs are static per firmware; a 404 on a
cached URI drops the cache and the next request discovers again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime

from plugins.redfish._client.client import BmcClient, Document
from plugins.redfish._discovery.layout import (
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
    SENSOR,
    Component,
    Discovery,
    id_of,
    link_of,
    links_of,
    natural_key,
    platform_hint,
    processor_components,
)
from plugins.redfish._discovery.walk import (
    LimitRead,
    Walker,
    chassis_of,
    firmware_of,
    processors_of,
    sensor_behind,
    systems_of,
)
from plugins.redfish._platforms.platform import Probe
from plugins.redfish._platforms.registry import choose
from plugins.redfish._wire.errors import PlatformUnsupportedError

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


async def discover(
    client: BmcClient,
    *,
    model: str,
    hint: str,
    deadline: float,
    system: str = "",
    limit_reads: dict[str, LimitRead] | None = None,
) -> Discovery:
    """Walk the BMC's resources and decide the platform (see the module docstring).

    Args:
        client: the BMC connection.
        model: the device model name (recorded; used for messages).
        hint: a platform name, or `auto` to probe.
        deadline: the request's deadline.
        system: the ComputerSystem `Id` this device is, for a BMC serving several nodes.
        limit_reads: filled with the GETs made of the chosen limit resources (`Walker.limit_reads`).
    """
    walker = Walker(client, deadline, DISCOVERY_PATHS.get(hint))
    root = await walker.get(ROOT)
    firmware_task = asyncio.create_task(firmware_of(walker, root))
    try:
        nvidia_layout = hint in (ENVIRONMENT_METRICS, NODE_MANAGER)
        every_chassis = await chassis_of(walker, root, fetch=not nvidia_layout)
        systems = await systems_of(walker, root, nvidia=nvidia_layout)
        hosts = node_systems(systems, every_chassis)
        nodes = node_ids(hosts)
        base = Discovery(
            platform=hint,
            url=client.origin,
            model=model,
            vendor=str(root.get("Vendor") or ""),
            product=str(root.get("Product") or ""),
            redfish_version=str(root.get("RedfishVersion") or ""),
            system=system,
            systems=tuple(nodes),
            discovered_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        if system:
            hosts = [s for s in hosts if id_of(s) == system]
            if not hosts:
                raise PlatformUnsupportedError(
                    f"{client.origin}: system {system!r} is not on this BMC; it serves "
                    f"{', '.join(nodes) or 'no ComputerSystem'} (option `system`)"
                )
        elif len(nodes) > 1:
            firmware = await firmware_task
            return replace(
                base,
                platform=hint if hint != AUTO else CONTROLS,
                firmware=firmware,
                note=several_systems_note(nodes),
                evidence=(*walker.evidence, several_systems_note(nodes)),
            )
        others = other_systems(every_chassis, systems, hosts)
        chassis = (
            every_chassis if nvidia_layout else node_chassis(every_chassis, hosts, walker.evidence, others)
        )
        processors = await processors_of(walker, hosts)
        base = replace(base, firmware=await firmware_task)
    finally:
        if not firmware_task.done():
            firmware_task.cancel()
    gpus = processor_components(processors, "gpu")
    cpus = processor_components(processors, "cpu")
    found = await _choose(walker, root, base, hint, (chassis, every_chassis), processors, gpus, cpus)
    if found.node_metrics[0] == MECH_CONTROL and (
        source := await sensor_behind(walker, found.node_metrics[1])
    ):
        found = replace(found, node_metrics=(SENSOR, source))
    shared = shared_chassis(every_chassis, hosts, others) if not nvidia_layout else []
    if shared and not found.node:
        found = replace(found, note=shared_note(shared))
    if limit_reads is not None:
        limit_reads.update(walker.limit_reads(found.components()))
    return replace(found, evidence=(*walker.evidence, *found.evidence))


async def _choose(
    walker: Walker,
    root: Document,
    base: Discovery,
    hint: str,
    chassis_sets: tuple[list[Document], list[Document]],
    processors: list[Document],
    gpus: list[Component],
    cpus: list[Component],
) -> Discovery:
    """The platform and each component's cap resource: the registry's first platform whose evidence
    the BMC shows (`plugins.redfish._platforms.registry`).

    `chassis_sets`: the node's own chassis, and every chassis (an NVIDIA tray is one node whose
    processor modules need not link a system).
    """
    chassis, every_chassis = chassis_sets
    probe = Probe(walker, root, base, hint, chassis, every_chassis, processors, gpus, cpus)
    return await choose(probe)


def several_systems_note(nodes: Sequence[str]) -> str:
    """Why caps are refused on a BMC serving several nodes when the inventory names none."""
    return (
        f"this BMC serves several systems ({', '.join(nodes)}); name the one this device is with the "
        'inventory option `system` (e.g. system = "' + nodes[0] + '")'
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
    "/redfish/v1/Systems/HGX_Baseboard_*/Processors/*/EnvironmentMetrics",
    "/redfish/v1/Chassis",
    # NOTE: the chassis the processors link, and the EnvironmentMetrics a module chassis links
    # (DPS's proxy refuses the chassis resource: then no module limit is known, dps.md §7)
    "/redfish/v1/Chassis/*",
    "/redfish/v1/Chassis/*/EnvironmentMetrics",
    # the Control a module limit names (`DataSourceUri`): what the limit covers; and every Control
    # of a module chassis: what a PATCH of its limit sets (NVIDIA bmcweb sets them all)
    "/redfish/v1/Chassis/*/Controls",
    "/redfish/v1/Chassis/*/Controls/*",
)
#: GETs discovery may make per platform (`*` = within one path segment); None: follow links freely.
#: NVIDIA's match what the DPS proxy allows (dps.md §7).
DISCOVERY_PATHS: dict[str, tuple[str, ...]] = {
    ENVIRONMENT_METRICS: _NVIDIA_PATHS,
    NODE_MANAGER: _NVIDIA_PATHS,
}


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


def node_ids(hosts: list[Document]) -> list[str]:
    """The distinct nodes among the host systems (their `Id`s).

    NOTE: an NVIDIA HGX tray shows its GPUs and Grace CPUs as `Systems/HGX_Baseboard_*` next to the
    host's own system; both are the same node (redfish.md §2.1).
    """
    ids = sorted((id_of(s) for s in hosts), key=natural_key)
    if any(i.startswith("HGX_Baseboard") for i in ids):
        return [next(i for i in ids if i.startswith("HGX_Baseboard"))]
    return ids


def other_systems(chassis: list[Document], systems: list[Document], hosts: list[Document]) -> set[str]:
    """Systems the chassis name that are not this node's: another node's, or one the BMC does not
    serve (a DPU's or SmartNIC's SoC is a part of the node, not another node)."""
    named = {uri for ch in chassis for uri in links_of(ch.body, "ComputerSystems")}
    parts = {s.path.rstrip("/") for s in systems if str(s.get("SystemType") or "") in _NOT_HOST}
    return named - parts - {s.path.rstrip("/") for s in hosts}


def shared_chassis(chassis: list[Document], systems: list[Document], others: set[str]) -> list[Document]:
    """Chassis that name one of the node's systems and another node's (`Links.ComputerSystems`): an
    enclosure or a shared chassis, whose limits are budgets of several nodes."""
    ours = {s.path.rstrip("/") for s in systems}
    return [
        ch
        for ch in chassis
        if ours & set(links_of(ch.body, "ComputerSystems"))
        and others & set(links_of(ch.body, "ComputerSystems"))
    ]


def shared_note(shared: list[Document]) -> str:
    """Why the node cap is refused when the node's chassis is shared with other nodes."""
    named = "; ".join(
        f"chassis {id_of(ch)} names systems "
        + ", ".join(uri.rsplit("/", 1)[-1] for uri in links_of(ch.body, "ComputerSystems"))
        for ch in shared
    )
    return (
        f"{named}: its limits are a budget shared by several nodes, never written as this node's cap, "
        "and no chassis of this node alone carries one"
    )


def node_chassis(
    chassis: list[Document],
    systems: list[Document],
    evidence: list[str] | None = None,
    others: set[str] | None = None,
) -> list[Document]:
    """The chassis of the node's own systems, in collection order; all chassis when none is related
    to a system (an enclosure's cap is never taken for the node's).

    A chassis belongs to a system when either links the other (`Links.ComputerSystems`,
    `Links.Chassis`); HPE Cray EX node controllers link neither, and name the node's chassis as its
    system (`Chassis/Node0` for `Systems/Node0`). A chassis that also names another node's system
    (`others`) is shared: never read for this node's caps, and then no other chassis stands in.
    """
    shared = shared_chassis(chassis, systems, others or set())
    if shared:
        if evidence is not None:
            evidence.append(f"{shared_note(shared)} (not read for caps)")
        chassis = [ch for ch in chassis if ch not in shared]
    ours = {s.path.rstrip("/") for s in systems}
    theirs = {uri for s in systems for uri in links_of(s.body, "Chassis")}
    theirs |= {link_of(s.body, "Chassis") for s in systems} - {""}
    linked = [
        ch
        for ch in chassis
        if ours & set(links_of(ch.body, "ComputerSystems")) or ch.path.rstrip("/") in theirs
    ]
    if not linked and not any(links_of(ch.body, "ComputerSystems") for ch in chassis) and not theirs:
        names = {id_of(s) for s in systems}
        linked = [ch for ch in chassis if id_of(ch) in names]
        if linked and evidence is not None:
            evidence.append(
                "no chassis links a system: the node's chassis is the one named as its system "
                f"({', '.join(id_of(ch) for ch in linked)})"
            )
    if linked and evidence is not None:
        rest = [id_of(ch) for ch in chassis if ch not in linked]
        if rest:
            evidence.append(f"chassis of other systems or shared, not read for caps: {', '.join(rest)}")
    if shared and not linked:
        return []
    return linked or chassis
