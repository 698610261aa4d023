# ruff: noqa: E501  (source notes are data: one line each in SOURCES.md)
"""The HGX baseboard mockups (HGX H100 8-GPU, HGX B200 8-GPU) as their own BMC (the HGX Management
Controller, NVIDIA's bmcweb) serves them: the documents, their source notes and the SOURCES.md header.

Every document is a resource of the GB300 NVL capture (same NVIDIA bmcweb family, real firmware),
trimmed to the properties an HGX board's bmcweb emits for what it has, renamed to the HGX GPU ids
`GPU_SXM_1..8`; values no public source gives for these boards are left out, never guessed."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

ROOT = "/redfish/v1"
BMCWEB = "NVIDIA/bmcweb@7f3a16ae3f92f8fcd27d9d3beede1326746a4dd1 (Apache-2.0)"
ENV_UTIL = f"{BMCWEB} redfish-core/include/utils/environment_util.hpp"
PROCESSOR = f"{BMCWEB} redfish-core/lib/processor.hpp"
OPTIONS = f"{BMCWEB} meson.options"
B200_GUIDE = "NVIDIA DGX B200 User Guide, Managing Power Capping, https://docs.nvidia.com/dgx/dgxb200-user-guide/power-capping.html"
B200_GUIDE_EARLIER = (
    "the guide's earlier edition (PDF p. 55, https://www.easymanua.ls/nvidia/dgx-b200/manual?p=61)"
)
GPU_IDS = f"GPU ids GPU_SXM_1..8 ({B200_GUIDE}: `<id>` is the GPU instance number of 1 to 8)"
SYSTEM = f"{ROOT}/Systems/HGX_Baseboard_0"
HGX = f"{ROOT}/Chassis/HGX_Chassis_0"
MANAGER = f"{ROOT}/Managers/HGX_BMC_0"

#: properties of a captured document that are that one tray's own facts (serials, part numbers,
#: models, clocks, firmware, UUIDs): never carried over to another board
TRAY_FACTS = (
    "AssetTag",
    "BaseSpeedMHz",
    "DateTime",
    "DateTimeLocalOffset",
    "DepthMm",
    "FirmwareVersion",
    "HeightMm",
    "LastResetTime",
    "Location",
    "MaxPowerWatts",
    "MaxSpeedMHz",
    "MemorySummary",
    "MinPowerWatts",
    "MinSpeedMHz",
    "Model",
    "OperatingSpeedMHz",
    "OperatingSpeedRangeMHz",
    "PartNumber",
    "ProcessorSummary",
    "SKU",
    "SerialNumber",
    "ServiceEntryPointUUID",
    "SpeedLimitMHz",
    "SpeedLocked",
    "SystemInterface",
    "UUID",
    "Version",
    "WidthMm",
)

Note = Callable[[str, str], None]


def link(path: str) -> dict[str, str]:
    return {"@odata.id": path}


def _trimmed(doc: dict[str, Any], keep_links: tuple[str, ...], drop: tuple[str, ...] = ()) -> dict[str, Any]:
    """A captured document without the tray's own facts, its OEM block and links to what is not served."""
    body = {k: copy.deepcopy(v) for k, v in doc.items() if k not in TRAY_FACTS and k not in drop}
    body.pop("Oem", None)
    for key, value in list(body.items()):
        if isinstance(value, dict) and set(value) == {"@odata.id"} and key not in keep_links:
            del body[key]  # a link to a resource this mockup does not serve
    return body


def _collection(src: dict[str, Any], path: str, members: list[str]) -> dict[str, Any]:
    return {
        **copy.deepcopy(src[path]),
        "Members": [link(m) for m in members],
        "Members@odata.count": len(members),
    }


