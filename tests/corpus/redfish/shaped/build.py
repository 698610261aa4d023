"""Build the shaped fixtures of tests/corpus/redfish/shaped (see README.md there).

Each fixture is a small DMTF-style mockup (one `index.json` per resource) in the shape a real BMC
serves, where no public capture of it exists in this repository. The shapes follow the sources each
`SOURCES` file names; every value not taken from a source is marked there as chosen for the test.

    python tests/corpus/redfish/shaped/build.py        # rewrites the fixture folders
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
R = "/redfish/v1"
BASE = f"{R}/Systems/HGX_Baseboard_0"
CLEAR = "#NvidiaEnvironmentMetrics.ClearOOBSetPoint"


def link(path: str) -> dict[str, str]:
    return {"@odata.id": path}


def collection(path: str, kind: str, members: list[str]) -> dict[str, Any]:
    return {
        "@odata.id": path,
        "@odata.type": f"#{kind}Collection.{kind}Collection",
        "Name": f"{kind} Collection",
        "Members": [link(m) for m in members],
        "Members@odata.count": len(members),
    }


def write(root: Path, docs: dict[str, dict[str, Any]]) -> None:
    for old in root.rglob("index.json"):  # the folder's SOURCES stays
        old.unlink()
    for path, body in docs.items():
        target = root / path.removeprefix(R).strip("/") / "index.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")


def nvidia_limit(path: str, watts: tuple[int, int, int], source: str = "") -> dict[str, Any]:
    """An NVIDIA bmcweb `PowerLimitWatts` with the OEM section and the clear action next to it (the
    captured GB300 tray's GPU EnvironmentMetrics, tests/corpus/redfish/nvidia-gb300-nvl). A chassis
    resource's (`source`: a module's) OEM section carries no requested limits nor persistency:
    NVIDIA bmcweb reads them only for processors (`environment_util.hpp`,
    `getProcessorEnvironmentMetricsData` alone calls `getPowerLimitPersistency`), as the captured
    GB300 module's EnvironmentMetrics shows."""
    low, high, default = watts
    limit: dict[str, Any] = {
        "AllowableMax": high,
        "AllowableMin": low,
        "ControlMode": "Automatic",
        "DefaultSetPoint": default,
        "SetPoint": default,
    }
    if source:
        limit["DataSourceUri"] = source
    processor: dict[str, Any] = {
        "@odata.type": "#NvidiaEnvironmentMetrics.v1_3_0.NvidiaEnvironmentMetrics",
        "PowerLimitPersistency": False,
        "RequestedOneshotPowerLimitWatts": None,
        "RequestedPersistentPowerLimitWatts": None,
    }
    chassis = {"@odata.type": "#NvidiaEnvironmentMetrics.v1_2_0.NvidiaEnvironmentMetrics"}
    return {
        "PowerLimitWatts": limit,
        "Oem": {"Nvidia": chassis if source else processor},
        "Actions": {
            "Oem": {CLEAR: {"target": f"{path}/Actions/Oem/NvidiaEnvironmentMetrics.ClearOOBSetPoint"}}
        },
    }


def metrics(path: str, watts: float, **extra: Any) -> dict[str, Any]:
    return {
        "@odata.id": path,
        "@odata.type": "#EnvironmentMetrics.v1_3_0.EnvironmentMetrics",
        "Id": "EnvironmentMetrics",
        "Name": "Environment Metrics",
        "PowerWatts": {"Reading": watts},
        **extra,
    }


