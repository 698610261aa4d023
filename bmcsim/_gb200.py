"""A synthetic writable tray shaped like NVIDIA's GB200 NVL (DPS model DGX_GB200): per-component
EnvironmentMetrics caps on GPUs, CPUs and modules.

NOT what GB200 firmware serves: real GB200 NVL compute-tray firmware shows no module limit (and, on
some firmware, no GPU limit); that truth is the `gb200-nvl` mockups (bmcsim/mockups, with sources).
This model stays as the generic writable node of the controller's tests.

Two superchip modules, each one Grace CPU and two GPUs: CPU_n, GPU_2n and GPU_2n+1 sit in
HGX_ProcessorModule_n. Limits follow the GB200 device spec (dps.md §4): GPU 200..1200 W, Grace 50..420 W,
node 1000..6667 W; a module's bounds are the sums of its parts (450..2820 W). As on NVIDIA bmcweb, only
`PowerLimitWatts.SetPoint` (an integer) is accepted in a PATCH, and the OOB set point is cleared with
the `NvidiaEnvironmentMetrics.ClearOOBSetPoint` OEM action. What NVIDIA bmcweb (NVIDIA/bmcweb@7f3a16ae,
`environment_metrics.hpp`, `environment_util.hpp`, `nvidia_async_set_callbacks.hpp`) does and this
model follows: a set point leaves the ControlMode shown as it was; only GPUs show and keep
`Oem.Nvidia.PowerLimitPersistency` and the requested limits (a CPU's persistency is dropped, a
module's refused as unknown); a refused value is PropertyValueIncorrect (`_gb200_writes`). Where it
differs, for the controller's tests: its Grace CPUs offer a default and a clear action (a captured
GB300 tray's show neither), EDPp is not modelled, and the range is checked at once, never in a task.
Its Grace CPU limits name no Control (`DataSourceUri`), where NVIDIA's bmcweb names the CPU's
non-volatile one on every CPU limit it shows (environment_util.hpp `getCpuPowerCapData`): so they take
the generic EnvironmentMetrics path of any vendor, and NVIDIA's non-volatile CPU rule is tested on the
GB300 capture (tests/corpus/redfish/nvidia-gb300-nvl), never on this model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bmcsim import _errors
from bmcsim._common import common_routes, firmware_routes
from bmcsim._gb200_writes import CHASSIS_OEM, PROCESSOR_OEM, cap_write, clear_write, parse_patch
from bmcsim._layouts import gb200_layout_routes
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
    link,
    status_ok,
)
from bmcsim._state import Cap, PlatformState, now, rounded
from bmcsim._wpps import ProfileState, wpps_routes

if TYPE_CHECKING:
    from bmcsim._routing import Bmc

SYSTEM = "/redfish/v1/Systems/HGX_Baseboard_0"
PROCESSORS = f"{SYSTEM}/Processors"
CHASSIS = "/redfish/v1/Chassis"
GPUS = tuple(f"GPU_{n}" for n in range(4))
CPUS = tuple(f"CPU_{n}" for n in range(2))
MODULES = tuple(f"HGX_ProcessorModule_{n}" for n in range(2))
NODE_CHASSIS = ("Chassis_0", "HGX_Chassis_0")
GPU_LIMITS, CPU_LIMITS, NODE_LIMITS = (200, 1200), (50, 420), (1000, 6667)
MODULE_LIMITS = (CPU_LIMITS[0] + 2 * GPU_LIMITS[0], CPU_LIMITS[1] + 2 * GPU_LIMITS[1])
# fans, NICs, DPUs and memory that no component cap covers
_TRAY_OVERHEAD_W = 180.0
_CLEAR_OOB = "NvidiaEnvironmentMetrics.ClearOOBSetPoint"


def module_members(module: str) -> tuple[str, ...]:
    """Processors inside a superchip module."""
    n = int(module.rsplit("_", 1)[1])
    return (f"CPU_{n}", f"GPU_{2 * n}", f"GPU_{2 * n + 1}")


class Gb200State(PlatformState):
    """Caps of 4 GPUs, 2 CPUs and 2 modules (all start uncapped at their default) and GPU profiles."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        for names, (low, high) in ((GPUS, GPU_LIMITS), (CPUS, CPU_LIMITS), (MODULES, MODULE_LIMITS)):
            for name in names:
                self.caps[name] = Cap(name, low, high, set_point=high, default=high)
        self.profiles = {gpu: ProfileState() for gpu in GPUS}

    def readings(self, t: float) -> dict[str, float]:
        """Power of every component, module and chassis at time `t`, each under its cap."""
        power = {name: self.caps[name].effective() * self.load(name, t) for name in GPUS + CPUS}
        for module in MODULES:
            members = module_members(module)
            total = sum(power[m] for m in members)
            ceiling = 0.97 * self.caps[module].effective()
            if total > ceiling:
                for m in members:
                    power[m] *= ceiling / total
            power[module] = sum(power[m] for m in members)
        power["HGX_Chassis_0"] = sum(power[m] for m in MODULES)
        power["Chassis_0"] = min(power["HGX_Chassis_0"] + _TRAY_OVERHEAD_W, 0.97 * NODE_LIMITS[1])
        return power

    def describe(self) -> dict[str, Any]:
        """Caps plus profile masks."""
        described = super().describe()
        described["profiles"] = {gpu: p.to_dict() for gpu, p in self.profiles.items()}
        return described


