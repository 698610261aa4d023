"""Writes to a GB200 tray's NVIDIA EnvironmentMetrics: a PATCH validated the way NVIDIA bmcweb does
(only `PowerLimitWatts.SetPoint`, an integer, and, on a processor, `Oem.Nvidia.PowerLimitPersistency`),
and the writes that set the OOB set point or clear it (the `ClearOOBSetPoint` OEM action).

From NVIDIA/bmcweb@7f3a16ae `redfish-core/lib/environment_metrics.hpp`: a processor's PATCH reads
`PowerLimitWatts` and `Oem`, and in `Oem.Nvidia` only `EDPpPercent` and `PowerLimitPersistency`; the
persistency reaches only a GPU's set (`patchPowerLimit(..., "Processors", persistency)`), a CPU's is
read and dropped. A chassis' PATCH reads in `Oem.Nvidia` only `PowerMode`, which it refuses as not
writable. Any other key is unknown to `json_util::readJson` (PropertyUnknown). A set point writes
the D-Bus `PowerCap` alone: nothing sets the ControlMode a GET shows (`PowerCapEnable`, `Control.Mode`).
A value the power manager refuses (`InvalidArgument`) is answered PropertyValueIncorrect naming
`setpoint` (`nvidia_async_set_callbacks.hpp`, `PatchPowerCapCallback`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bmcsim import _errors, _messages
from bmcsim._routing import JsonDict, Write, is_int, require_object
from bmcsim._state import Cap

#: what each kind of resource's PATCH reads in `Oem.Nvidia` (the rest is unknown)
PROCESSOR_OEM = frozenset({"PowerLimitPersistency", "EDPpPercent"})
CHASSIS_OEM = frozenset({"PowerMode"})


def parse_patch(
    body: Any, in_range: Callable[[int], bool], oem: frozenset[str] = PROCESSOR_OEM
) -> tuple[int, bool | None]:
    """Validate a PATCH the way NVIDIA bmcweb does (`oem`: the `Oem.Nvidia` keys its resource
    reads; `in_range`: whether the power manager takes a set point); returns (SetPoint,
    PowerLimitPersistency)."""
    patch = require_object(body)
    if not patch:
        raise _errors.empty_json()
    problems: list[JsonDict] = []
    set_point: Any = None
    persistent: bool | None = None
    for key, value in patch.items():
        if key == "PowerLimitWatts" and isinstance(value, dict):
            for sub, sub_value in value.items():
                prop = f"PowerLimitWatts/{sub}"
                if sub == "SetPoint":
                    set_point = sub_value
                else:  # bmcweb parses only SetPoint here (ControlMode and the read-only ones too)
                    problems.append(_messages.property_unknown(prop))
        elif key == "PowerLimitWatts":
            problems.append(_messages.property_value_type_error(value, key))
        elif key == "Oem" and isinstance(value, dict) and set(value) <= {"Nvidia"}:
            nvidia = value.get("Nvidia", {})
            for sub, sub_value in nvidia.items() if isinstance(nvidia, dict) else ():
                if sub not in oem:
                    problems.append(_messages.property_unknown("Oem/Nvidia/" + sub))
                elif sub == "PowerMode":
                    problems.append(_messages.property_not_writable("PowerMode"))
                elif sub == "PowerLimitPersistency" and isinstance(sub_value, bool):
                    persistent = sub_value
                elif sub == "PowerLimitPersistency":
                    problems.append(_messages.property_value_type_error(sub_value, "Oem/Nvidia/" + sub))
                else:  # EDPpPercent: a setting this model does not have (bmcweb takes it)
                    problems.append(_messages.property_not_writable("Oem/Nvidia/" + sub))
        else:  # `json_util::readJson` knows no other key, read-only or not (json_utils.hpp)
            problems.append(_messages.property_unknown(key))
    if set_point is None and not problems:
        problems.append(_messages.property_missing("PowerLimitWatts/SetPoint"))
    elif set_point is not None and not is_int(set_point):
        problems.append(_messages.property_value_type_error(set_point, "PowerLimitWatts/SetPoint"))
    elif set_point is not None and not in_range(set_point):
        problems.append(_messages.property_value_incorrect("setpoint", set_point))
    if problems:
        raise _errors.bad_request(problems)
    return int(set_point), persistent


def cap_write(cap: Cap, set_point: int, persistent: bool | None) -> Write:
    """Set the OOB set point (deferrable: a task when asynchronous writes are on)."""

    def apply() -> None:
        cap.set_point = set_point
        cap.oob_active = True
        cap.persistent = bool(persistent)

    return Write(apply=apply, caps=(cap,), deferrable=True)


def clear_write(cap: Cap) -> Write:
    """`ClearOOBSetPoint`: back to the default set point, under automatic control."""

    def apply() -> None:
        cap.set_point = cap.default
        cap.oob_active = False
        cap.persistent = None

    return Write(apply=apply, caps=(cap,), reply="success")
