"""Generic DMTF servers (Dell/HPE/Supermicro/Lenovo-like): `Controls` and the legacy `Power` resource.

`dmtf` has `Chassis/1/Controls` (a node cap `PowerLimit` and per-CPU caps) and, for older clients, the
deprecated `Chassis/1/Power` whose `PowerControl[0].PowerLimit` shows the same node cap.
`dmtf-legacy` has only `Power`. The node cap starts disabled (`SetPoint`/`LimitInWatts` null).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bmcsim import _errors, _messages
from bmcsim._common import common_routes
from bmcsim._dmtf_power import power_routes
from bmcsim._dmtf_state import (
    CHASSIS,
    CPU_LIMITS,
    CPUS,
    NODE_CAP,
    NODE_LIMITS,
    SYSTEM,
    DmtfState,
    dmtf_state,
    legacy_state,
)
from bmcsim._layouts import dmtf_layout_routes
from bmcsim._routing import (
    JsonDict,
    Platform,
    Reply,
    Route,
    Router,
    SimRequest,
    Write,
    action_body,
    collection,
    is_int,
    link,
    require_object,
    status_ok,
)
from bmcsim._state import Cap, now, rounded

if TYPE_CHECKING:
    from bmcsim._routing import Bmc

CONTROLS = f"{CHASSIS}/Controls"
_RESET = "Control.ResetToDefaults"
_MODES = ("Automatic", "Override", "Manual", "Disabled")
_CONTROL_READ_ONLY = frozenset(
    {"@odata.id", "@odata.type", "@odata.etag", "Id", "Name", "AllowableMin", "AllowableMax", "Increment"}
    | {"DefaultSetPoint", "SetPointUnits", "SetPointType", "ControlType", "PhysicalContext", "Sensor"}
    | {"Status", "RelatedItem", "Actions", "Description"}
)


def has_controls(bmc: Bmc) -> bool:
    """Whether this model exposes `Controls` (dmtf) or only legacy `Power` (dmtf-legacy)."""
    return bmc.platform.name == "dmtf"


# --- Controls ----------------------------------------------------------------------------------------------


def _control_cap(bmc: Bmc, req: SimRequest) -> Cap:
    cap = dmtf_state(bmc).caps.get(req.params["id"])
    if cap is None:
        raise _errors.resource_not_found(req.path)
    return cap


def _controls(bmc: Bmc, req: SimRequest) -> Reply:
    members = [f"{CONTROLS}/{name}" for name in dmtf_state(bmc).caps]
    body = collection(CONTROLS, "#ControlCollection.ControlCollection", "Controls", members)
    return Reply(body=body, revision=0)


def _control(bmc: Bmc, req: SimRequest) -> Reply:
    cap = _control_cap(bmc, req)
    path = f"{CONTROLS}/{cap.name}"
    readings = dmtf_state(bmc).readings(now())
    is_node = cap.name == NODE_CAP
    body: JsonDict = {
        "@odata.id": path,
        "@odata.type": "#Control.v1_7_0.Control",
        "Id": cap.name,
        "Name": "System Power Limit" if is_node else f"{cap.name.split('_')[0]} Power Limit",
        "PhysicalContext": "Chassis" if is_node else "CPU",
        "ControlType": "Power",
        "SetPointType": "Single",
        "ControlMode": cap.control_mode,
        "SetPoint": cap.set_point,
        "SetPointUnits": "W",
        "AllowableMin": cap.allow_min,
        "AllowableMax": cap.allow_max,
        "Increment": cap.increment,
        "Sensor": {"Reading": rounded(readings["node" if is_node else cap.name.split("_")[0]])},
        "Status": status_ok(),
        "Actions": {f"#{_RESET}": {"target": f"{path}/Actions/{_RESET}"}},
        "ControlMode@Redfish.AllowableValues": list(_modes(bmc)),
    }
    layout = bmc.config.layout
    if "absent-readings" in layout:
        del body["Sensor"]
    if "no-bounds" in layout:
        del body["AllowableMin"], body["AllowableMax"]
    if is_node:
        body["RelatedItem"] = [link(CHASSIS)]
    else:
        body["DefaultSetPoint"] = cap.default
        body["RelatedItem"] = [link(f"{SYSTEM}/Processors/{cap.name.split('_')[0]}")]
    return Reply(body=body, revision=cap.revision)


def _patch_control(bmc: Bmc, req: SimRequest) -> Write:
    cap = _control_cap(bmc, req)
    patch = require_object(req.body)
    if not patch:
        raise _errors.empty_json()
    problems: list[JsonDict] = []
    for key in patch:
        if key in _CONTROL_READ_ONLY:
            problems.append(_messages.property_not_writable(key))
        elif key not in ("SetPoint", "ControlMode"):
            problems.append(_messages.property_unknown(key))
    mode = patch.get("ControlMode")
    if "ControlMode" in patch and mode not in _modes(bmc):
        problems.append(_messages.property_value_not_in_list(mode, "ControlMode"))
    has_sp = "SetPoint" in patch
    set_point: Any = patch.get("SetPoint")
    if has_sp and set_point is not None and not is_int(set_point):
        problems.append(_messages.property_value_type_error(set_point, "SetPoint"))
    elif has_sp and is_int(set_point) and not cap.in_range(set_point):
        problems.append(
            _messages.property_value_out_of_range(set_point, "SetPoint", cap.allow_min, cap.allow_max)
        )
    elif has_sp and set_point is None and mode not in (None, "Disabled"):
        # null and Disabled go together (Lenovo XCC rejects one without the other)
        problems.append(_messages.property_value_incorrect("ControlMode", mode))
    elif is_int(set_point) and mode == "Disabled":
        problems.append(_messages.property_value_incorrect("SetPoint", set_point))
    elif not has_sp and mode not in (None, "Disabled") and cap.set_point is None:
        problems.append(_messages.property_missing("SetPoint"))
    if problems:
        raise _errors.bad_request(problems)
    disable = mode == "Disabled" or (has_sp and set_point is None)

    def apply() -> None:
        if disable:
            cap.set_point, cap.control_mode = None, "Disabled"
            return
        if has_sp:
            cap.set_point = int(set_point)
        cap.control_mode = mode or ("Automatic" if bmc.config.control_quirk == "automatic" else "Manual")

    return Write(apply=apply, caps=(cap,), deferrable=True)


def _modes(bmc: Bmc) -> tuple[str, ...]:
    """ControlMode values this BMC accepts: HPE Cray EX style caps only in Automatic."""
    return ("Automatic", "Disabled") if bmc.config.control_quirk == "automatic" else _MODES


def _reset_control(bmc: Bmc, req: SimRequest) -> Write:
    cap = _control_cap(bmc, req)
    action_body(req.body, _RESET)

    def apply() -> None:
        cap.set_point = cap.default
        cap.control_mode = "Disabled" if cap.default is None else "Automatic"

    return Write(apply=apply, caps=(cap,), reply="success")


# --- chassis, system, processors, metrics ----------------------------------------------------------------


def _chassis(bmc: Bmc, req: SimRequest) -> Reply:
    body: JsonDict = {
        "@odata.id": CHASSIS,
        "@odata.type": "#Chassis.v1_23_0.Chassis",
        "Id": "1",
        "Name": "Computer System Chassis",
        "ChassisType": "RackMount",
        "Manufacturer": bmc.platform.vendor,
        "Model": bmc.platform.product,
        "PowerState": "On",
        "Status": status_ok(),
        "Power": link(f"{CHASSIS}/Power"),
        "MaxPowerWatts": NODE_LIMITS[1],
        "MinPowerWatts": NODE_LIMITS[0],
        "Links": {"ComputerSystems": [link(SYSTEM)], "ManagedBy": [link("/redfish/v1/Managers/1")]},
    }
    if has_controls(bmc):
        body["Controls"] = link(CONTROLS)
        if "no-em-link" not in bmc.config.layout:
            body["EnvironmentMetrics"] = link(f"{CHASSIS}/EnvironmentMetrics")
    if "multi-chassis" in bmc.config.layout:
        body["Links"]["ContainedBy"] = link("/redfish/v1/Chassis/Enclosure")
    return Reply(body=body, revision=0)


def _chassis_metrics(bmc: Bmc, req: SimRequest) -> Reply:
    if "no-em-link" in bmc.config.layout:
        raise _errors.resource_not_found(req.path)
    state, t = dmtf_state(bmc), now()
    watts = state.readings(t)["node"]
    body: JsonDict = {
        "@odata.id": f"{CHASSIS}/EnvironmentMetrics",
        "@odata.type": "#EnvironmentMetrics.v1_3_0.EnvironmentMetrics",
        "Id": "EnvironmentMetrics",
        "Name": "Chassis Environment Metrics",
        "PowerWatts": {"Reading": rounded(watts)},
        "EnergyJoules": {"Reading": rounded(state.energy("node", watts, t))},
        "TemperatureCelsius": {"Reading": rounded(22.0 + 10.0 * state.load("inlet", t))},
    }
    if "absent-readings" in bmc.config.layout:
        del body["PowerWatts"], body["EnergyJoules"]
    return Reply(body=body, revision=0)


def _system(bmc: Bmc, req: SimRequest) -> Reply:
    body = {
        "@odata.id": SYSTEM,
        "@odata.type": "#ComputerSystem.v1_22_0.ComputerSystem",
        "Id": "1",
        "Name": "System",
        "SystemType": "Physical",
        "Manufacturer": bmc.platform.vendor,
        "Model": bmc.platform.product,
        "PowerState": "On",
        "Status": status_ok(),
        "ProcessorSummary": {"Count": len(CPUS), "Model": "Contoso CPU"},
        "Processors": link(f"{SYSTEM}/Processors"),
        "Links": {"Chassis": [link(CHASSIS)], "ManagedBy": [link("/redfish/v1/Managers/1")]},
    }
    return Reply(body=body, revision=0)


def _processors(bmc: Bmc, req: SimRequest) -> Reply:
    path = f"{SYSTEM}/Processors"
    members = [f"{path}/{cpu}" for cpu in CPUS]
    body = collection(path, "#ProcessorCollection.ProcessorCollection", "Processors", members)
    return Reply(body=body, revision=0)


def _processor(bmc: Bmc, req: SimRequest) -> Reply:
    cpu = req.params["id"]
    if cpu not in CPUS:
        raise _errors.resource_not_found(req.path)
    body: dict[str, Any] = {
        "@odata.id": f"{SYSTEM}/Processors/{cpu}",
        "@odata.type": "#Processor.v1_20_0.Processor",
        "Id": cpu,
        "Name": f"Processor {cpu[-1]}",
        "ProcessorType": "CPU",
        "ProcessorArchitecture": "x86",
        "Manufacturer": "Contoso",
        "Model": "Contoso CPU",
        "TotalCores": 32,
        "TDPWatts": CPU_LIMITS[1],
        "Status": status_ok(),
    }
    return Reply(body=body, revision=0)


def _routes(with_controls: bool) -> list[Route]:
    routes = [
        *common_routes(),
        Route(SYSTEM, get=_system),
        Route(f"{SYSTEM}/Processors", get=_processors),
        Route(f"{SYSTEM}/Processors/{{id}}", get=_processor),
        Route(CHASSIS, get=_chassis),
        *power_routes(),
        *dmtf_layout_routes(),
    ]
    if with_controls:
        routes += [
            Route(CONTROLS, get=_controls),
            Route(f"{CONTROLS}/{{id}}", get=_control, patch=_patch_control),
            Route(f"{CONTROLS}/{{id}}/Actions/{_RESET}", post=_reset_control),
            Route(f"{CHASSIS}/EnvironmentMetrics", get=_chassis_metrics),
        ]
    return routes


PLATFORM = Platform(
    name="dmtf",
    topology_model="GENERIC_DMTF",
    vendor="Contoso",
    product="Contoso 1U Server",
    manager_id="1",
    default_firmware="2.18.0",
    router=Router(_routes(with_controls=True)),
    make_state=DmtfState,
    systems=("1",),
    chassis=("1",),
    description="DMTF server: Chassis/1/Controls (node + CPU caps) and legacy Chassis/1/Power",
)

LEGACY_PLATFORM = Platform(
    name="dmtf-legacy",
    topology_model="GENERIC_DMTF_LEGACY",
    vendor="Contoso",
    product="Contoso Legacy 1U Server",
    manager_id="1",
    default_firmware="1.60.0",
    router=Router(_routes(with_controls=False)),
    make_state=legacy_state,
    systems=("1",),
    chassis=("1",),
    description="older DMTF server: only the deprecated Chassis/1/Power PowerControl[0].PowerLimit",
)
