"""NVIDIA HGX boards whose resources offer no limit devicectl may write (the DGX H100/H200 host BMC,
an HGX H100 board's own BMC): named by their evidence, every cap refused with why, nothing written.

Matched only by what the BMC shows, after every platform that writes and after `node-manager` (so a
BMC that offers any limit, or shows Node Manager domains, is never this one): processors under
`Systems/HGX_Baseboard_*`, and either
- an AMI service root (`Vendor: AMI`) serving a host system next to the HGX board's (a DGX host BMC;
  NVIDIA/nv-redfish `bmc_quirks.rs` calls this layout `AmiViking`), named by the DGX generation its
  GPUs' `Model` shows ("NVIDIA H100 ..." -> DGX H100), else its host system's; or
- only `HGX_*` systems: the HGX board's own BMC (the HGX Management Controller).

Why nothing is written: the GPUs' `EnvironmentMetrics` carry no `PowerLimitWatts` (NVIDIA's bmcweb
adds one only for a GPU with a power-cap interface), no chassis offers a `Power` limit or a power
`Control`, and no manager shows Node Manager, through which DPS caps DGX H100/H200
(docs/hardware.md). A board whose firmware does offer GPU limits matches `nvidia-hgx` first.
"""

from __future__ import annotations

import re
from dataclasses import replace

from plugins.redfish._discovery.layout import AUTO, LEGACY_POWER, Discovery, link_of, readings_only
from plugins.redfish._platforms.nvidia_hgx import nvidia_tray
from plugins.redfish._platforms.platform import Platform, Probe

#: a GPU model's generation ("NVIDIA H100 80GB HBM3" -> "H100"), as NVIDIA names its data-centre GPUs
_GENERATION = re.compile(r"\b([A-Z]{1,2}\d{2,3})\b")


def dgx_generation(models: list[str]) -> str:
    """`DGX H100` from the GPUs' (then the host's) `Model`, `DGX` when none names a generation."""
    for model in models:
        found = _GENERATION.search(model.upper().replace("DGX", " "))
        if found:
            return f"DGX {found.group(1)}"
    return "DGX"


async def probe(p: Probe) -> Discovery | None:
    """An NVIDIA HGX board (its own BMC, or a DGX's AMI host BMC in front of it) where no platform that
    writes matched: readings only, every cap refused naming the board or DGX and why."""
    if p.hint != AUTO or not nvidia_tray(p.processors):
        return None
    systems = await p.walker.members(link_of(p.root.body, "Systems"))
    hosts = [s for s in systems if not s.rstrip("/").rsplit("/", 1)[-1].startswith("HGX_")]
    boards = sorted({d.path.split("/Processors/")[0].rsplit("/", 1)[-1] for d in p.processors} - {""})
    boards = [b for b in boards if b.startswith("HGX_")]
    gpus = sorted({c.model for c in p.gpus if c.model})
    if hosts and str(p.root.get("Vendor") or "") == "AMI":
        host = await p.walker.find(hosts[0])
        host_model = str(host.get("Model") or "") if host is not None else ""
        name = f"{dgx_generation([*gpus, host_model])} host BMC"
        shown = (
            f"service root Vendor AMI; host system {hosts[0].rsplit('/', 1)[-1]}"
            + (f" (Model {host_model})" if host_model else "")
            + f" next to the HGX board's {', '.join(boards)}"
        )
        why = "its chassis no Power PowerLimit or power Control, and its managers show no Node Manager"
        why += " (through which DPS caps DGX H100/H200)"
    elif not hosts:
        name = "NVIDIA HGX board's own BMC"
        shown = f"its only systems are the HGX board's {', '.join(boards)}"
        why = "and no chassis of the board offers a Power PowerLimit, a power Control or a GPU-total limit"
    else:
        return None
    if gpus:
        shown += f"; GPUs {', '.join(gpus)}"
    note = (
        f"{name} (matched by its evidence: {shown}): the BMC offers no power-limit resource: "
        f"its GPUs' EnvironmentMetrics carry no PowerLimitWatts, {why}"
    )
    found = readings_only(p.base, p.chassis, p.gpus, p.cpus)
    return replace(
        found,
        platform=LEGACY_POWER,
        gpus=tuple(replace(c, reason=c.reason or note) for c in found.gpus),
        cpus=tuple(replace(c, reason=c.reason or note) for c in found.cpus),
        note=note,
        evidence=(*found.evidence, f"{name}: {shown}"),
    )


PLATFORM = Platform(
    name="nvidia-hgx-no-limit",
    matches=(
        "processors under Systems/HGX_Baseboard_*, no resource offering a limit and no Node Manager: an "
        "AMI service root with a host system next to them (NVIDIA DGX H100/H200 host BMC, nv-redfish "
        "AmiViking), or the HGX board's own BMC (its only systems are HGX_*)"
    ),
    writes="nothing: every cap is refused naming the DGX (by its GPUs' Model) or the HGX board, and why",
    restores="nothing",
    probe=probe,
    quirks=(
        "the host's CPUs (Systems/DGX) link no EnvironmentMetrics: none is read by convention",
        "a board whose firmware offers GPU limits is nvidia-hgx (probed first)",
    ),
    refuses=(
        "every cap: no resource offers a limit (the GPUs' EnvironmentMetrics carry no PowerLimitWatts, no "
        "chassis a Power limit or power Control, no manager Node Manager); the refusal names the DGX "
        "(DGX H100 host BMC) or the HGX board's own BMC and the evidence matched",
    ),
)
