"""NVIDIA platforms as mockup data (bmcsim/mockups, each with its SOURCES.md) and reads that survive one
missing resource on every capture of tests/corpus/redfish.

- discovery of each NVIDIA mockup: which components it finds and which caps its firmware offers;
- `std-metrics` answers `ok` on every capture and mockup, and when one linked resource answers 404
  (bmcsim's `http404` fault) it still answers `ok` with everything else and names that component absent;
- the DGX H100 (AMI host BMC + HGX board) reads only what its resources link.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from bmcsim import FaultMode
from bmcsim._platforms import MOCKUP_DIR, MOCKUPS
from plugins.base import (
    Empty,
    GpuMetricsQuery,
    GpuPoliciesChange,
    GpuPolicy,
    HealthQuery,
    PolicyAction,
    PolicyChange,
    PowerLimit,
)
from plugins.redfish import RedfishSettings
from plugins.redfish._discovery.evidence import cap_plan
from tests.plugins.redfish.corpus.cases import CASES, CORPUS, allowed_writes, policy, written_outside

#: the DPS model each mockup is inventoried as ("auto" where DPS has none)
TOPOLOGY = {
    "dgx-h100-gpu-caps": "DGX_H100",
    "gb200-nvl": "DGX_GB200",
    "gb200-nvl-gpu-caps": "DGX_GB200",
    "gh200": "auto",
    "dgx-h100": "DGX_H100",
    # an HGX board's own BMC: no DPS model is the board alone
    "hgx-h100": "auto",
    "hgx-b200": "auto",
}
SERVED = (
    [(c.id, f"mockup:{CORPUS / c.name}", "auto", c.system) for c in CASES]
    + [(name, name, TOPOLOGY[name], "") for name in MOCKUPS]
    # and probed without a DPS model (the DGX H100's host CPUs link no EnvironmentMetrics)
    + [(f"{name}-auto", name, "auto", "") for name in MOCKUPS if TOPOLOGY[name] != "auto"]
)


async def _std_metrics(h: Any, model: dict[str, str]) -> Any:
    return (await h.call("std_metrics", h.fleet.bmcs[0], Empty(), model=model)).result


@pytest.mark.parametrize(("name", "served", "topology", "system"), SERVED, ids=[s[0] for s in SERVED])
async def test_std_metrics_answer_ok_and_name_the_component_that_404s(
    make_harness: Callable[..., Any], name: str, served: str, topology: str, system: str
) -> None:
    model = {"Model": topology, "Name": name}
    async with make_harness(n=1, model=served) as h:
        if system:
            h.options["system"] = system
        bmc = h.fleet.bmcs[0]
        first = await _std_metrics(h, model)
        assert first.ok, first.error
        assert " absent: " not in first.error and " unknown: " not in first.error
        raw = (await h.call("raw_metrics", bmc, Empty(), model=model)).result
        assert raw.ok, raw.error
        uris = sorted(raw.documents)
        if not uris:
            # one BMC for several nodes without the `system` option: no node is named, nothing is read
            assert "option `system`" in first.error, first.error
            return
        # a GPU's or CPU's resource where the BMC links one, else the node's
        components = [u for u in uris if "/Processors/" in u] or uris
        gone = components[-1]
        bmc.faults.set(FaultMode.NOT_FOUND, path_contains=gone)
        after = await _std_metrics(h, model)
        if len(uris) == 1:
            assert not after.ok  # nothing left to answer with
        else:
            assert after.ok, after.error
        assert f"absent: {gone}" in after.error or (gone in after.error and "absent" in after.error), (
            after.error
        )
        bmc.faults.clear()
        again = await _std_metrics(h, model)
        assert again.ok and " absent: " not in again.error, again.error


def test_every_mockup_names_the_source_of_every_resource() -> None:
    for folder in MOCKUPS.values():
        root = MOCKUP_DIR / folder
        sources = (root / "SOURCES.md").read_text()
        named = {
            line.split("`")[1] for line in sources.splitlines() if line.startswith("- `") and "` <- " in line
        }
        served = {
            "/redfish/v1" + ("" if p.parent == root else "/" + p.parent.relative_to(root).as_posix())
            for p in root.rglob("index.json")
        }
        assert served == named, folder
        assert "@" in sources and ("Apache-2.0" in sources or "MIT" in sources)


# ---- discovery of each NVIDIA mockup: the components, and the limits its firmware offers ------------

#: (GPUs, CPUs) each mockup's processors show, by their BMC ids
COMPONENTS = {
    "gb200-nvl": (["GPU_0", "GPU_1", "GPU_2", "GPU_3"], ["CPU_0", "CPU_1"]),
    "gb200-nvl-gpu-caps": (["GPU_0", "GPU_1", "GPU_2", "GPU_3"], ["CPU_0", "CPU_1"]),
    "gh200": (["GPU_0", "GPU_1"], ["CPU_0", "CPU_1"]),
    # the host's Intel CPUs are under Systems/DGX, which an NVIDIA layout never reads (dps.md §7)
    "dgx-h100": ([f"GPU_SXM_{n}" for n in range(1, 9)], []),
    "dgx-h100-gpu-caps": ([f"GPU_SXM_{n}" for n in range(1, 9)], []),
    "hgx-h100": ([f"GPU_SXM_{n}" for n in range(1, 9)], []),
    "hgx-b200": ([f"GPU_SXM_{n}" for n in range(1, 9)], []),
}
#: which read documents carry an `EnvironmentMetrics.PowerLimitWatts` (the limits the firmware offers)
LIMITS = {
    "gb200-nvl": [],
    "gb200-nvl-gpu-caps": [
        f"/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_{n}/EnvironmentMetrics" for n in range(4)
    ],
    "gh200": [f"/redfish/v1/Chassis/HGX_ProcessorModule_{n}/EnvironmentMetrics" for n in range(2)],
    "dgx-h100": [],
    "dgx-h100-gpu-caps": [
        f"/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_SXM_{n}/EnvironmentMetrics" for n in range(1, 9)
    ],
    "hgx-h100": [],
    "hgx-b200": [
        f"/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_SXM_{n}/EnvironmentMetrics" for n in range(1, 9)
    ],
}


@pytest.mark.parametrize("name", list(MOCKUPS))
async def test_discovery_of_each_nvidia_mockup(make_harness: Callable[..., Any], name: str) -> None:
    model = {"Model": TOPOLOGY[name], "Name": name}
    async with make_harness(n=1, model=name) as h:
        bmc = h.fleet.bmcs[0]
        out = await h.call("std_metrics", bmc, Empty(), model=model)
        assert out.result.ok, out.result.error
        discovery = (out.state or {}).get("discovery") or {}
        gpus, cpus = COMPONENTS[name]
        assert [c["name"] for c in discovery["gpus"]] == gpus
        assert [c["name"] for c in discovery["cpus"]] == cpus
        metrics = out.result.metrics
        assert len(metrics.gpus) == len(gpus) and all(g.power_watts > 0 for g in metrics.gpus)
        raw = (await h.call("raw_metrics", bmc, Empty(), model=model)).result
        assert raw.ok, raw.error
        offered = {u for u, d in raw.documents.items() if isinstance(d.get("PowerLimitWatts"), dict)}
        # a limit scoped elsewhere by its evidence (GH200's module limits are its CPUs' caps) is where
        # discovery put that component's cap, not among the components' own readings
        placed = {c.get("limit_uri") for part in ("node", "gpus", "cpus") for c in discovery.get(part) or ()}
        assert sorted(offered | (placed - {None, ""})) == LIMITS[name]
        # every URI read is one a resource links (none built by convention): all answered
        assert not any(u.endswith(("/CPU_0/EnvironmentMetrics",)) and "DGX" in u for u in raw.documents)
        assert bmc.state.writes == []


def test_gh200_module_limits_are_the_grace_cpus_edpp_controls() -> None:
    root = MOCKUP_DIR / MOCKUPS["gh200"]
    for n in range(2):
        em = json.loads((root / f"Chassis/HGX_ProcessorModule_{n}/EnvironmentMetrics/index.json").read_text())
        limit = em["PowerLimitWatts"]
        assert (limit["AllowableMin"], limit["AllowableMax"]) == (50, 420)
        control = json.loads(
            (root / limit["DataSourceUri"].removeprefix("/redfish/v1/") / "index.json").read_text()
        )
        assert control["Id"].startswith(f"ProcessorModule_{n}_EDPp")
        assert control["PhysicalContext"] == "CPU" and control["ControlType"] == "Power"
        assert control["RelatedItem"] == [
            {"@odata.id": f"/redfish/v1/Systems/HGX_Baseboard_0/Processors/CPU_{n}"}
        ]
    chassis = [p.parent.name for p in (root / "Chassis").glob("*/index.json")]
    for cid in chassis:
        em = root / "Chassis" / cid / "EnvironmentMetrics" / "index.json"
        if em.is_file() and "ProcessorModule" not in cid:
            assert "PowerLimitWatts" not in json.loads(em.read_text())  # no node limit on this board


# ---- what the write gate makes of these mockups ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "watts"),
    [
        ("gb200-nvl", {"node": 3000}),
        ("gb200-nvl", {"gpu": 4000}),
        ("gh200", {"node": 800}),
        ("hgx-h100", {"node": 5000}),
        ("hgx-h100", {"gpu": 4000}),
        ("hgx-b200", {"node": 5000}),
    ],
)
async def test_a_cap_the_firmware_does_not_offer_is_refused_and_nothing_written(
    make_harness: Callable[..., Any], name: str, watts: dict[str, int]
) -> None:
    model = {"Model": TOPOLOGY[name], "Name": name}
    async with make_harness(n=1, model=name) as h:
        bmc = h.fleet.bmcs[0]
        await h.call("std_metrics", bmc, Empty(), model=model)
        h.reset()
        out = await h.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(**watts)), model=model)
        assert not out.result.ok
        tried = [k for k in h.calls(bmc) if k.startswith(("PATCH", "POST")) and "SessionService" not in k]
        assert tried == [] and bmc.state.writes == []


async def test_dgx_h100_reads_only_linked_resources(make_harness: Callable[..., Any]) -> None:
    model = {"Model": "DGX_H100", "Name": "dgx"}
    async with make_harness(n=1, model="dgx-h100") as h:
        bmc = h.fleet.bmcs[0]
        out = await h.call("std_metrics", bmc, Empty(), model=model)
        assert out.result.ok and out.result.error == "", out.result.error
        assert out.result.metrics.power_watts > 0 and len(out.result.metrics.gpus) == 8
        assert bmc.stats.to_dict()  # served
        h.reset()
        out = await h.call("gpu_metrics", bmc, GpuMetricsQuery())
        assert out.result.ok and [u.gpu_id for u in out.result.metrics] == list(range(8))
        assert all(not k.endswith("/EnvironmentMetrics") or "GPU_SXM_" in k for k in h.calls(bmc))
        # one GPU's resource gone: the other seven answer, GPU 2 is named absent
        bmc.faults.set(FaultMode.NOT_FOUND, path_contains="/GPU_SXM_3/EnvironmentMetrics")
        out = await h.call("gpu_metrics", bmc, GpuMetricsQuery())
        assert out.result.ok and [u.gpu_id for u in out.result.metrics] == [0, 1, 3, 4, 5, 6, 7]
        assert "GPU 2 absent:" in out.result.error and "404" in out.result.error, out.result.error


async def test_a_malformed_resource_leaves_its_component_unknown(make_harness: Callable[..., Any]) -> None:
    model = {"Model": "DGX_GB200", "Name": "gb200"}
    async with make_harness(n=1, model="gb200-nvl") as h:
        bmc = h.fleet.bmcs[0]
        assert (await _std_metrics(h, model)).ok
        bmc.faults.set(FaultMode.INVALID_JSON, path_contains="/Processors/GPU_1/EnvironmentMetrics")
        out = await _std_metrics(h, model)
        assert out.ok, out.error
        assert "GPU 1 unknown: " in out.error and "absent" not in out.error.split("GPU 1 unknown: ")[0]
        assert [g.power_watts > 0 for g in out.metrics.gpus] == [True, False, True, True]
        raw = (await h.call("raw_metrics", bmc, Empty(), model=model)).result
        assert raw.ok and "GPU 1 unknown: " in raw.error, raw.error
        gpu = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_1/EnvironmentMetrics"
        assert gpu not in raw.documents and len(raw.documents) > 1


async def test_a_resource_that_times_out_leaves_its_component_unknown(
    make_harness: Callable[..., Any],
) -> None:
    model = {"Model": "DGX_GB200", "Name": "gb200"}
    settings = RedfishSettings(read_timeout=0.5)
    async with make_harness(settings, n=1, model="gb200-nvl") as h:
        bmc = h.fleet.bmcs[0]
        assert (await _std_metrics(h, model)).ok
        bmc.faults.set(FaultMode.HANG, path_contains="/Processors/GPU_2/EnvironmentMetrics")
        out = await _std_metrics(h, model)
        assert out.ok, out.error
        assert "GPU 2 unknown: " in out.error, out.error
        assert [g.power_watts > 0 for g in out.metrics.gpus] == [True, True, False, True]


async def test_verify_names_the_component_whose_resource_is_gone(make_harness: Callable[..., Any]) -> None:
    model = {"Model": "DGX_H100", "Name": "dgx"}
    async with make_harness(n=1, model="dgx-h100") as h:
        bmc = h.fleet.bmcs[0]
        bmc.faults.set(FaultMode.NOT_FOUND, path_contains="/GPU_SXM_5/EnvironmentMetrics")
        query = HealthQuery(telemetry_interval_ms=20, latency_samples=5)
        out = await h.call("bmc_health", bmc, query, model=model)
        telemetry = next(c for c in out.result.checks if c.name == "telemetry")
        assert "GPU 4 absent: " in telemetry.detail and "404" in telemetry.detail, telemetry.detail
        # the other checks still ran and answered
        assert {c.name for c in out.result.checks} > {"telemetry"}


# ---- HGX baseboards as their own BMC serves them (bmcsim/mockups/nvidia-hgx-*) ----------------------

GPU_EM = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_SXM_{}/EnvironmentMetrics"
AUTO = {"Model": "auto", "Name": "hgx"}


def _writes(h: Any, bmc: Any) -> list[str]:
    return [k for k in h.calls(bmc) if k.startswith(("PATCH", "POST")) and "SessionService" not in k]


async def test_hgx_b200_gpu_caps_land_on_each_gpus_own_limit_and_are_restored_exactly(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(n=1, model="hgx-b200") as h:
        bmc = h.fleet.bmcs[0]
        state: Any = bmc.state
        before = copy.deepcopy(state.documents)
        reads = await h.call("gpu_metrics", bmc, GpuMetricsQuery())
        assert reads.result.ok and [round(u.watts, 3) for u in reads.result.metrics] == [64.388] * 8
        # the board offers no node limit (no public source shows one): refused, nothing written
        node = await h.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(node=5000)), model=AUTO)
        assert not node.result.ok and state.writes == []
        assert "no resource of this BMC carries a node power limit" in node.result.error
        # each GPU's own limit, within the 200..1000 W the DGX B200 user guide shows
        out = await h.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(gpu=4000)), model=AUTO)
        assert out.result.ok, out.result.error
        assert state.writes == [
            ("PATCH", GPU_EM.format(n), {"PowerLimitWatts": {"SetPoint": 500}}) for n in range(1, 9)
        ]
        assert state.documents[GPU_EM.format(3)]["PowerLimitWatts"]["SetPoint"] == 500
        discovery = (out.state or {})["discovery"]
        assert written_outside(state.writes, allowed_writes(discovery, {f"gpu/{n}" for n in range(8)})) == []
        assert "matched nvidia-hgx" in "\n".join(cap_plan(out.state or {}))
        await h.call("unset_policy", bmc, PolicyChange(PolicyAction.UNSET, None), model=AUTO)
        assert state.documents == before  # every GPU back at its prior 700 W, nothing else touched


async def test_hgx_b200_gpu_caps_outside_the_published_range_are_refused_naming_it(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(n=1, model="hgx-b200") as h:
        bmc = h.fleet.bmcs[0]
        for watts, bound in ((150, "200 W"), (1100, "1000 W")):
            change = GpuPoliciesChange("rg", PolicyAction.SET, None, (GpuPolicy(0, PowerLimit(watts=watts)),))
            out = await h.call("update_gpu_policies", bmc, change, model=AUTO)
            assert not out.result.results[0].ok
            assert bound in out.result.results[0].message, out.result.results[0].message
        assert bmc.state.writes == [] and _writes(h, bmc) == []


async def test_hgx_h100_refuses_every_cap_naming_the_board_and_why(make_harness: Callable[..., Any]) -> None:
    async with make_harness(n=1, model="hgx-h100") as h:
        bmc = h.fleet.bmcs[0]
        reads = await h.call("gpu_metrics", bmc, GpuMetricsQuery())
        assert reads.result.ok and len(reads.result.metrics) == 8
        assert all(u.watts > 0 for u in reads.result.metrics)
        node = await h.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(node=5000)), model=AUTO)
        gpus = await h.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(gpu=4000)), model=AUTO)
        one = GpuPoliciesChange("rg", PolicyAction.SET, None, (GpuPolicy(0, PowerLimit(watts=500)),))
        gpu = await h.call("update_gpu_policies", bmc, one, model=AUTO)
        assert bmc.state.writes == [] and _writes(h, bmc) == []
        for error in (node.result.error, gpus.result.error, gpu.result.results[0].message):
            assert "NVIDIA HGX board's own BMC (matched by its evidence" in error, error
            assert "GPUs' EnvironmentMetrics carry no PowerLimitWatts" in error
        assert not node.result.ok and not gpus.result.ok and not gpu.result.results[0].ok
        plan = "\n".join(cap_plan(gpu.state or {}))
        assert "matched nvidia-hgx-no-limit" in plan and "GPU 0-7: refused" in plan
