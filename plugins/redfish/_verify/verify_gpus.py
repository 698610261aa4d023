"""The GPU checks of a verification: workload power profiles readable, and in-band vs out-of-band limits.

The in-band limits come from the controller (the NVML plugin's enforced limit of the GPUs an
inventory option links to this node); this module only compares them with what the BMC holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plugins.base import DeviceControllerError
from plugins.base.health import FAIL, PASS, SKIP, WARN, HealthCheck
from plugins.redfish._capping.profiles import parse_mask, to_ids
from plugins.redfish._device.device import Device
from plugins.redfish._platforms import mechanism_for
from plugins.redfish._wire.errors import ResourceNotFoundError

#: NVML reports milliwatts and BMCs whole watts: closer than this is the same limit
SAME_WATTS = 1.0


async def profiles(device: Device) -> HealthCheck:
    """The workload power profiles of every GPU that links them (NVIDIA WPPS), readable."""
    gpus = [g for g in device.discovery.gpus if g.wpps_uri]
    if not gpus:
        return HealthCheck("profiles", SKIP, "the BMC links no workload power profiles")
    masks: dict[str, Any] = {}
    errors: list[str] = []
    absent: list[str] = []
    for gpu in gpus:
        try:
            doc = await device.bmc.get(gpu.wpps_uri)
            masks[gpu.key] = {
                "requested": to_ids(parse_mask(doc.get("RequestedProfileMask"))),
                "enforced": to_ids(parse_mask(doc.get("EnforcedProfileMask"))),
            }
        except ResourceNotFoundError as exc:
            absent.append(f"{gpu.label}: linked but absent ({exc.status} at {gpu.wpps_uri})")
        except (DeviceControllerError, ValueError) as exc:
            errors.append(f"{gpu.label}: {exc}")
    evidence = {"gpus": masks, "absent": absent}
    if absent and not errors:
        return HealthCheck("profiles", WARN, "; ".join(absent), evidence)
    if errors:
        return HealthCheck("profiles", FAIL, "; ".join(errors), evidence)
    return HealthCheck("profiles", PASS, f"{len(masks)} GPU(s) with readable profiles", evidence)


async def inband(device: Device, limits: Mapping[int, float]) -> HealthCheck:
    """The GPU limits the host enforces (NVML) against the BMC's: equal, or both values flagged."""
    if not limits:
        return HealthCheck("inband", SKIP, "no in-band GPU limits given (no linked NVML device)")
    by_index = {g.index: g for g in device.discovery.gpus}
    pairs: dict[str, Any] = {}
    differ: list[str] = []
    for index, nvml in sorted(limits.items()):
        comp = by_index.get(index)
        oob: float | None = None
        mech = mechanism_for(comp) if comp is not None else None
        if comp is not None and mech is not None:
            try:
                oob = mech.parse(comp, await device.bmc.get(comp.limit_uri)).watts
            except DeviceControllerError as exc:
                differ.append(f"GPU {index}: NVML enforces {nvml:g} W, the BMC's limit is unreadable ({exc})")
                pairs[str(index)] = {"nvml_watts": nvml, "bmc_watts": None}
                continue
        pairs[str(index)] = {"nvml_watts": nvml, "bmc_watts": oob}
        if comp is None:
            differ.append(f"GPU {index}: NVML enforces {nvml:g} W, the BMC shows no GPU {index}")
        elif oob is None:
            differ.append(f"GPU {index}: NVML enforces {nvml:g} W, the BMC shows no limit")
        elif abs(oob - nvml) > SAME_WATTS:
            differ.append(f"GPU {index}: NVML enforces {nvml:g} W, the BMC holds {oob:g} W")
    if differ:
        # NOTE: a warning, not a failure: which side is right is for the operator (an in-band
        # nvidia-smi -pl, or an out-of-band cap the host never saw, llnl/variorum#445)
        return HealthCheck("inband", WARN, "; ".join(dict.fromkeys(differ)), {"gpus": pairs})
    return HealthCheck(
        "inband", PASS, f"{len(pairs)} GPU limit(s) agree in band and out of band", {"gpus": pairs}
    )
