"""Resources of the layout variants (`BmcConfig.layout`): a SmartNIC system, an enclosure chassis, a host.

Seen in DMTF's public mockups and on real BMCs: a second ComputerSystem for a SmartNIC's SoC (with
its own ARM processor), an enclosure chassis holding several nodes with a cap of its own that is
not the node's, and on NVIDIA GB200 BMCs the host's `System_0` next to `HGX_Baseboard_0`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bmcsim import _errors
from bmcsim._routing import JsonDict, Reply, Route, SimRequest, collection, link, status_ok
from bmcsim._state import Cap

if TYPE_CHECKING:
    from bmcsim._routing import Bmc

NIC_SYSTEM = "/redfish/v1/Systems/SmartNIC"
ENCLOSURE = "/redfish/v1/Chassis/Enclosure"
HOST_SYSTEM = "/redfish/v1/Systems/System_0"
ENCLOSURE_CAP = "EnclosureLimit"


def _need(bmc: Bmc, variant: str, path: str) -> None:
    if variant not in bmc.config.layout:
        raise _errors.resource_not_found(path)


def _nic_system(bmc: Bmc, req: SimRequest) -> Reply:
    _need(bmc, "smartnic", req.path)
    body: JsonDict = {
        "@odata.id": NIC_SYSTEM,
        "@odata.type": "#ComputerSystem.v1_22_0.ComputerSystem",
        "Id": "SmartNIC",
        "Name": "SmartNIC SoC",
        "SystemType": "DPU",
        "Manufacturer": "Contoso Networks",
        "PowerState": "On",
        "Status": status_ok(),
        "Processors": link(f"{NIC_SYSTEM}/Processors"),
        "Links": {"Chassis": [link("/redfish/v1/Chassis/1")]},
    }
    return Reply(body=body, revision=0)


def _nic_processors(bmc: Bmc, req: SimRequest) -> Reply:
    _need(bmc, "smartnic", req.path)
    path = f"{NIC_SYSTEM}/Processors"
    body = collection(path, "#ProcessorCollection.ProcessorCollection", "Processors", [f"{path}/CPU0"])
    return Reply(body=body, revision=0)


def _nic_processor(bmc: Bmc, req: SimRequest) -> Reply:
    _need(bmc, "smartnic", req.path)
    if req.params["id"] != "CPU0":
        raise _errors.resource_not_found(req.path)
    body: JsonDict = {
        "@odata.id": f"{NIC_SYSTEM}/Processors/CPU0",
        "@odata.type": "#Processor.v1_20_0.Processor",
        "Id": "CPU0",
        "Name": "SmartNIC ARM cores",
        "ProcessorType": "CPU",
        "ProcessorArchitecture": "ARM",
        "Model": "Contoso NIC SoC",
        "TotalCores": 16,
        "Status": status_ok(),
    }
    return Reply(body=body, revision=0)


def _enclosure_cap(bmc: Bmc) -> Cap:
    caps = bmc.state.caps
    if ENCLOSURE_CAP not in caps:
        caps[ENCLOSURE_CAP] = Cap(ENCLOSURE_CAP, 1000, 8000, set_point=6000, control_mode="Manual")
    return caps[ENCLOSURE_CAP]


def _enclosure(bmc: Bmc, req: SimRequest) -> Reply:
    _need(bmc, "multi-chassis", req.path)
    body: JsonDict = {
        "@odata.id": ENCLOSURE,
        "@odata.type": "#Chassis.v1_23_0.Chassis",
        "Id": "Enclosure",
        "Name": "Multi-node enclosure",
        "ChassisType": "Enclosure",
        "PowerState": "On",
        "Status": status_ok(),
        "Power": link(f"{ENCLOSURE}/Power"),
        "Links": {"Contains": [link("/redfish/v1/Chassis/1")], "ComputerSystems": []},
    }
    return Reply(body=body, revision=0)


def _enclosure_power(bmc: Bmc, req: SimRequest) -> Reply:
    _need(bmc, "multi-chassis", req.path)
    cap = _enclosure_cap(bmc)
    control = {
        "@odata.id": f"{ENCLOSURE}/Power#/PowerControl/0",
        "MemberId": "0",
        "Name": "Enclosure Power Control",
        "PowerCapacityWatts": cap.allow_max,
        "PowerLimit": {"LimitInWatts": cap.set_point, "LimitException": "NoAction"},
    }
    body: JsonDict = {
        "@odata.id": f"{ENCLOSURE}/Power",
        "@odata.type": "#Power.v1_7_3.Power",
        "Id": "Power",
        "Name": "Enclosure Power",
        "PowerControl": [control],
    }
    return Reply(body=body, revision=cap.revision)


def _host_system(bmc: Bmc, req: SimRequest) -> Reply:
    if bmc.config.profile != "bmcweb":
        raise _errors.resource_not_found(req.path)
    body: JsonDict = {
        "@odata.id": HOST_SYSTEM,
        "@odata.type": "#ComputerSystem.v1_22_0.ComputerSystem",
        "Id": "System_0",
        "Name": "System_0",
        "SystemType": "Physical",
        "PowerState": "On",
        # the host's processors are not modelled, so no Processors link to a resource that is not there
        "Status": status_ok(),
    }
    return Reply(body=body, revision=0)


def dmtf_layout_routes() -> list[Route]:
    """The SmartNIC system and the enclosure chassis (404 unless their variant is on)."""
    return [
        Route(NIC_SYSTEM, get=_nic_system),
        Route(f"{NIC_SYSTEM}/Processors", get=_nic_processors),
        Route(f"{NIC_SYSTEM}/Processors/{{id}}", get=_nic_processor),
        Route(ENCLOSURE, get=_enclosure),
        Route(f"{ENCLOSURE}/Power", get=_enclosure_power),
    ]


def gb200_layout_routes() -> list[Route]:
    """The host system a bmcweb GB200 BMC lists next to `HGX_Baseboard_0`."""
    return [Route(HOST_SYSTEM, get=_host_system)]
