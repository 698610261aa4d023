# ruff: noqa: E501  (source notes are data: one line each in SOURCES.md)
"""Rebuild the NVIDIA mockups in this folder (`python bmcsim/mockups/build.py`); each folder's SOURCES.md
says where every resource comes from and what the rules below change, with their sources."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

from dgx_h100 import DGX_HEADER, dgx_h100  # type: ignore[import-not-found]  # run as a script
from hgx import HGX_GPUS, HGX_HEADER, hgx_board  # type: ignore[import-not-found]

HERE = Path(__file__).resolve().parent
GB300 = HERE.parents[1] / "tests" / "corpus" / "redfish" / "nvidia-gb300-nvl"
ROOT = "/redfish/v1"
BMCWEB = "NVIDIA/bmcweb@7f3a16ae3f92f8fcd27d9d3beede1326746a4dd1"
NV_REDFISH = "NVIDIA/nv-redfish@7ac21814931705ba0e99aa0ae9929f4f6f019c43 (Apache-2.0)"
NSMD = "NVIDIA/nsmd@85facbbc992bb4672d20ebd37f021d76c2b44e75"
ENV_UTIL = f"{BMCWEB} redfish-core/include/utils/environment_util.hpp"
#: what each rule below changes, and its source
CHANGED: dict[str, str] = {}


def gb300_sources() -> dict[str, str]:
    """Served path -> the file of the GB300 capture it came from (its SOURCES)."""
    out = {}
    for line in (GB300 / "SOURCES").read_text().splitlines():
        if line.startswith("/redfish/v1") and " <- " in line:
            path, _, file = line.partition(" <- ")
            out[path] = f"spyroot/redfish_ctl@114e8b52cfd6a87baed08facd144503692a0eb7f (MIT) {file}"
    return out


#: the service links every NVIDIA bmcweb root has (the simulator serves these services itself)
SERVICES = {
    "AccountService": {"@odata.id": f"{ROOT}/AccountService"},
    "Links": {"Sessions": {"@odata.id": f"{ROOT}/SessionService/Sessions"}},
    "SessionService": {"@odata.id": f"{ROOT}/SessionService"},
    "Tasks": {"@odata.id": f"{ROOT}/TaskService"},
}


def note(path: str, change: str) -> None:
    CHANGED[path] = f"{CHANGED[path]}; {change}" if path in CHANGED else change


def load(directory: Path) -> dict[str, Any]:
    docs = {}
    for file in sorted(directory.rglob("index.json")):
        rel = file.parent.relative_to(directory).as_posix()
        docs[ROOT if rel == "." else f"{ROOT}/{rel}"] = json.loads(file.read_text())
    return docs


def write(
    directory: Path, docs: dict[str, Any], meta: dict[str, Any], header: str, origin: dict[str, str]
) -> None:
    for old in directory.iterdir() if directory.exists() else ():
        if old.is_dir():
            shutil.rmtree(old)
        elif old.name in ("index.json", "capture.json"):
            old.unlink()
    for path, body in docs.items():
        rel = path[len(ROOT) :].lstrip("/")
        target = directory / rel / "index.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
    (directory / "capture.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    lines = [
        header.strip(),
        "",
        "## Every resource: `served path` <- repository@commit file (and what was changed, why)",
        "",
    ]
    for path in sorted(docs):
        line = f"- `{path}` <- {origin[path]}"
        if path in CHANGED:
            line += f"; changed: {CHANGED[path]}"
        lines.append(line)
    (directory / "SOURCES.md").write_text("\n".join(lines) + "\n")
    CHANGED.clear()


def drop_member(docs: dict[str, Any], collection: str, member: str) -> None:
    docs.pop(member, None)
    body = docs[collection]
    body["Members"] = [m for m in body["Members"] if m["@odata.id"] != member]
    body["Members@odata.count"] = len(body["Members"])


def link(path: str) -> dict[str, str]:
    return {"@odata.id": path}


# ---- GB200 NVL compute tray -----------------------------------------------------------------------


def gb200(gpu_caps: bool) -> dict[str, Any]:
    docs = load(GB300)
    root = docs[ROOT]
    root.pop("Oem", None)  # the crawler's note that it synthesized the root
    root.update(Vendor="NVIDIA", Product="GB200 NVL")
    root.update(SERVICES)
    note(
        ROOT,
        f"the service links bmcweb always shows ({BMCWEB} redfish-core/lib/service_root.hpp): Links.Sessions, AccountService, SessionService, Tasks",
    )
    sys = f"{ROOT}/Systems/HGX_Baseboard_0/Processors"
    for n in range(4):
        docs[f"{sys}/GPU_{n}"]["Model"] = "NVIDIA GB200"
        em = docs[f"{sys}/GPU_{n}/EnvironmentMetrics"]
        nvidia = em["Oem"]["Nvidia"]
        note(f"{sys}/GPU_{n}", "Model GB200")
        if gpu_caps:
            em["PowerLimitWatts"].update(AllowableMax=1200, DefaultSetPoint=1200, SetPoint=1200)
            note(
                f"{sys}/GPU_{n}/EnvironmentMetrics",
                f"PowerLimitWatts kept (nsmd's GPU power cap, {NSMD} nsmd/nsmProcessor/nsmProcessor.hpp, read by {ENV_UTIL} getPowerCap), GB200 range 200..1200 W",
            )
            continue
        note(
            f"{sys}/GPU_{n}/EnvironmentMetrics",
            f"no PowerLimitWatts, no ClearOOBSetPoint, no persistency properties: bmcweb adds them only for a GPU object with xyz.openbmc_project.Control.Power.Cap / com.nvidia.Common.ClearPowerCap / Control.Power.Persistency ({ENV_UTIL} getPowerCap, getClearPowerCap, getPowerLimitPersistency); this firmware's GPUs have none",
        )
        del em["PowerLimitWatts"]
        del em["Actions"]["Oem"]["#NvidiaEnvironmentMetrics.ClearOOBSetPoint"]
        for key in (
            "PowerLimitPersistency",
            "RequestedOneshotPowerLimitWatts",
            "RequestedPersistentPowerLimitWatts",
        ):
            nvidia.pop(key, None)
    for n in range(2):
        del docs[f"{sys}/CPU_{n}/EnvironmentMetrics"]["PowerLimitWatts"]
        note(
            f"{sys}/CPU_{n}/EnvironmentMetrics",
            f"no PowerLimitWatts: no published GB200 source shows a Grace TDP control ({ENV_UTIL} getCpuPowerCapData adds one only where the CPU has a persistent Control.Power.Cap)",
        )
        note(f"{ROOT}/Chassis/HGX_CPU_{n}/Controls", "no TDP Control members (as the CPU EnvironmentMetrics)")
        controls = f"{ROOT}/Chassis/HGX_CPU_{n}/Controls"
        for member in [m["@odata.id"] for m in docs[controls]["Members"]]:
            drop_member(docs, controls, member)
        module = f"{ROOT}/Chassis/HGX_ProcessorModule_{n}"
        em = docs[f"{module}/EnvironmentMetrics"]
        del em["PowerLimitWatts"], em["Actions"]
        drop_member(docs, f"{module}/Controls", f"{module}/Controls/HGX_ProcessorModule_{n}")
        note(
            f"{module}/EnvironmentMetrics",
            f"no PowerLimitWatts and no ClearOOBSetPoint: GB200 NVL compute-tray firmware shows no module power control (bmcweb adds them from a power_controls association, {ENV_UTIL} getPowerLimits/getControlMode; nsmd's module control {NSMD} nsmd/nsmChassis/nsmProcessorModulePowerControl.hpp is configured on GB300, whose capture shows it)",
        )
        note(f"{module}/Controls", "no module Control member (as the EnvironmentMetrics)")
    hgx = f"{ROOT}/Chassis/HGX_Chassis_0"
    em = docs[f"{hgx}/EnvironmentMetrics"]
    del em["PowerLimitWatts"], em["Actions"]
    drop_member(docs, f"{hgx}/Controls", f"{hgx}/Controls/TotalGPU_Power_0")
    note(f"{hgx}/EnvironmentMetrics", "no GPU-total budget: none published for GB200")
    note(f"{hgx}/Controls", "no TotalGPU_Power_0 member")
    note(
        ROOT,
        "Vendor NVIDIA, Product GB200 NVL (NVIDIA bmcweb's service root; nv-redfish redfish/src/bmc_quirks.rs classifies NVIDIA trays by Vendor NVIDIA); the crawler's synthesized-root note removed",
    )
    return docs


# ---- GH200 ----------------------------------------------------------------------------------------


def gh200() -> dict[str, Any]:
    """Two Grace Hopper modules (CPU_n + GPU_n each); each module's PowerLimitWatts is its Grace CPU's
    EDPp control (50..420 W, PhysicalContext CPU)."""
    src = gb200(gpu_caps=False)
    CHANGED.clear()  # the GB200 rules' notes: GH200 documents say their own changes
    keep = (
        ROOT,
        f"{ROOT}/Systems",
        f"{ROOT}/Managers",
        f"{ROOT}/Managers/BMC_0",
        f"{ROOT}/Managers/HGX_BMC_0",
    )
    docs = {p: copy.deepcopy(src[p]) for p in keep}
    docs[ROOT]["Product"] = "GH200"
    docs[ROOT]["Chassis"] = link(f"{ROOT}/Chassis")
    systems = docs[f"{ROOT}/Systems"]
    systems["Members"] = [link(f"{ROOT}/Systems/HGX_Baseboard_0")]
    systems["Members@odata.count"] = 1
    board = copy.deepcopy(src[f"{ROOT}/Systems/HGX_Baseboard_0"])
    board["Model"] = "GH200"
    docs[f"{ROOT}/Systems/HGX_Baseboard_0"] = board
    procs = f"{ROOT}/Systems/HGX_Baseboard_0/Processors"
    names = ["CPU_0", "CPU_1", "GPU_0", "GPU_1"]
    docs[procs] = {
        **src[procs],
        "Members": [link(f"{procs}/{p}") for p in names],
        "Members@odata.count": len(names),
    }
    chassis_ids = ["Chassis_0", "HGX_Chassis_0"]
    for n in range(2):
        for kind in ("CPU", "GPU"):
            doc = copy.deepcopy(src[f"{procs}/{kind}_{n}"])
            doc["Links"]["Chassis"] = link(f"{ROOT}/Chassis/HGX_ProcessorModule_{n}")
            doc["Location"]["PartLocationContext"] = f"HGX_Chassis_0/ProcessorModule_{n}"
            doc["Model"] = "Grace A02P" if kind == "CPU" else "NVIDIA GH200 480GB"
            docs[f"{procs}/{kind}_{n}"] = doc
            em = copy.deepcopy(src[f"{procs}/{kind}_{n}/EnvironmentMetrics"])
            docs[f"{procs}/{kind}_{n}/EnvironmentMetrics"] = em
            for key in ("EnergyJoules", "PowerWatts", "TemperatureCelsius"):
                if key in em and "DataSourceUri" in em[key]:
                    em[key]["DataSourceUri"] = em[key]["DataSourceUri"].replace(
                        f"HGX_{kind}_{n}", f"HGX_ProcessorModule_{n}"
                    )
        module = f"{ROOT}/Chassis/HGX_ProcessorModule_{n}"
        chassis_ids.append(f"HGX_ProcessorModule_{n}")
        body = copy.deepcopy(src[module])
        body["Links"]["Processors"] = [link(f"{procs}/CPU_{n}"), link(f"{procs}/GPU_{n}")]
        body["Links"].pop("Contains", None)
        body["Model"] = "GH200"
        docs[module] = body
        control = f"ProcessorModule_{n}_EDPp_0"
        note(f"{module}/Controls", "rebuilt: its one member is the CPU EDPp Control")
        docs[f"{module}/Controls"] = {
            "@odata.id": f"{module}/Controls",
            "@odata.type": "#ControlCollection.ControlCollection",
            "Members": [link(f"{module}/Controls/{control}")],
            "Members@odata.count": 1,
            "Name": "Controls",
        }
        docs[f"{module}/Controls/{control}"] = {
            "@odata.id": f"{module}/Controls/{control}",
            "@odata.type": "#Control.v1_3_0.Control",
            "AllowableMax": 420,
            "AllowableMin": 50,
            "ControlMode": "Automatic",
            "ControlType": "Power",
            "Id": control,
            "Name": "CPU EDPp Power Control",
            "PhysicalContext": "CPU",
            "RelatedItem": [link(f"{procs}/CPU_{n}")],
            "SetPoint": 420,
            "SetPointUnits": "W",
            "Status": {"Health": "OK", "State": "Enabled"},
        }
        em = copy.deepcopy(src[f"{module}/EnvironmentMetrics"])
        em["PowerLimitWatts"] = {
            "AllowableMax": 420,
            "AllowableMin": 50,
            "ControlMode": "Automatic",
            "DataSourceUri": f"{module}/Controls/{control}",
            "DefaultSetPoint": 420,
            "SetPoint": 420,
        }
        em["Actions"] = {
            "Oem": {
                "#NvidiaEnvironmentMetrics.ClearOOBSetPoint": {
                    "target": f"{module}/EnvironmentMetrics/Actions/Oem/NvidiaEnvironmentMetrics.ClearOOBSetPoint"
                }
            }
        }
        docs[f"{module}/EnvironmentMetrics"] = em
        note(
            f"{module}/EnvironmentMetrics",
            f"PowerLimitWatts 50..420 W naming the CPU EDPp Control ({ENV_UTIL} getPowerLimitDataSourceUri)",
        )
        note(module, "Links.Processors: its CPU and GPU; Model GH200")
        note(f"{procs}/CPU_{n}", "links its module chassis")
        note(f"{procs}/GPU_{n}", "links its module chassis; Model GH200")
    note(ROOT, "Product GH200")
    note(f"{ROOT}/Systems", "only HGX_Baseboard_0")
    note(f"{ROOT}/Chassis", "the node chassis and the two modules")
    note(procs, "two CPUs, two GPUs")
    for cid in ("Chassis_0", "HGX_Chassis_0"):
        for suffix in ("", "/EnvironmentMetrics"):
            body = copy.deepcopy(src[f"{ROOT}/Chassis/{cid}{suffix}"])
            docs[f"{ROOT}/Chassis/{cid}{suffix}"] = body
        body = docs[f"{ROOT}/Chassis/{cid}"]
        body.pop("Controls", None)
        body.get("Links", {}).pop("Contains", None)
        body["Model"] = "GH200"
    docs[f"{ROOT}/Chassis"] = {
        **src[f"{ROOT}/Chassis"],
        "Members": [link(f"{ROOT}/Chassis/{c}") for c in chassis_ids],
        "Members@odata.count": len(chassis_ids),
    }
    return docs


GB200_HEADER = """# nvidia-gb200-nvl{suffix}: NVIDIA GB200 NVL compute tray ({what})

