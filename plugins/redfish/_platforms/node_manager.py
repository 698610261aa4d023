"""NVIDIA/AMI Node Manager platforms (DGX H100/H200, DGX B200, DGX B300): not supported yet.

DPS writes node caps there through `Managers/BMC/NodeManager/Domains/{id}` (AMI OEM), whose payloads
are not published (redfish.md §2.1, §6), and the GPUs' `GPU_SXM_n/EnvironmentMetrics` are read-only.
Every cap and workload-profile request is answered per component with "unsupported on this platform";
ping and metrics work as on any other BMC.
"""

from __future__ import annotations

from plugins.redfish._discovery import Discovery


def unsupported_message(discovery: Discovery, what: str, reason: str = "") -> str:
    """`<what>: unsupported on this platform (<model>, <platform>): <reason>`."""
    model = discovery.model or discovery.product or "this BMC"
    reason = reason or discovery.note or "the BMC offers no writable resource for it"
    return f"{what}: unsupported on this platform ({model}, {discovery.platform}): {reason}"