def _state(bmc: Bmc) -> Gb200State:
    assert isinstance(bmc.state, Gb200State)
    return bmc.state


# --- EnvironmentMetrics (processors and chassis) ----------------------------------------------------------


def _metrics_doc(bmc: Bmc, path: str, component: str, cap: Cap | None) -> Reply:
    state, t = _state(bmc), now()
    watts = state.readings(t)[component]
    scale = cap.allow_max if cap is not None else NODE_LIMITS[1]
    body: JsonDict = {
        "@odata.id": path,
        "@odata.type": "#EnvironmentMetrics.v1_3_0.EnvironmentMetrics",
        "Id": "EnvironmentMetrics",
        "Name": f"{component} Environment Metrics",
        "PowerWatts": {"Reading": rounded(watts)},
        "EnergyJoules": {"Reading": rounded(state.energy(component, watts, t))},
        "TemperatureCelsius": {"Reading": rounded(28.0 + 50.0 * watts / scale)},
    }
    absent = "absent-readings" in bmc.config.layout
    if absent:
        del body["PowerWatts"], body["EnergyJoules"]
    if cap is None:
        return Reply(body=body, revision=0)
    body["PowerLimitWatts"] = {
        "SetPoint": cap.set_point,
        "AllowableMin": cap.allow_min,
        "AllowableMax": cap.allow_max,
        "DefaultSetPoint": cap.default,
        "ControlMode": cap.control_mode,
        "Reading": rounded(watts),
    }
    if absent:
        del body["PowerLimitWatts"]["Reading"]
    # no PowerMode: NVIDIA bmcweb shows it on chassis only, as the D-Bus power mode, which a set
    # point does not change (chassis_utils.hpp `getPowerModeType`, environment_util.hpp)
    nvidia: JsonDict = {"@odata.type": "#NvidiaEnvironmentMetrics.v1_2_0.NvidiaEnvironmentMetrics"}
    if component in GPUS:
        # the persistency and the requested limits only where the object has D-Bus
        # `Control.Power.Persistency` (environment_util.hpp `getProcessorEnvironmentMetricsData`):
        # a captured GB300 tray's GPUs show them, its Grace CPUs and processor modules do not
        requested = cap.set_point if cap.oob_active else None
        nvidia = {
            "@odata.type": "#NvidiaEnvironmentMetrics.v1_3_0.NvidiaEnvironmentMetrics",
            "PowerLimitPersistency": bool(cap.persistent),
            "RequestedPersistentPowerLimitWatts": requested if cap.persistent else None,
            "RequestedOneshotPowerLimitWatts": None if cap.persistent else requested,
        }
    body["Oem"] = {"Nvidia": nvidia}
    body["Actions"] = {"Oem": {f"#{_CLEAR_OOB}": {"target": f"{path}/Actions/Oem/{_CLEAR_OOB}"}}}
    return Reply(body=body, revision=cap.revision)


def _processor_cap(bmc: Bmc, req: SimRequest) -> Cap:
    proc = req.params["id"]
    if proc not in GPUS + CPUS:
        raise _errors.resource_not_found(req.path)
    return _state(bmc).caps[proc]


