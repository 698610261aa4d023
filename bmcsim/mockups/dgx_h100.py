# ruff: noqa: E501  (source notes are data: one line each in SOURCES.md)
"""The DGX H100 mockup (AMI MegaRAC host BMC + HGX H100 board): its documents and SOURCES.md header."""

from __future__ import annotations

from typing import Any

ROOT = "/redfish/v1"
BMCWEB = "NVIDIA/bmcweb@7f3a16ae3f92f8fcd27d9d3beede1326746a4dd1"
NV_REDFISH = "NVIDIA/nv-redfish@7ac21814931705ba0e99aa0ae9929f4f6f019c43 (Apache-2.0)"
ENV_UTIL = f"{BMCWEB} redfish-core/include/utils/environment_util.hpp"


def link(path: str) -> dict[str, str]:
    return {"@odata.id": path}


DGX_HEADER = f"""# nvidia-dgx-h100{{suffix}}: NVIDIA DGX H100 (AMI MegaRAC host BMC + HGX H100 8-GPU board firmware{{what}})

The host BMC is AMI's (service root `Vendor: AMI`, `RedfishVersion: 1.11.0`), the platform
{NV_REDFISH} redfish/src/bmc_quirks.rs calls `AmiViking`: its systems are `DGX` (the host) and
`HGX_Baseboard_0` (the HGX board, `filter_computer_system_odata_ids`), its managers `BMC`, `HGX_BMC_0`
and `HGX_FabricManager_0` (`filter_manager_odata_ids`), and its chassis may lack `ChassisType`
(`bug_missing_chassis_type_field`). The HGX board's GPUs `GPU_SXM_1..8` link EnvironmentMetrics with
readings{{gpus}} (bmcweb emits `PowerLimitWatts` only with a power-cap interface: {ENV_UTIL}
getPowerCap); the host's Intel CPUs under `Systems/DGX` link no EnvironmentMetrics, so no
`Processors/<cpu>/EnvironmentMetrics` exists to read. Readings are illustrative values within an
H100 SXM's range. Built by `bmcsim/mockups/build.py`.
"""


# ---- DGX H100 -------------------------------------------------------------------------------------


