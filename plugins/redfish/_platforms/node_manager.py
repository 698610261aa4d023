"""NVIDIA/AMI Node Manager platforms (DGX H100/H200, DGX B200, DGX B300): not supported yet.

DPS writes node caps there through `Managers/BMC/NodeManager/Domains/{id}` (AMI OEM), whose payloads
are not published (redfish.md §2.1, §6), and the GPUs' `GPU_SXM_n/EnvironmentMetrics` are read-only.
Every cap and workload-profile request is answered per component with "unsupported on this platform";
ping and metrics work as on any other BMC.
"""

from __future__ import annotations

from dataclasses import replace

from plugins.redfish._discovery.layout import NODE_MANAGER, Component, Discovery, readings_only
from plugins.redfish._discovery.walk import has_node_manager
from plugins.redfish._platforms.platform import Platform, Probe
from plugins.redfish._wire.document import Document


def unsupported_message(discovery: Discovery, what: str, reason: str = "") -> str:
    """`<what>: unsupported on this platform (<model>, <platform>): <reason>`."""
    model = discovery.model or discovery.product or "this BMC"
    reason = reason or discovery.note or "the BMC offers no writable resource for it"
    return f"{what}: unsupported on this platform ({model}, {discovery.platform}): {reason}"


def discover_node_manager(
    base: Discovery, chassis: list[Document], gpus: list[Component], cpus: list[Component]
) -> Discovery:
    """Readings only: every cap answers "unsupported on this platform"."""
    return replace(
        readings_only(base, chassis, gpus, cpus),
        platform=NODE_MANAGER,
        note="power limits on this platform go through NVIDIA/AMI Node Manager domains "
        "(Managers/BMC/NodeManager/Domains), whose payload is unpublished; devicectl does not support "
        "them yet",
    )


async def probe(p: Probe) -> Discovery | None:
    """Asked for, or a manager shows an OEM `NodeManager`: readings only."""
    if p.hint == NODE_MANAGER or await has_node_manager(p.walker, p.root):
        return discover_node_manager(p.base, p.chassis, p.gpus, p.cpus)
    return None


PLATFORM = Platform(
    name="node-manager",
    matches="a Manager with Oem.*.NodeManager (NVIDIA/AMI DGX H100/H200/B200/B300)",
    writes="nothing: caps are refused as unsupported (the Domains payload is unpublished)",
    restores="nothing",
    probe=probe,
    refuses=("every cap: Node Manager domains' payload is unpublished (unsupported)",),
)