def _module_cap(bmc: Bmc, req: SimRequest, method: str) -> Cap:
    chassis = req.params["id"]
    if chassis in MODULES:
        return _state(bmc).caps[chassis]
    if chassis in NODE_CHASSIS:
        raise _errors.method_not_allowed(method, ["GET", "HEAD"])
    raise _errors.resource_not_found(req.path)


def _get_proc_metrics(bmc: Bmc, req: SimRequest) -> Reply:
    cap = _processor_cap(bmc, req)
    return _metrics_doc(bmc, req.path, req.params["id"], cap)


def _patch_proc_metrics(bmc: Bmc, req: SimRequest) -> Write:
    cap = _processor_cap(bmc, req)
    set_point, persistent = parse_patch(req.body, cap.in_range, PROCESSOR_OEM)
    # a CPU's persistency is read and dropped (environment_metrics.hpp, the processor PATCH)
    return cap_write(cap, set_point, persistent if req.params["id"] in GPUS else None)


def _clear_proc(bmc: Bmc, req: SimRequest) -> Write:
    cap = _processor_cap(bmc, req)
    action_body(req.body, _CLEAR_OOB)
    return clear_write(cap)


def _get_chassis_metrics(bmc: Bmc, req: SimRequest) -> Reply:
    chassis = req.params["id"]
    if chassis in MODULES:
        return _metrics_doc(bmc, req.path, chassis, _state(bmc).caps[chassis])
    if chassis in NODE_CHASSIS:
        return _metrics_doc(bmc, req.path, chassis, None)
    raise _errors.resource_not_found(req.path)


def _patch_chassis_metrics(bmc: Bmc, req: SimRequest) -> Write:
    cap = _module_cap(bmc, req, "PATCH")
    return cap_write(cap, parse_patch(req.body, cap.in_range, CHASSIS_OEM)[0], None)


def _clear_chassis(bmc: Bmc, req: SimRequest) -> Write:
    cap = _module_cap(bmc, req, "POST")
    action_body(req.body, _CLEAR_OOB)
    return clear_write(cap)


# --- inventory: system, processors, chassis -------------------------------------------------------------


def _system(bmc: Bmc, req: SimRequest) -> Reply:
    body = {
        "@odata.id": SYSTEM,
        "@odata.type": "#ComputerSystem.v1_22_0.ComputerSystem",
        "Id": "HGX_Baseboard_0",
        "Name": "HGX_Baseboard_0",
        "SystemType": "Physical",
        "Manufacturer": "NVIDIA",
        "Model": "GB200 NVL",
        "PowerState": "On",
        "Status": status_ok(),
        "Processors": link(PROCESSORS),
        "Links": {
            "Chassis": [link(f"{CHASSIS}/HGX_Chassis_0")],
            "ManagedBy": [link("/redfish/v1/Managers/BMC")],
        },
    }
    return Reply(body=body, revision=0)


def _processors(bmc: Bmc, req: SimRequest) -> Reply:
    members = [f"{PROCESSORS}/{p}" for p in GPUS + CPUS]
    body = collection(PROCESSORS, "#ProcessorCollection.ProcessorCollection", "Processors", members)
    return Reply(body=body, revision=0)


def _processor(bmc: Bmc, req: SimRequest) -> Reply:
    proc = req.params["id"]
    cap = _processor_cap(bmc, req)
    module = f"HGX_ProcessorModule_{int(proc.rsplit('_', 1)[1]) // (2 if proc in GPUS else 1)}"
    body: JsonDict = {
        "@odata.id": f"{PROCESSORS}/{proc}",
        "@odata.type": "#Processor.v1_20_0.Processor",
        "Id": proc,
        "Name": proc,
        "Manufacturer": "NVIDIA",
        "Status": status_ok(),
        "MaxTDPWatts": cap.allow_max,
        "EnvironmentMetrics": link(f"{PROCESSORS}/{proc}/EnvironmentMetrics"),
        "Links": {"Chassis": link(f"{CHASSIS}/{module}")},
    }
    if proc in GPUS:
        body.update(ProcessorType="GPU", Model="GB200")
        body["Oem"] = {
            "Nvidia": {
                "@odata.type": "#NvidiaProcessor.v1_4_0.NvidiaGPU",
                "WorkloadPowerProfile": link(f"{PROCESSORS}/{proc}/Oem/Nvidia/WorkloadPowerProfile"),
            }
        }
    else:
        body.update(ProcessorType="CPU", Model="Grace", ProcessorArchitecture="ARM", TotalCores=72)
    return Reply(body=body, revision=0)


