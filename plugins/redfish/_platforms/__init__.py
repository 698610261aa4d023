"""Platforms and cap mechanisms: which platform a BMC is, and how one component's power limit is read,
set, cleared and restored. A platform is one module declaring a `Platform` (`platform`: the evidence
it matches, how it writes and restores, its quirks, its probe); `registry` lists them in probing order
and hands discovery the first that matches, so discovery imports no platform by name.

Three standard shapes exist (redfish.md §1): NVIDIA/DMTF `EnvironmentMetrics.PowerLimitWatts`
(`environment_metrics`), DMTF `Control` resources (`controls`) and the deprecated
`Chassis/{id}/Power` `PowerControl[].PowerLimit` (`legacy_power`); HPE Apollo 6500's OEM
`AccPowerService` (`hpe_acc`). `classify` decides which component a Control limits.
Each module here turns a resource into a `LimitReading` and builds the request that changes it;
`plugins.redfish._capping.caps` runs the requests (ETag, 412, 0x600 and read-back handling are shared).
`nvidia_hgx` places an NVIDIA HGX tray's EnvironmentMetrics limits on the scope their evidence
proves (a processor module's limit is a CPU cap, a group budget or, only where proven, a node share).
`nvidia_no_limit` names an NVIDIA HGX board that offers no limit (a DGX H100 host BMC, an HGX
board's own BMC) by its evidence and refuses every cap there with why.
`gate` is the one write gate every cap write passes (only a limit the resource's last GET carries).
`node_manager` explains why Node Manager platforms are not supported yet.
"""

from __future__ import annotations

from plugins.redfish._discovery.layout import MECH_CONTROL, MECH_EM, MECH_HPE_ACC, MECH_LEGACY, Component
from plugins.redfish._platforms._base import CapRequest, LimitReading, Mechanism, Prior
from plugins.redfish._platforms.controls import ControlMechanism
from plugins.redfish._platforms.environment_metrics import EnvironmentMetricsMechanism
from plugins.redfish._platforms.hpe_acc import HpeAccPowerLimitMechanism
from plugins.redfish._platforms.legacy_power import LegacyPowerMechanism
from plugins.redfish._platforms.node_manager import unsupported_message

_MECHANISMS: dict[str, Mechanism] = {
    MECH_EM: EnvironmentMetricsMechanism(),
    MECH_CONTROL: ControlMechanism(),
    MECH_LEGACY: LegacyPowerMechanism(),
    MECH_HPE_ACC: HpeAccPowerLimitMechanism(),
}


def mechanism_for(component: Component) -> Mechanism | None:
    """The mechanism that writes this component's cap, or None when it has none."""
    return _MECHANISMS.get(component.mechanism)


__all__ = [
    "CapRequest",
    "ControlMechanism",
    "EnvironmentMetricsMechanism",
    "LegacyPowerMechanism",
    "LimitReading",
    "Mechanism",
    "Prior",
    "mechanism_for",
    "unsupported_message",
]
