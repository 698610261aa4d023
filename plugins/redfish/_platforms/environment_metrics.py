"""`EnvironmentMetrics.PowerLimitWatts`: NVIDIA GB200/GB300/B200EM/B300EM per-component caps.

Set: `PATCH …/EnvironmentMetrics {"PowerLimitWatts": {"SetPoint": <int>}}` on
`Systems/HGX_Baseboard_0/Processors/{GPU_n|CPU_n}` and `Chassis/HGX_ProcessorModule_n`.
Clear: the `ClearOOBSetPoint` OEM action where advertised, else `SetPoint = DefaultSetPoint`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plugins.redfish._client import Document
from plugins.redfish._discovery import MECH_EM, Component
from plugins.redfish._platforms._base import CapRequest, LimitReading, Mechanism, number

CLEAR_OOB = "NvidiaEnvironmentMetrics.ClearOOBSetPoint"


class EnvironmentMetricsMechanism(Mechanism):
    """Caps in `EnvironmentMetrics.PowerLimitWatts` (a `ControlSingleExcerpt`)."""

    name = MECH_EM

    def parse(self, component: Component, doc: Document) -> LimitReading:
        limit = doc.get("PowerLimitWatts")
        if not isinstance(limit, Mapping):
            limit = {}
        set_point = number(limit.get("SetPoint"))
        default = number(limit.get("DefaultSetPoint"))
        mode = limit.get("ControlMode")
        return LimitReading(
            watts=set_point,
            capped=_oob_active(doc.body, set_point, default, mode),
            min_watts=number(limit.get("AllowableMin")),
            max_watts=number(limit.get("AllowableMax")),
            default_watts=default,
            mode=str(mode) if mode is not None else None,
            power_watts=number(limit.get("Reading")) or _reading(doc.body, "PowerWatts"),
            etag=doc.etag,
        )

    def set_request(self, component: Component, watts: int, current: LimitReading) -> CapRequest:
        # NOTE: NVIDIA bmcweb parses only SetPoint inside PowerLimitWatts (a ControlMode there is
        # rejected as unknown), and only integers (redfish.md §2.2, NVIDIA/bmcweb environment_util.hpp).
        return CapRequest("PATCH", component.limit_uri, {"PowerLimitWatts": {"SetPoint": int(watts)}})

    def clear_request(self, component: Component, current: LimitReading, doc: Document) -> CapRequest:
        target = _clear_target(doc.body)
        if target:
            # NOTE: NVIDIA clears an out-of-band set point with an OEM action, not with a PATCH
            # (redfish.md §2.2, NVIDIA/bmcweb environment_metrics.hpp).
            return CapRequest("POST", target, {}, if_match=False)
        if current.default_watts is not None:
            return self.set_request(component, round(current.default_watts), current)
        return CapRequest("PATCH", component.limit_uri, {"PowerLimitWatts": {"ControlMode": "Disabled"}})


def _oob_active(body: Mapping[str, Any], set_point: float | None, default: float | None, mode: Any) -> bool:
    """Whether an out-of-band cap is in force (vs the firmware default)."""
    if set_point is None:
        return False
    oem = (body.get("Oem") or {}).get("Nvidia") if isinstance(body.get("Oem"), Mapping) else None
    if isinstance(oem, Mapping):
        # NOTE: NVIDIA shows the OOB request in RequestedPersistent/OneshotPowerLimitWatts and
        # PowerMode "Custom" (NVIDIA/bmcweb NvidiaEnvironmentMetrics_v1.xml); ControlMode is derived
        # from D-Bus PowerCapEnable and only informational (redfish.md §2.2).
        if oem.get("RequestedPersistentPowerLimitWatts") is not None:
            return True
        if oem.get("RequestedOneshotPowerLimitWatts") is not None:
            return True
        if "PowerMode" in oem:
            return str(oem.get("PowerMode")) == "Custom"
    if mode in ("Manual", "Override"):
        return True
    if mode == "Disabled":
        return False
    return default is not None and abs(set_point - default) > 0.5


def _clear_target(body: Mapping[str, Any]) -> str:
    actions = body.get("Actions")
    oem = actions.get("Oem") if isinstance(actions, Mapping) else None
    if isinstance(oem, Mapping):
        entry = oem.get(f"#{CLEAR_OOB}")
        if isinstance(entry, Mapping) and isinstance(entry.get("target"), str):
            return str(entry["target"])
    return ""


def _reading(body: Mapping[str, Any], name: str) -> float | None:
    value = body.get(name)
    return number(value.get("Reading")) if isinstance(value, Mapping) else None