def hgx_board(src: dict[str, Any], board: str, note: Note) -> tuple[dict[str, Any], dict[str, str]]:
    """The served documents of an HGX `board` ("H100" or "B200") and the capture path each comes from."""
    origin: dict[str, str] = {}
    docs: dict[str, Any] = {}
    gpus = [f"GPU_SXM_{n}" for n in range(1, 9)]
    procs = f"{SYSTEM}/Processors"

    root = {k: copy.deepcopy(v) for k, v in src[ROOT].items() if k not in ("Oem", "Vendor", "Product")}
    root.update(
        {
            "AccountService": link(f"{ROOT}/AccountService"),
            "Links": {"Sessions": link(f"{ROOT}/SessionService/Sessions")},
            "SessionService": link(f"{ROOT}/SessionService"),
            "Tasks": link(f"{ROOT}/TaskService"),
        }
    )
    docs[ROOT], origin[ROOT] = root, ROOT
    note(
        ROOT,
        f"no Vendor/Product (bmcweb fills them from the board's inventory, {BMCWEB} redfish-core/lib/service_root.hpp, and no public source gives an HGX board's); the service links bmcweb always shows (same file): Links.Sessions, AccountService, SessionService, Tasks; the crawler's synthesized-root note removed",
    )

    docs[f"{ROOT}/Systems"] = _collection(src, f"{ROOT}/Systems", [SYSTEM])
    origin[f"{ROOT}/Systems"] = f"{ROOT}/Systems"
    note(f"{ROOT}/Systems", "only HGX_Baseboard_0: the board's own BMC serves no host system")
    docs[SYSTEM] = _trimmed(
        src[SYSTEM], ("Processors",), drop=("PowerMode", "PowerMode@Redfish.AllowableValues")
    )
    docs[SYSTEM]["Links"] = {"Chassis": [link(HGX)], "ManagedBy": [link(MANAGER)]}
    origin[SYSTEM] = SYSTEM
    note(
        SYSTEM,
        f"the tray's own facts (Model, serials, UUID, memory and processor summaries), Oem, PowerMode and links to what is not served left out; `HGX_Baseboard_0` is the HGX images' redfish-system-uri-name ({OPTIONS})",
    )
    docs[procs] = _collection(src, procs, [f"{procs}/{g}" for g in gpus])
    origin[procs] = procs
    note(procs, f"eight GPUs, no CPU (an HGX board carries GPUs only); {GPU_IDS}")

    chassis_ids = ["HGX_Chassis_0", *(f"HGX_{g}" for g in gpus)]
    docs[f"{ROOT}/Chassis"] = _collection(
        src, f"{ROOT}/Chassis", [f"{ROOT}/Chassis/{c}" for c in chassis_ids]
    )
    origin[f"{ROOT}/Chassis"] = f"{ROOT}/Chassis"
    note(f"{ROOT}/Chassis", "the HGX chassis and one chassis per GPU")
    docs[HGX] = _trimmed(src[HGX], ("EnvironmentMetrics",))
    docs[HGX]["Links"] = {
        "ComputerSystems": [link(SYSTEM)],
        "Contains": [link(f"{ROOT}/Chassis/HGX_{g}") for g in gpus],
        "ManagedBy": [link(MANAGER)],
    }
    origin[HGX] = HGX
    note(
        HGX,
        f"`HGX_Chassis_0` is bmcweb's platform-chassis-name ({OPTIONS}); Links.Contains: the GPU chassis; no Controls link (no GPU-total budget is published for this board); the tray's own facts and Oem left out",
    )
    em = copy.deepcopy(src[f"{HGX}/EnvironmentMetrics"])
    for key in ("PowerLimitWatts", "Actions", "Oem"):
        em.pop(key, None)
    docs[f"{HGX}/EnvironmentMetrics"], origin[f"{HGX}/EnvironmentMetrics"] = em, f"{HGX}/EnvironmentMetrics"
    note(
        f"{HGX}/EnvironmentMetrics",
        f"no PowerLimitWatts, no ClearOOBSetPoint: the GB300 tray's GPU-total budget (TotalGPU_Power_0) is published for no HGX {board} board",
    )

    for n, gpu in enumerate(gpus):
        captured = f"{procs}/GPU_{n % 4}"
        proc = f"{procs}/{gpu}"
        body = _trimmed(
            src[captured], ("EnvironmentMetrics",), drop=("@Redfish.Settings", "Metrics", "Ports")
        )
        body.update(
            {
                "@odata.id": proc,
                "EnvironmentMetrics": link(f"{proc}/EnvironmentMetrics"),
                "Id": gpu,
                "Links": {"Chassis": link(f"{ROOT}/Chassis/HGX_{gpu}")},
            }
        )
        docs[proc], origin[proc] = body, captured
        note(
            proc,
            f"renamed {gpu}; Links.Chassis its GPU chassis and EnvironmentMetrics its own ({PROCESSOR}); the tray's own facts (Model GB300, serials, clocks, firmware), Oem, Settings and links to what is not served left out",
        )
        doc = copy.deepcopy(src[f"{captured}/EnvironmentMetrics"])
        doc["@odata.id"] = f"{proc}/EnvironmentMetrics"
        doc["Name"] = f"{gpu} Environment Metrics"
        for key in ("PowerWatts", "EnergyJoules", "TemperatureCelsius"):
            if isinstance(doc.get(key), dict) and "DataSourceUri" in doc[key]:
                doc[key]["DataSourceUri"] = doc[key]["DataSourceUri"].replace(f"GPU_{n % 4}", gpu)
        for key in ("Actions", "Oem", "PowerLimitWatts"):
            doc.pop(key, None)
        if board == "B200":
            reading = 64.388
            doc["PowerWatts"]["Reading"] = reading
            for key in ("EnergyJoules", "EnergykWh", "TemperatureCelsius"):
                doc.pop(key, None)
            doc["PowerLimitWatts"] = {
                "AllowableMax": 1000,
                "AllowableMin": 200,
                "ControlMode": "Automatic",
                "DefaultSetPoint": 700,
                "Reading": reading,
                "SetPoint": 700,
            }
            note(
                f"{proc}/EnvironmentMetrics",
                f"PowerLimitWatts exactly as the {B200_GUIDE} shows it for `Systems/HGX_Baseboard_0/Processors/GPU_SXM_<id>/EnvironmentMetrics` (AllowableMin 200, AllowableMax 1000, DefaultSetPoint 700, SetPoint 700, ControlMode Automatic, Reading 64.388); {B200_GUIDE_EARLIER} showed AllowableMax 700; PowerWatts.Reading the same 64.388 W (bmcweb sets PowerLimitWatts.Reading from the power sensor, {ENV_UTIL} getSensorDataByService); no energy or temperature reading (none published); no ClearOOBSetPoint action, persistency or EDPp properties (the guide shows none)",
            )
        else:
            note(
                f"{proc}/EnvironmentMetrics",
                f"no PowerLimitWatts, no ClearOOBSetPoint, no persistency or EDPp properties: bmcweb adds them only for a GPU with a power-cap interface ({ENV_UTIL} getProcessorEnvironmentMetricsData, getPowerCap) and no public source shows an HGX H100 board's GPU limit (DPS drives DGX H100 power through the host BMC's Node Manager: https://docs.nvidia.com/datacenter/dps/versions/0.7.6/guides/concepts/redfish); readings and their sensor URIs renamed from the capture's GPU_{n % 4} (live measurements of a real NVIDIA GPU)",
            )
        docs[f"{proc}/EnvironmentMetrics"] = doc
        origin[f"{proc}/EnvironmentMetrics"] = f"{captured}/EnvironmentMetrics"

        chassis = f"{ROOT}/Chassis/HGX_{gpu}"
        captured_chassis = f"{ROOT}/Chassis/HGX_GPU_{n % 4}"
        body = _trimmed(src[captured_chassis], ())
        body.update(
            {
                "@odata.id": chassis,
                "Id": f"HGX_{gpu}",
                "Name": f"HGX_{gpu}",
                "Links": {
                    "ComputerSystems": [link(SYSTEM)],
                    "ContainedBy": link(HGX),
                    "ManagedBy": [link(MANAGER)],
                    "Processors": [link(proc)],
                },
            }
        )
        docs[chassis], origin[chassis] = body, captured_chassis
        note(
            chassis,
            f"renamed HGX_{gpu}; contained by HGX_Chassis_0 (no processor modules on an HGX board); no Controls or EnvironmentMetrics link (the GPU's limit, where it has one, is its Processor EnvironmentMetrics: {B200_GUIDE}); the tray's own facts (Model, Min/MaxPowerWatts, serials) and Oem left out",
        )

    docs[f"{ROOT}/Managers"] = _collection(src, f"{ROOT}/Managers", [MANAGER])
    origin[f"{ROOT}/Managers"] = f"{ROOT}/Managers"
    note(f"{ROOT}/Managers", "only HGX_BMC_0: the board's own BMC")
    manager = _trimmed(src[MANAGER], (), drop=("Actions", "Links", "SerialConsole", "ServiceIdentification"))
    docs[MANAGER], origin[MANAGER] = manager, MANAGER
    note(
        MANAGER,
        "no FirmwareVersion (the capture's is the GB200 tray's; no HGX release is published with its Redfish), no Actions, Links, Oem or links to what is not served",
    )
    return docs, origin