def tray(
    product: str, gpus_per_module: int, *, gpu_limit: bool, module_limit: str
) -> dict[str, dict[str, Any]]:
    """An NVIDIA HGX tray: two processor modules, each one Grace CPU and `gpus_per_module` GPUs.

    `module_limit`: `none` (no PowerLimitWatts), `cpu-edpp` (GH200: the Grace EDPp control)."""
    gpus = [f"GPU_{i}" for i in range(2 * gpus_per_module)]
    cpus = ["CPU_0", "CPU_1"]
    docs: dict[str, dict[str, Any]] = {
        R: {
            "@odata.id": R,
            "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot",
            "Id": "RootService",
            "Name": "Root Service",
            "RedfishVersion": "1.17.0",
            "Vendor": "NVIDIA",
            "Product": product,
            "Systems": link(f"{R}/Systems"),
            "Chassis": link(f"{R}/Chassis"),
            "Managers": link(f"{R}/Managers"),
        },
        f"{R}/Managers": collection(f"{R}/Managers", "Manager", [f"{R}/Managers/BMC_0"]),
        f"{R}/Managers/BMC_0": {
            "@odata.id": f"{R}/Managers/BMC_0",
            "@odata.type": "#Manager.v1_19_0.Manager",
            "Id": "BMC_0",
            "ManagerType": "BMC",
            "FirmwareVersion": "shaped-fixture",
        },
        f"{R}/Systems": collection(f"{R}/Systems", "ComputerSystem", [BASE]),
        BASE: {
            "@odata.id": BASE,
            "@odata.type": "#ComputerSystem.v1_22_0.ComputerSystem",
            "Id": "HGX_Baseboard_0",
            "Processors": link(f"{BASE}/Processors"),
            "Links": {"Chassis": [link(f"{R}/Chassis/HGX_Chassis_0")]},
        },
        f"{BASE}/Processors": collection(
            f"{BASE}/Processors", "Processor", [f"{BASE}/Processors/{p}" for p in gpus + cpus]
        ),
    }
    modules = [f"HGX_ProcessorModule_{m}" for m in range(2)]
    chassis = ["Chassis_0", "HGX_Chassis_0", *modules]
    for proc in gpus + cpus:
        path = f"{BASE}/Processors/{proc}"
        kind = "GPU" if proc.startswith("GPU") else "CPU"
        docs[path] = {
            "@odata.id": path,
            "@odata.type": "#Processor.v1_20_0.Processor",
            "Id": proc,
            "ProcessorType": kind,
            "EnvironmentMetrics": link(f"{path}/EnvironmentMetrics"),
            "Links": {"Chassis": link(f"{R}/Chassis/HGX_{proc}")},
        }
        em = f"{path}/EnvironmentMetrics"
        limited = gpu_limit and kind == "GPU"
        docs[em] = metrics(
            em, 180.0 if kind == "GPU" else 40.0, **(nvidia_limit(em, (200, 900, 900)) if limited else {})
        )
        chassis.append(f"HGX_{proc}")
        docs[f"{R}/Chassis/HGX_{proc}"] = {
            "@odata.id": f"{R}/Chassis/HGX_{proc}",
            "@odata.type": "#Chassis.v1_22_0.Chassis",
            "Id": f"HGX_{proc}",
            "ChassisType": "Component",
        }
    docs[f"{R}/Chassis"] = collection(f"{R}/Chassis", "Chassis", [f"{R}/Chassis/{c}" for c in chassis])
    docs[f"{R}/Chassis/Chassis_0"] = {
        "@odata.id": f"{R}/Chassis/Chassis_0",
        "@odata.type": "#Chassis.v1_22_0.Chassis",
        "Id": "Chassis_0",
        "ChassisType": "RackMount",
        "EnvironmentMetrics": link(f"{R}/Chassis/Chassis_0/EnvironmentMetrics"),
    }
    docs[f"{R}/Chassis/Chassis_0/EnvironmentMetrics"] = metrics(
        f"{R}/Chassis/Chassis_0/EnvironmentMetrics", 1234.0
    )
    docs[f"{R}/Chassis/HGX_Chassis_0"] = {
        "@odata.id": f"{R}/Chassis/HGX_Chassis_0",
        "@odata.type": "#Chassis.v1_22_0.Chassis",
        "Id": "HGX_Chassis_0",
        "ChassisType": "Zone",
        "Links": {"Contains": [link(f"{R}/Chassis/{m}") for m in modules]},
    }
    for m, module in enumerate(modules):
        path = f"{R}/Chassis/{module}"
        held = [f"GPU_{m * gpus_per_module + g}" for g in range(gpus_per_module)] + [f"CPU_{m}"]
        docs[path] = {
            "@odata.id": path,
            "@odata.type": "#Chassis.v1_22_0.Chassis",
            "Id": module,
            "ChassisType": "Module",
            "EnvironmentMetrics": link(f"{path}/EnvironmentMetrics"),
            "Links": {
                "ComputerSystems": [link(BASE)],
                "Contains": [link(f"{R}/Chassis/HGX_{p}") for p in held],
            },
        }
        em = f"{path}/EnvironmentMetrics"
        if module_limit == "none":
            docs[em] = metrics(em, 600.0)
            continue
        control = f"{path}/Controls/ProcessorModule_{m}_EDPp_0"
        docs[em] = metrics(em, 300.0, **nvidia_limit(em, (50, 420, 420), source=control))
        docs[path]["Controls"] = link(f"{path}/Controls")
        docs[f"{path}/Controls"] = collection(f"{path}/Controls", "Control", [control])
        docs[control] = {
            "@odata.id": control,
            "@odata.type": "#Control.v1_3_0.Control",
            "Id": f"ProcessorModule_{m}_EDPp_0",
            "ControlType": "Power",
            "PhysicalContext": "CPU",
            "AllowableMin": 50,
            "AllowableMax": 420,
            "SetPoint": 420,
            "SetPointUnits": "W",
            "ControlMode": "Automatic",
        }
        if m == 0:  # module 1's names no RelatedItem: its CPU is the one the module holds
            docs[control]["RelatedItem"] = [link(f"{BASE}/Processors/CPU_0")]
    return docs


