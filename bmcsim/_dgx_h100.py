"""DGX H100 (DPS model DGX_H100): a Node Manager platform with read-only GPU metrics.

Caps on this platform go through AMI's `Managers/BMC/NodeManager/Domains`, whose payload is not
published, so the simulator shows NodeManager but refuses writes (405): a plugin must report node caps
as unsupported here. GPUs `GPU_SXM_1..8` expose read-only EnvironmentMetrics; there is no WPPS.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bmcsim import _errors
from bmcsim._common import common_routes, firmware_routes, manager_document
from bmcsim._routing import (
    JsonDict,
    Platform,
    Reply,
    Route,
    Router,
    SimRequest,
    collection,
    link,
    status_ok,
)
from bmcsim._state import PlatformState, now, rounded

if TYPE_CHECKING:
    from bmcsim._routing import Bmc

SYSTEM = "/redfish/v1/Systems/HGX_Baseboard_0"
PROCESSORS = f"{SYSTEM}/Processors"
NODE_MANAGER = "/redfish/v1/Managers/BMC/NodeManager"
GPUS = tuple(f"GPU_SXM_{n}" for n in range(1, 9))
CHASSIS_IDS = ("Chassis_0", "HGX_Chassis_0")
GPU_TDP_W = 700
# CPUs, memory, NVSwitches, fans: node power beyond the GPUs
_HOST_W = 2200.0


class DgxH100State(PlatformState):
    """No writable caps; only readings."""

    def readings(self, t: float) -> dict[str, float]:
        """GPU, HGX and node power at time `t`."""
        power = {gpu: GPU_TDP_W * self.load(gpu, t) for gpu in GPUS}
        power["HGX_Chassis_0"] = sum(power.values())
        power["Chassis_0"] = power["HGX_Chassis_0"] + _HOST_W * (0.8 + 0.2 * self.load("host", t))
        return power


def _state(bmc: Bmc) -> DgxH100State:
    assert isinstance(bmc.state, DgxH100State)
    return bmc.state


def _metrics(bmc: Bmc, path: str, component: str, scale: float) -> Reply:
    state, t = _state(bmc), now()
    watts = state.readings(t)[component]
    body: JsonDict = {
        "@odata.id": path,
        "@odata.type": "#EnvironmentMetrics.v1_3_0.EnvironmentMetrics",
        "Id": "EnvironmentMetrics",
        "Name": f"{component} Environment Metrics",
        "PowerWatts": {"Reading": rounded(watts)},
        "EnergyJoules": {"Reading": rounded(state.energy(component, watts, t))},
        "TemperatureCelsius": {"Reading": rounded(28.0 + 50.0 * watts / scale)},
    }
    return Reply(body=body, revision=0)


def _gpu(bmc: Bmc, req: SimRequest) -> str:
    if req.params["id"] not in GPUS:
        raise _errors.resource_not_found(req.path)
    return req.params["id"]


def _gpu_metrics(bmc: Bmc, req: SimRequest) -> Reply:
    return _metrics(bmc, req.path, _gpu(bmc, req), GPU_TDP_W)


def _chassis_metrics(bmc: Bmc, req: SimRequest) -> Reply:
    if req.params["id"] not in CHASSIS_IDS:
        raise _errors.resource_not_found(req.path)
    return _metrics(bmc, req.path, req.params["id"], 10_200.0)


def _processors(bmc: Bmc, req: SimRequest) -> Reply:
    members = [f"{PROCESSORS}/{g}" for g in GPUS]
    body = collection(PROCESSORS, "#ProcessorCollection.ProcessorCollection", "Processors", members)
    return Reply(body=body, revision=0)


def _processor(bmc: Bmc, req: SimRequest) -> Reply:
    gpu = _gpu(bmc, req)
    body = {
        "@odata.id": f"{PROCESSORS}/{gpu}",
        "@odata.type": "#Processor.v1_20_0.Processor",
        "Id": gpu,
        "Name": gpu,
        "ProcessorType": "GPU",
        "Manufacturer": "NVIDIA",
        "Model": "H100 80GB HBM3",
        "MaxTDPWatts": GPU_TDP_W,
        "Status": status_ok(),
        "EnvironmentMetrics": link(f"{PROCESSORS}/{gpu}/EnvironmentMetrics"),
    }
    return Reply(body=body, revision=0)


def _system(bmc: Bmc, req: SimRequest) -> Reply:
    body = {
        "@odata.id": SYSTEM,
        "@odata.type": "#ComputerSystem.v1_22_0.ComputerSystem",
        "Id": "HGX_Baseboard_0",
        "Name": "HGX_Baseboard_0",
        "SystemType": "Physical",
        "Manufacturer": "NVIDIA",
        "Model": "DGX H100",
        "PowerState": "On",
        "Status": status_ok(),
        "Processors": link(PROCESSORS),
    }
    return Reply(body=body, revision=0)


def _chassis(bmc: Bmc, req: SimRequest) -> Reply:
    cid = req.params["id"]
    if cid not in CHASSIS_IDS:
        raise _errors.resource_not_found(req.path)
    body = {
        "@odata.id": f"/redfish/v1/Chassis/{cid}",
        "@odata.type": "#Chassis.v1_23_0.Chassis",
        "Id": cid,
        "Name": cid,
        "ChassisType": "RackMount" if cid == "Chassis_0" else "Module",
        "Manufacturer": "NVIDIA",
        "Model": "DGX H100",
        "PowerState": "On",
        "Status": status_ok(),
        "EnvironmentMetrics": link(f"/redfish/v1/Chassis/{cid}/EnvironmentMetrics"),
    }
    return Reply(body=body, revision=0)


def _manager(bmc: Bmc, req: SimRequest) -> Reply:
    body = manager_document(bmc)
    # every OEM object names its type (the service validator checks it)
    body["Oem"] = {"Ami": {"@odata.type": "#AMIManager.v1_0_0.AMIManager", "NodeManager": link(NODE_MANAGER)}}
    return Reply(body=body, revision=0)


def _node_manager(bmc: Bmc, req: SimRequest) -> Reply:
    body = {
        "@odata.id": NODE_MANAGER,
        "@odata.type": "#AMINodeManager.v1_0_0.AMINodeManager",
        "Id": "NodeManager",
        "Name": "Node Manager",
        "Status": status_ok(),
        "Domains": link(f"{NODE_MANAGER}/Domains"),
        "PSUPolicies": link(f"{NODE_MANAGER}/PSUPolicies"),
    }
    return Reply(body=body, revision=0)


def _nm_collection(name: str) -> Route:
    path = f"{NODE_MANAGER}/{name}"

    def handler(bmc: Bmc, req: SimRequest) -> Reply:
        # payloads of AMI Node Manager domains and policies are unpublished: expose no members
        body = collection(path, f"#AMI{name}Collection.AMI{name}Collection", name, [])
        return Reply(body=body, revision=0)

    return Route(path, get=handler)


def _routes() -> list[Route]:
    return [
        *common_routes(),
        *firmware_routes(),
        Route("/redfish/v1/Managers/BMC", get=_manager),
        Route(NODE_MANAGER, get=_node_manager),
        _nm_collection("Domains"),
        _nm_collection("PSUPolicies"),
        Route(SYSTEM, get=_system),
        Route(PROCESSORS, get=_processors),
        Route(f"{PROCESSORS}/{{id}}", get=_processor),
        Route(f"{PROCESSORS}/{{id}}/EnvironmentMetrics", get=_gpu_metrics),
        Route("/redfish/v1/Chassis/{id}", get=_chassis),
        Route("/redfish/v1/Chassis/{id}/EnvironmentMetrics", get=_chassis_metrics),
    ]


PLATFORM = Platform(
    name="dgx-h100",
    topology_model="DGX_H100",
    vendor="NVIDIA",
    product="DGX H100",
    manager_id="BMC",
    default_firmware="24.09.17",
    router=Router(_routes()),
    make_state=DgxH100State,
    systems=("HGX_Baseboard_0",),
    chassis=CHASSIS_IDS,
    firmware_inventory=("FW_BMC_0", "HostBMC_0"),
    description="DGX H100 Node Manager platform: read-only GPU_SXM_1..8 metrics, NodeManager without writes",
)