def _chassis(bmc: Bmc, req: SimRequest) -> Reply:
    cid = req.params["id"]
    if cid not in MODULES + NODE_CHASSIS:
        raise _errors.resource_not_found(req.path)
    body: JsonDict = {
        "@odata.id": f"{CHASSIS}/{cid}",
        "@odata.type": "#Chassis.v1_23_0.Chassis",
        "Id": cid,
        "Name": cid,
        "Manufacturer": "NVIDIA",
        "Status": status_ok(),
        "PowerState": "On",
        "EnvironmentMetrics": link(f"{CHASSIS}/{cid}/EnvironmentMetrics"),
    }
    if cid in MODULES:
        body.update(ChassisType="Module", Model="GB200 Superchip")
        body["Assembly"] = link(f"{CHASSIS}/{cid}/Assembly")
        body["Links"] = {"Processors": [link(f"{PROCESSORS}/{p}") for p in module_members(cid)]}
    else:
        body.update(ChassisType="RackMount" if cid == "Chassis_0" else "Module", Model="GB200 NVL")
        if cid == "Chassis_0":
            body.update(MaxPowerWatts=NODE_LIMITS[1], MinPowerWatts=NODE_LIMITS[0])
    return Reply(body=body, revision=0)


def _assembly(bmc: Bmc, req: SimRequest) -> Reply:
    cid = req.params["id"]
    if cid not in MODULES:
        raise _errors.resource_not_found(req.path)
    path = f"{CHASSIS}/{cid}/Assembly"
    body = {
        "@odata.id": path,
        "@odata.type": "#Assembly.v1_5_0.Assembly",
        "Id": "Assembly",
        "Name": f"{cid} Assembly",
        "Assemblies": [
            {
                "@odata.id": f"{path}#/Assemblies/0",
                "MemberId": "0",
                "Name": "GB200 Superchip",
                "Model": "GB200",
                "PartNumber": "699-2G548-0200-000",
                "SerialNumber": f"SIM{bmc.index:05d}{cid[-1]}",
                "Vendor": "NVIDIA",
            }
        ],
    }
    return Reply(body=body, revision=0)


def _routes() -> list[Route]:
    metrics = f"{PROCESSORS}/{{id}}/EnvironmentMetrics"
    chassis_metrics = f"{CHASSIS}/{{id}}/EnvironmentMetrics"
    return [
        *common_routes(),
        *firmware_routes(),
        Route(SYSTEM, get=_system),
        Route(PROCESSORS, get=_processors),
        Route(f"{PROCESSORS}/{{id}}", get=_processor),
        Route(metrics, get=_get_proc_metrics, patch=_patch_proc_metrics),
        Route(f"{metrics}/Actions/Oem/{_CLEAR_OOB}", post=_clear_proc),
        Route(f"{CHASSIS}/{{id}}", get=_chassis),
        Route(chassis_metrics, get=_get_chassis_metrics, patch=_patch_chassis_metrics),
        Route(f"{chassis_metrics}/Actions/Oem/{_CLEAR_OOB}", post=_clear_chassis),
        Route(f"{CHASSIS}/{{id}}/Assembly", get=_assembly),
        *wpps_routes(),
        *gb200_layout_routes(),
    ]


PLATFORM = Platform(
    name="gb200",
    topology_model="DGX_GB200",
    vendor="NVIDIA",
    product="GB200 NVL",
    manager_id="BMC",
    default_firmware="GB200Nvl-25.06-2",
    router=Router(_routes()),
    make_state=Gb200State,
    systems=("HGX_Baseboard_0",),
    chassis=(*NODE_CHASSIS, *MODULES),
    firmware_inventory=("FW_BMC_0", "HGX_FW_BMC_0"),
    description="GB200 NVL compute tray: per-GPU/CPU/module EnvironmentMetrics caps, WPPS",
)
