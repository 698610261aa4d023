"""Vendor write behaviour for served captures (`mockup:DIR`), matched by what each document shows.

A capture holds what the firmware answered to GETs; how it takes writes comes from the vendor's own
code, cited per rule:

- HPE Cray EX node controllers (a `Control` with the non-DMTF `SettingRangeMin`/`SettingRangeMax`
  and an `Oem/Hpe` block): HPE's emulator of that firmware, Cray-HPE/csm-redfish-interface-emulator
  `src/api_emulator/redfish/hpe_cray_ex_power_control_api.py` (`applyControlPatch`): a SetPoint must
  be 0 or within SettingRangeMin..Max, `ControlMode: Disabled` sets it to 0, another mode without a
  SetPoint sets SettingRangeMax, any other property is refused, a PATCH that leaves the control
  Disabled is refused; a null SetPoint fails its range comparison (an internal error, 500). HPE's
  power service writes `{"SetPoint": N, "ControlMode": "Automatic"}` and `{"ControlMode":
  "Disabled"}` (Cray-HPE/hms-power-control `internal/domain/power-cap.go`, `generatePowerCapPayload`).
- HPE Apollo 6500 `HpeServerAccPowerLimit.ConfigurePowerLimit`: the body is
  `{"PowerLimits": [{"PowerLimitInWatts": N, "ZoneNumber": 0}]}` (the same `power-cap.go`); the
  zone's `PowerLimitRanges` bound it when they are not 0 (0 means not reported).
- OpenBMC bmcweb with power capping disabled shows `PowerLimit` without `LimitInWatts` and answers a
  `LimitInWatts` PATCH with `ActionNotSupported` (openbmc/bmcweb `redfish-core/lib/power.hpp`).
- `LimitException` takes the DMTF `PowerLimitException` values only (Power.v1 schema).
"""

from __future__ import annotations

from typing import Any

from bmcsim import _errors, _messages
from bmcsim._routing import JsonDict, is_int

ACC_ACTION = "HpeServerAccPowerLimit.ConfigurePowerLimit"
LIMIT_EXCEPTIONS = ("NoAction", "HardPowerOff", "LogEventOnly", "Oem")


def is_cray_ex_control(doc: JsonDict) -> bool:
    """A Control in HPE Cray EX form (SettingRange bounds, HPE OEM block)."""
    oem = doc.get("Oem")
    return "SettingRangeMax" in doc and isinstance(oem, dict) and "Hpe" in oem


def cray_ex_control_patch(doc: JsonDict, changes: JsonDict) -> JsonDict:
    """The Control after a PATCH, as HPE's EX emulator computes it; raises its errors."""
    mode, set_point = doc.get("ControlMode"), doc.get("SetPoint")
    if mode == "Disabled" and changes.get("ControlMode", "Disabled") == "Disabled":
        raise _errors.bad_request([_messages.property_value_incorrect("ControlMode", "Disabled")])
    for key, value in changes.items():
        if key == "SetPoint":
            if value is None or isinstance(value, bool) or not is_int(value):
                # NOTE: HPE's emulator compares the value with the range: null fails there (500)
                raise _errors.internal_error()
            low, high = doc.get("SettingRangeMin", 0), doc.get("SettingRangeMax", 0)
            if value != 0 and not low <= value <= high:
                raise _errors.bad_request([_messages.property_value_out_of_range(value, key, low, high)])
            set_point = 0 if changes.get("ControlMode") == "Disabled" else value
        elif key == "ControlMode":
            mode = value
            if value == "Disabled":
                set_point = 0
            elif "SetPoint" not in changes:
                set_point = doc.get("SettingRangeMax")
        elif key != "@odata.id":
            raise _errors.bad_request([_messages.property_unknown(key)])
    return {"SetPoint": set_point, "ControlMode": mode}


def capping_disabled(current: JsonDict, changes: JsonDict) -> bool:
    """A legacy `PowerLimit/LimitInWatts` write where the firmware shows no LimitInWatts (bmcweb)."""
    controls, wanted = current.get("PowerControl"), changes.get("PowerControl")
    if not isinstance(controls, list) or not isinstance(wanted, list):
        return False
    for have, want in zip(controls, wanted, strict=False):
        limit = have.get("PowerLimit") if isinstance(have, dict) else None
        asked = want.get("PowerLimit") if isinstance(want, dict) else None
        if isinstance(limit, dict) and isinstance(asked, dict) and "LimitInWatts" in asked:
            if "LimitInWatts" not in limit:
                return True
    return False


def limit_exception_problems(changes: Any, prefix: str = "") -> list[JsonDict]:
    """`LimitException` values that are not DMTF `PowerLimitException` members."""
    problems: list[JsonDict] = []
    if isinstance(changes, dict):
        for key, value in changes.items():
            if key == "LimitException" and value not in LIMIT_EXCEPTIONS:
                problems.append(_messages.property_value_not_in_list(value, f"{prefix}{key}"))
            else:
                problems += limit_exception_problems(value, f"{prefix}{key}/")
    elif isinstance(changes, list):
        for index, item in enumerate(changes):
            problems += limit_exception_problems(item, f"{prefix}{index}/")
    return problems


def configure_acc_power_limit(doc: JsonDict, params: JsonDict) -> list[tuple[int, int]]:
    """(index, watts) changes for Apollo 6500's ConfigurePowerLimit; raises its errors."""
    limits = params.get("PowerLimits")
    if not isinstance(limits, list) or not limits:
        raise _errors.bad_request([_messages.action_parameter_missing(ACC_ACTION, "PowerLimits")])
    current = doc.get("PowerLimits") or []
    zones = {z.get("ZoneNumber"): i for i, z in enumerate(current) if isinstance(z, dict)}
    ranges = {r.get("ZoneNumber"): r for r in doc.get("PowerLimitRanges") or [] if isinstance(r, dict)}
    out: list[tuple[int, int]] = []
    for item in limits:
        watts = item.get("PowerLimitInWatts") if isinstance(item, dict) else None
        zone = item.get("ZoneNumber") if isinstance(item, dict) else None
        if zone not in zones or not isinstance(watts, int) or isinstance(watts, bool):
            raise _errors.bad_request([_messages.action_parameter_value_error(item, ACC_ACTION)])
        bounds = ranges.get(zone) or {}
        low, high = bounds.get("MinimumPowerLimit") or 0, bounds.get("MaximumPowerLimit") or 0
        if high and not low <= watts <= high:
            problem = _messages.property_value_out_of_range(watts, "PowerLimitInWatts", low, high)
            raise _errors.bad_request([problem])
        out.append((zones[zone], watts))
    return out