NVIDIA's OpenBMC firmware (bmcweb) on a GB200 NVL compute tray: two superchip modules
(`HGX_ProcessorModule_0/1`), each one Grace CPU and two GPUs. Built by `bmcsim/mockups/build.py` from the
capture of the same firmware family on a GB300 NVL tray (tests/corpus/redfish/nvidia-gb300-nvl), with
the property sets NVIDIA's bmcweb fork emits for what this firmware has ({bmcweb},
redfish-core/lib/environment_metrics.hpp and redfish-core/include/utils/environment_util.hpp).

What the GB200 firmware serves differently from the GB300 capture, each with its source:
- the processor modules' EnvironmentMetrics carry no `PowerLimitWatts` (and no `ClearOOBSetPoint`),
  as a GB200 NVL tray's firmware answered when checked from outside this repository: there is no node
  limit on this tray;
{gpus}
- the Grace CPUs' EnvironmentMetrics carry no `PowerLimitWatts`: no published GB200 source shows one.

Licences: the capture is MIT (spyroot/redfish_ctl); NVIDIA/bmcweb is Apache-2.0; NVIDIA/nv-redfish and
NVIDIA/nsmd are Apache-2.0. Contents are data (property names and values), no code.
"""
GPU_NO = "- the GPUs' EnvironmentMetrics offer no limit (no `PowerLimitWatts`): that firmware's answer, and\n  bmcweb emits `PowerLimitWatts` only for a GPU object with a power-cap interface;"
GPU_YES = f"- the GPUs' EnvironmentMetrics offer `PowerLimitWatts` 200..1200 W: firmware whose nsmd publishes the\n  GPU power cap ({NSMD} nsmd/nsmProcessor/nsmProcessor.hpp), which bmcweb's getPowerCap shows;"

GH200_HEADER = f"""# nvidia-gh200: NVIDIA GH200 (two Grace Hopper modules), NVIDIA OpenBMC firmware

