"""The deprecated `Chassis/1/Power` resource (Power.v1_7_3) with a writable `PowerControl[0].PowerLimit`.

Still the only cap interface on many iDRAC9 / iLO / Supermicro firmwares. PATCH follows DSP0266 array
rules: `{}` leaves an element unchanged, `null` would remove it and a shorter array would drop the rest;
a BMC cannot remove its one PowerControl, so both are refused. `LimitInWatts: null` removes the cap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bmcsim import _errors, _messages
from bmcsim._dmtf_state import CHASSIS, NODE_LIMITS, SYSTEM, dmtf_state
from bmcsim._routing import (
    JsonDict,
    Reply,
    Route,
    SimRequest,
    Write,
    is_int,
    link,
    require_object,
)
from bmcsim._state import now, rounded

if TYPE_CHECKING:
    from bmcsim._routing import Bmc

POWER = f"{CHASSIS}/Power"
_EXCEPTIONS = ("NoAction", "HardPowerOff", "LogEventOnly", "Oem")
_PSU_CAPACITY_W = 1100
_CONTROL_READ_ONLY = frozenset(
    {"@odata.id", "MemberId", "Name", "PowerConsumedWatts", "PowerRequestedWatts", "PowerAvailableWatts"}
    | {"PowerCapacityWatts", "PowerAllocatedWatts", "PowerMetrics", "RelatedItem", "Status"}
)
_TOP_READ_ONLY = frozenset(
    {"@odata.id", "@odata.type", "@odata.etag", "Id", "Name", "PowerSupplies", "Voltages", "Redundancy"}
)


def _power(bmc: Bmc, req: SimRequest) -> Reply:
    state = dmtf_state(bmc)
    t = now()
    watts = state.readings(t)["node"]
    state.energy("node", watts, t)
    cap = state.node_cap
    control: JsonDict = {
        "@odata.id": f"{POWER}#/PowerControl/0",
        "MemberId": "0",
        "Name": "System Power Control",
        "PowerConsumedWatts": round(watts),
        "PowerRequestedWatts": NODE_LIMITS[1],
        "PowerCapacityWatts": NODE_LIMITS[1],
        "PowerAllocatedWatts": cap.set_point if cap.set_point is not None else NODE_LIMITS[1],
        "PowerAvailableWatts": max(0, NODE_LIMITS[1] - round(watts)),
        "PowerMetrics": {
            "IntervalInMin": 1,
            "MinConsumedWatts": round(watts * 0.92),
            "MaxConsumedWatts": round(min(watts * 1.02, cap.effective())),
            "AverageConsumedWatts": round(watts * 0.98),
        },
        "PowerLimit": {
            "LimitInWatts": cap.set_point,
            "LimitException": cap.limit_exception,
            "CorrectionInMs": cap.correction_ms,
        },
        "RelatedItem": [link(SYSTEM), link(CHASSIS)],
        "Status": {"State": "Enabled", "Health": "OK"},
    }
    supplies = [
        {
            "@odata.id": f"{POWER}#/PowerSupplies/{n}",
            "MemberId": str(n),
            "Name": f"Power Supply {n + 1}",
            "PowerSupplyType": "AC",
            "PowerCapacityWatts": _PSU_CAPACITY_W,
            "LastPowerOutputWatts": rounded(watts / 2),
            "Status": {"State": "Enabled", "Health": "OK"},
        }
        for n in range(2)
    ]
    layout = bmc.config.layout
    if "capacity-0" in layout:
        control["PowerCapacityWatts"] = 0  # "not reported", as in DMTF mockups
    if "no-bounds" in layout:
        del control["PowerCapacityWatts"]
    if "absent-readings" in layout:
        for key in ("PowerConsumedWatts", "PowerAvailableWatts", "PowerMetrics"):
            del control[key]
    body = {
        "@odata.id": POWER,
        "@odata.type": "#Power.v1_7_3.Power",
        "Id": "Power",
        "Name": "Power",
        "PowerControl": [control],
        "PowerSupplies": supplies,
    }
    return Reply(body=body, revision=cap.revision)


def _patch_power(bmc: Bmc, req: SimRequest) -> Write:
    cap = dmtf_state(bmc).node_cap
    patch = require_object(req.body)
    if not patch:
        raise _errors.empty_json()
    problems: list[JsonDict] = []
    changes: dict[str, Any] = {}
    for key, value in patch.items():
        if key == "PowerControl":
            problems += _parse_controls(value, cap.allow_min, cap.allow_max, changes)
        elif key in _TOP_READ_ONLY:
            problems.append(_messages.property_not_writable(key))
        else:
            problems.append(_messages.property_unknown(key))
    if problems:
        raise _errors.bad_request(problems)

    def apply() -> None:
        if "LimitInWatts" in changes:
            limit = changes["LimitInWatts"]
            cap.set_point = limit
            cap.control_mode = "Disabled" if limit is None else "Manual"
        if "LimitException" in changes:
            cap.limit_exception = changes["LimitException"]
        if "CorrectionInMs" in changes:
            cap.correction_ms = changes["CorrectionInMs"]

    return Write(apply=apply, caps=(cap,), deferrable=True)


def _parse_controls(value: Any, low: int, high: int, changes: dict[str, Any]) -> list[JsonDict]:
    if not isinstance(value, list):
        return [_messages.property_value_type_error(value, "PowerControl")]
    if len(value) != 1 or value[0] is None:
        # removing members (null, or a shorter array) or adding members: this BMC has exactly one
        return [_messages.property_value_incorrect("PowerControl", f"array of {len(value)}")]
    element = value[0]
    if not isinstance(element, dict):
        return [_messages.property_value_type_error(element, "PowerControl/0")]
    problems: list[JsonDict] = []
    for key, sub in element.items():
        prop = f"PowerControl/0/{key}"
        if key == "PowerLimit" and isinstance(sub, dict):
            problems += _parse_limit(sub, low, high, changes)
        elif key == "PowerLimit":
            problems.append(_messages.property_value_type_error(sub, prop))
        elif key in _CONTROL_READ_ONLY:
            problems.append(_messages.property_not_writable(prop))
        else:
            problems.append(_messages.property_unknown(prop))
    return problems


def _parse_limit(limit: JsonDict, low: int, high: int, changes: dict[str, Any]) -> list[JsonDict]:
    problems: list[JsonDict] = []
    for key, value in limit.items():
        prop = f"PowerControl/0/PowerLimit/{key}"
        if key == "LimitInWatts":
            if value is not None and not is_int(value):
                problems.append(_messages.property_value_type_error(value, prop))
            elif value is not None and not low <= value <= high:
                problems.append(_messages.property_value_out_of_range(value, prop, low, high))
            else:
                changes[key] = value
        elif key == "LimitException":
            if value not in _EXCEPTIONS:
                problems.append(_messages.property_value_not_in_list(value, prop))
            else:
                changes[key] = value
        elif key == "CorrectionInMs":
            if not is_int(value) or value < 0:
                problems.append(_messages.property_value_type_error(value, prop))
            else:
                changes[key] = value
        else:
            problems.append(_messages.property_unknown(prop))
    return problems


def power_routes() -> list[Route]:
    """The legacy Power route."""
    return [Route(POWER, get=_power, patch=_patch_power)]