def lenovo() -> dict[str, dict[str, Any]]:
    """A Lenovo XCC rack server's legacy Power with XCC's OEM capping range next to the limit."""
    power = f"{R}/Chassis/1/Power"
    return {
        R: {
            "@odata.id": R,
            "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot",
            "Id": "RootService",
            "Name": "Root Service",
            "RedfishVersion": "1.15.0",
            "Vendor": "Lenovo",
            "Product": "ThinkSystem (shaped fixture)",
            "Systems": link(f"{R}/Systems"),
            "Chassis": link(f"{R}/Chassis"),
            "Managers": link(f"{R}/Managers"),
        },
        f"{R}/Managers": collection(f"{R}/Managers", "Manager", [f"{R}/Managers/1"]),
        f"{R}/Managers/1": {
            "@odata.id": f"{R}/Managers/1",
            "@odata.type": "#Manager.v1_19_0.Manager",
            "Id": "1",
            "ManagerType": "BMC",
            "FirmwareVersion": "shaped-fixture",
        },
        f"{R}/Systems": collection(f"{R}/Systems", "ComputerSystem", [f"{R}/Systems/1"]),
        f"{R}/Systems/1": {
            "@odata.id": f"{R}/Systems/1",
            "@odata.type": "#ComputerSystem.v1_22_0.ComputerSystem",
            "Id": "1",
            "Links": {"Chassis": [link(f"{R}/Chassis/1")]},
        },
        f"{R}/Chassis": collection(f"{R}/Chassis", "Chassis", [f"{R}/Chassis/1"]),
        f"{R}/Chassis/1": {
            "@odata.id": f"{R}/Chassis/1",
            "@odata.type": "#Chassis.v1_22_0.Chassis",
            "Id": "1",
            "ChassisType": "RackMount",
            "Power": link(power),
            "Links": {"ComputerSystems": [link(f"{R}/Systems/1")]},
        },
        power: {
            "@odata.id": power,
            "@odata.type": "#Power.v1_5_1.Power",
            "Id": "Power",
            "Name": "Power",
            "PowerControl": [
                {
                    "@odata.id": f"{power}#/PowerControl/0",
                    "MemberId": "0",
                    "Name": "Server Power Control",
                    "PhysicalContext": "Chassis",
                    "PowerCapacityWatts": 750,
                    "PowerConsumedWatts": 245,
                    "PowerLimit": {"LimitException": "NoAction", "LimitInWatts": None},
                    "RelatedItem": [link(f"{R}/Chassis/1")],
                    "Oem": {
                        "Lenovo": {
                            "@odata.type": "#LenovoPower.v1_0_0.PowerControl",
                            "PowerUtilization": {
                                "CapacityMaxAC": 782,
                                "CapacityMaxDC": 758,
                                "CapacityMinAC": 675,
                                "CapacityMinDC": 645,
                                "GuaranteedInWatts": 675,
                                "LimitMode": "AC",
                                "MaxLimitInWatts": 750,
                                "MinLimitInWatts": 0,
                            },
                        }
                    },
                }
            ],
        },
    }


def main() -> None:
    write(HERE / "nvidia-gb200-tray", tray("GB200 NVL", 2, gpu_limit=False, module_limit="none"))
    write(HERE / "nvidia-gh200", tray("GH200", 1, gpu_limit=True, module_limit="cpu-edpp"))
    write(HERE / "lenovo-xcc-oem-range", lenovo())


if __name__ == "__main__":
    main()