Two modules `HGX_ProcessorModule_0/1`, each one Grace CPU (`CPU_n`) and one Hopper GPU (`GPU_n`).
Each module's EnvironmentMetrics `PowerLimitWatts` (50..420 W) is its Grace CPU's EDPp limit: its
`DataSourceUri` names the Control `ProcessorModule_n_EDPp_0`, whose `PhysicalContext` is `CPU` and whose
`RelatedItem` is the CPU; the board offers no node limit. bmcweb builds that `DataSourceUri` as
`/redfish/v1/Chassis/<id>/Controls/<control>` ({ENV_UTIL}, getPowerLimitDataSourceUri and
getCpuPowerCapData) and the EDPp set point is a Grace control (`com.nvidia.Edpp`, same file, patchEdppSetPoint).
The GPUs' EnvironmentMetrics offer no limit (no published GH200 source shows one). Built by
`bmcsim/mockups/build.py`; documents not named below as new come from the GB300 NVL capture of the same
firmware family (tests/corpus/redfish/nvidia-gb300-nvl, MIT), changed as noted.
"""


def main() -> None:
    gb300 = gb300_sources()
    for suffix, gpu_caps, what, firmware in (
        ("", False, "firmware whose GPUs offer no limit", "GB200Nvl-24.10-4"),
        ("-gpu-caps", True, "firmware whose GPUs offer a limit", "GB200Nvl-25.06-2"),
    ):
        docs = gb200(gpu_caps=gpu_caps)
        header = GB200_HEADER.format(
            suffix=suffix, what=what, bmcweb=BMCWEB, gpus=GPU_YES if gpu_caps else GPU_NO
        )
        meta = {"topology_model": "DGX_GB200", "firmware_version": firmware}
        write(HERE / f"nvidia-gb200-nvl{suffix}", docs, meta, header, gb300)
    docs = gh200()
    new = f"new, from {ENV_UTIL} (getCpuPowerCapData, getPowerLimitDataSourceUri, patchEdppSetPoint)"
    origin = {p: gb300.get(p, new) for p in docs}
    write(
        HERE / "nvidia-gh200",
        docs,
        {"topology_model": "auto", "firmware_version": "GH200-24.09-1"},
        GH200_HEADER,
        origin,
    )
    built = f"built from {NV_REDFISH} redfish/src/bmc_quirks.rs (AMI Viking layout) and {ENV_UTIL} (EnvironmentMetrics property set)"
    meta = {"topology_model": "DGX_H100", "firmware_version": "24.09.17"}
    for suffix, gpu_caps in (("", False), ("-gpu-caps", True)):
        docs = dgx_h100(gpu_caps)
        header = DGX_HEADER.format(
            suffix=suffix,
            what=", whose GPUs offer a limit" if gpu_caps else "",
            gpus=" and `PowerLimitWatts` 200..700 W (getPowerCap's property set)"
            if gpu_caps
            else " and no limit",
        )
        write(HERE / f"nvidia-dgx-h100{suffix}", docs, meta, header, dict.fromkeys(docs, built))
    for board in ("H100", "B200"):
        docs, captured = hgx_board(load(GB300), board, note)
        origin = {p: gb300[c] for p, c in captured.items()}
        header = HGX_HEADER.format(
            name=board.lower(), board=board, options=f"{BMCWEB} meson.options", gpus=HGX_GPUS[board]
        )
        meta = {"topology_model": "auto"}
        write(HERE / f"nvidia-hgx-{board.lower()}", docs, meta, header, origin)


if __name__ == "__main__":
    main()