HGX_HEADER = """# nvidia-hgx-{name}: NVIDIA HGX {board} 8-GPU baseboard, as its own BMC (the HGX Management Controller, NVIDIA bmcweb) serves it

The board's BMC serves one system `HGX_Baseboard_0` (NVIDIA bmcweb's `redfish-system-uri-name` on HGX
images; `HGX_Chassis_0` is its `platform-chassis-name`, {options}) with eight GPUs `GPU_SXM_1..8`, each
a Processor linking its own EnvironmentMetrics and a GPU chassis `HGX_GPU_SXM_n`, and one manager
`HGX_BMC_0`. On a DGX the host BMC aggregates the same resources under the same URIs (the
nvidia-dgx-h100 mockups).

{gpus}

No CPU, no processor module and no node or GPU-total limit: an HGX board carries GPUs only, and no
public source shows a node or board budget it serves.

Every document is the corresponding resource of the GB300 NVL capture (the same NVIDIA bmcweb family,
real firmware: tests/corpus/redfish/nvidia-gb300-nvl, spyroot/redfish_ctl@114e8b52cfd6a87baed08facd144503692a0eb7f,
MIT), renamed and trimmed as noted: that tray's own facts (models, serial and part numbers, clocks,
firmware, UUIDs) are left out, never replaced by guesses. Built by `bmcsim/mockups/build.py`.
Licences: the capture is MIT; NVIDIA/bmcweb is Apache-2.0; NVIDIA's documentation is cited for facts
(property names and values), nothing copied but those.
"""
HGX_GPUS = {
    "H100": (
        "The GPUs' EnvironmentMetrics carry readings and no `PowerLimitWatts`: NVIDIA's bmcweb adds a limit only\n"
        f"for a GPU with a power-cap interface ({ENV_UTIL}, getProcessorEnvironmentMetricsData),\n"
        "and no public source shows one on an HGX H100 board (DPS drives DGX H100 power through the host BMC's\n"
        "Node Manager instead). devicectl refuses every cap here with that reason."
    ),
    "B200": (
        "The GPUs' EnvironmentMetrics offer `PowerLimitWatts` 200..1000 W, default and set point 700 W, as the\n"
        f"{B200_GUIDE} shows\n"
        "it (its earlier edition showed AllowableMax 700). devicectl caps each GPU there."
    ),
}