def dgx_h100(gpu_caps: bool = False) -> dict[str, Any]:
    """AMI MegaRAC host BMC (Redfish 1.11.0) in front of the HGX H100 8-GPU board's own BMC: host
    `Systems/DGX` with its Intel CPUs (no EnvironmentMetrics link), `Systems/HGX_Baseboard_0` with
    `GPU_SXM_1..8` (EnvironmentMetrics readings, no limit), node readings on `Chassis/HGX_Chassis_0`."""
    docs: dict[str, Any] = {}
    docs[ROOT] = {
        "@odata.id": ROOT,
        "@odata.type": "#ServiceRoot.v1_11_0.ServiceRoot",
        "Chassis": link(f"{ROOT}/Chassis"),
        "Id": "RootService",
        "Managers": link(f"{ROOT}/Managers"),
        "Name": "Root Service",
        "Product": "DGXH100",
        "RedfishVersion": "1.11.0",
        "Systems": link(f"{ROOT}/Systems"),
        "Vendor": "AMI",
        # required of every Redfish service with sessions (DMTF DSP0266 "Service root"), so AMI's too
        "AccountService": link(f"{ROOT}/AccountService"),
        "Links": {"Sessions": link(f"{ROOT}/SessionService/Sessions")},
        "SessionService": link(f"{ROOT}/SessionService"),
        "Tasks": link(f"{ROOT}/TaskService"),
    }
    systems = ["DGX", "HGX_Baseboard_0"]
    docs[f"{ROOT}/Systems"] = _collection(f"{ROOT}/Systems", "ComputerSystem", systems)
    host = f"{ROOT}/Systems/DGX"
    docs[host] = {
        "@odata.id": host,
        "@odata.type": "#ComputerSystem.v1_11_0.ComputerSystem",
        "Id": "DGX",
        "Links": {"Chassis": [link(f"{ROOT}/Chassis/DGX")], "ManagedBy": [link(f"{ROOT}/Managers/BMC")]},
        "Manufacturer": "NVIDIA",
        "Model": "DGXH100",
        "Name": "DGX",
        "PowerState": "On",
        "Processors": link(f"{host}/Processors"),
        "Status": {"Health": "OK", "State": "Enabled"},
        "SystemType": "Physical",
    }
    docs[f"{host}/Processors"] = _collection(f"{host}/Processors", "Processor", ["CPU_0", "CPU_1"])
    for n in range(2):
        docs[f"{host}/Processors/CPU_{n}"] = {
            "@odata.id": f"{host}/Processors/CPU_{n}",
            "@odata.type": "#Processor.v1_11_0.Processor",
            "Id": f"CPU_{n}",
            "Manufacturer": "Intel(R) Corporation",
            "Model": "Intel(R) Xeon(R) Platinum 8480C",
            "Name": f"CPU_{n}",
            "ProcessorArchitecture": "x86",
            "ProcessorType": "CPU",
            "Status": {"Health": "OK", "State": "Enabled"},
            "TotalCores": 56,
        }
    board = f"{ROOT}/Systems/HGX_Baseboard_0"
    gpus = [f"GPU_SXM_{n}" for n in range(1, 9)]
    docs[board] = {
        "@odata.id": board,
        "@odata.type": "#ComputerSystem.v1_17_0.ComputerSystem",
        "Id": "HGX_Baseboard_0",
        "Links": {
            "Chassis": [link(f"{ROOT}/Chassis/HGX_Chassis_0")],
            "ManagedBy": [link(f"{ROOT}/Managers/HGX_BMC_0")],
        },
        "Manufacturer": "NVIDIA",
        "Model": "HGX H100",
        "Name": "HGX_Baseboard_0",
        "Processors": link(f"{board}/Processors"),
        "Status": {"Health": "OK", "State": "Enabled"},
        "SystemType": "Physical",
    }
    docs[f"{board}/Processors"] = _collection(f"{board}/Processors", "Processor", gpus)
    for i, gpu in enumerate(gpus):
        proc = f"{board}/Processors/{gpu}"
        docs[proc] = {
            "@odata.id": proc,
            "@odata.type": "#Processor.v1_17_0.Processor",
            "EnvironmentMetrics": link(f"{proc}/EnvironmentMetrics"),
            "Id": gpu,
            "Links": {"Chassis": link(f"{ROOT}/Chassis/HGX_{gpu}")},
            "Manufacturer": "NVIDIA",
            "Model": "NVIDIA H100 80GB HBM3",
            "Name": gpu,
            "ProcessorType": "GPU",
            "Status": {"Health": "OK", "State": "Enabled"},
        }
        watts = 110.0 + 7 * i
        docs[f"{proc}/EnvironmentMetrics"] = {
            "@odata.id": f"{proc}/EnvironmentMetrics",
            "@odata.type": "#EnvironmentMetrics.v1_2_0.EnvironmentMetrics",
            "EnergyJoules": {
                "DataSourceUri": f"{ROOT}/Chassis/HGX_{gpu}/Sensors/HGX_{gpu}_Energy_0",
                "Reading": 48210553.0 + 1000 * i,
            },
            "Id": "EnvironmentMetrics",
            "Name": f"{gpu} Environment Metrics",
            "PowerWatts": {
                "DataSourceUri": f"{ROOT}/Chassis/HGX_{gpu}/Sensors/HGX_{gpu}_Power_0",
                "Reading": watts,
            },
            "TemperatureCelsius": {
                "DataSourceUri": f"{ROOT}/Chassis/HGX_{gpu}/Sensors/HGX_{gpu}_TEMP_0",
                "Reading": 33.0 + i,
            },
        }
        if gpu_caps:
            # HGX board firmware with the GPUs' power cap (H100 SXM: 200..700 W)
            docs[f"{proc}/EnvironmentMetrics"]["PowerLimitWatts"] = {
                "AllowableMax": 700,
                "AllowableMin": 200,
                "ControlMode": "Automatic",
                "DefaultSetPoint": 700,
                "SetPoint": 700,
            }
    chassis = ["DGX", "HGX_Chassis_0"]
    docs[f"{ROOT}/Chassis"] = _collection(f"{ROOT}/Chassis", "Chassis", chassis)
    docs[f"{ROOT}/Chassis/DGX"] = {
        # NOTE: no ChassisType (nv-redfish bmc_quirks: bug_missing_chassis_type_field, AMI Viking)
        "@odata.id": f"{ROOT}/Chassis/DGX",
        "@odata.type": "#Chassis.v1_15_0.Chassis",
        "Id": "DGX",
        "Links": {"ComputerSystems": [link(host)], "ManagedBy": [link(f"{ROOT}/Managers/BMC")]},
        "Name": "DGX",
        "Status": {"Health": "OK", "State": "Enabled"},
    }
    hgx = f"{ROOT}/Chassis/HGX_Chassis_0"
    docs[hgx] = {
        "@odata.id": hgx,
        "@odata.type": "#Chassis.v1_17_0.Chassis",
        "ChassisType": "Module",
        "EnvironmentMetrics": link(f"{hgx}/EnvironmentMetrics"),
        "Id": "HGX_Chassis_0",
        "Links": {"ComputerSystems": [link(board)], "ManagedBy": [link(f"{ROOT}/Managers/HGX_BMC_0")]},
        "Manufacturer": "NVIDIA",
        "Model": "HGX H100",
        "Name": "HGX_Chassis_0",
        "Status": {"Health": "OK", "State": "Enabled"},
    }
    docs[f"{hgx}/EnvironmentMetrics"] = {
        "@odata.id": f"{hgx}/EnvironmentMetrics",
        "@odata.type": "#EnvironmentMetrics.v1_2_0.EnvironmentMetrics",
        "Id": "EnvironmentMetrics",
        "Name": "Chassis Environment Metrics",
        "PowerWatts": {"DataSourceUri": f"{hgx}/Sensors/HGX_Chassis_0_TotalGPU_Power_0", "Reading": 1076.0},
    }
    managers = ["BMC", "HGX_BMC_0", "HGX_FabricManager_0"]
    docs[f"{ROOT}/Managers"] = _collection(f"{ROOT}/Managers", "Manager", managers)
    for m, version in zip(managers, ("24.09.17", "HGX-22.10-1-rc80", "HGX-22.10-1-rc80"), strict=True):
        docs[f"{ROOT}/Managers/{m}"] = {
            "@odata.id": f"{ROOT}/Managers/{m}",
            "@odata.type": "#Manager.v1_11_0.Manager",
            "FirmwareVersion": version,
            "Id": m,
            "ManagerType": "BMC" if m != "HGX_FabricManager_0" else "Service",
            "Name": m,
            "Status": {"Health": "OK", "State": "Enabled"},
        }
    return docs


def _collection(path: str, kind: str, ids: list[str]) -> dict[str, Any]:
    return {
        "@odata.id": path,
        "@odata.type": f"#{kind}Collection.{kind}Collection",
        "Members": [link(f"{path}/{i}") for i in ids],
        "Members@odata.count": len(ids),
        "Name": f"{kind} Collection",
    }
