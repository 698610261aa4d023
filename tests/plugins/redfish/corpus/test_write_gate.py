"""The write gate and evidence-based scope, on shaped fixtures (tests/corpus/redfish/shaped) served by
the simulator's replay engine, whose write log shows every PATCH and POST that reached the BMC.

- a GB200 tray whose EnvironmentMetrics carry no `PowerLimitWatts`: node, GPU and CPU caps are
  refused with the reason and nothing is written, whether probed (`auto`) or named (`DGX_GB200`);
- a GH200 whose processor-module limits are the Grace CPUs' EDPp controls: the node cap is refused
  (this board offers none), a CPU cap lands on the module limit and is restored exactly;
  (`inventory check --login`'s plan and `devices show` give the reason);
- a limit removed after discovery is refused at write time by the gate, nothing is written;
- a Lenovo XCC OEM capping range: a cap below its minimum is refused naming it.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from bmcsim import FaultMode
from bmcsim._bmcweb import DPS_ALLOW_LIST
from controller.desired.in_force import in_force
from plugins.base import (
    Empty,
    GpuPoliciesChange,
    GpuPolicy,
    PolicyAction,
    PolicyChange,
    PowerLimit,
)
from plugins.redfish._discovery.evidence import cap_plan
from tests.plugins.redfish.corpus.cases import CORPUS, allowed_writes, policy, written_outside

SHAPED = CORPUS / "shaped"
GB200 = SHAPED / "nvidia-gb200-tray"
GB300 = CORPUS / "nvidia-gb300-nvl"
GH200 = SHAPED / "nvidia-gh200"
LENOVO = SHAPED / "lenovo-xcc-oem-range"
MODULE_EM = "/redfish/v1/Chassis/HGX_ProcessorModule_{}/EnvironmentMetrics"
UNSET = PolicyChange(PolicyAction.UNSET, None)


def cap(**watts: float) -> PolicyChange:
    return PolicyChange(PolicyAction.SET, policy(**watts))


def gpu_cap(watts: float) -> GpuPoliciesChange:
    return GpuPoliciesChange("rg", PolicyAction.SET, None, (GpuPolicy(0, PowerLimit(watts=watts)),))


@asynccontextmanager
async def served(
    make_harness: Callable[..., Any], mockup: Path, allow_list: tuple[Any, ...] | None = None
) -> AsyncIterator[tuple[Any, Any, Any]]:
    """One simulated BMC serving `mockup` (behind `allow_list`, a proxy's, where given): the
    harness, the BMC and its state (documents and write log)."""
    async with make_harness(n=1, model=f"mockup:{mockup}") as h:
        bmc = h.fleet.bmcs[0]
        if allow_list is not None:
            bmc.configure(allow_list=allow_list)
        yield h, bmc, bmc.state


async def test_a_gb200_tray_without_limits_refuses_node_gpu_and_cpu_caps_and_writes_nothing(
    make_harness: Callable[..., Any],
) -> None:
    for model in ({"Model": "auto", "Name": "gb200"}, {"Model": "DGX_GB200", "Name": "gb200"}):
        async with make_harness(n=1, model=f"mockup:{GB200}") as h:
            bmc = h.fleet.bmcs[0]
            metrics = await h.call("std_metrics", bmc, Empty(), model=model)
            assert metrics.result.ok, metrics.result.error
            node = await h.call(
                "set_policy", bmc, PolicyChange(PolicyAction.SET, policy(node=2000)), model=model
            )
            cpu = await h.call(
                "set_policy", bmc, PolicyChange(PolicyAction.SET, policy(cpu=300)), model=model
            )
            gpu = await h.call("update_gpu_policies", bmc, gpu_cap(1000), model=model)
            assert bmc.state.writes == [], model
            assert not node.result.ok and "node power limit: unsupported" in node.result.error
            assert not cpu.result.ok
            assert not gpu.result.results[0].ok
            plan = "\n".join(cap_plan(gpu.state or {}))
            if model["Model"] == "DGX_GB200":
                # the resource read says why: no limit there, never a guessed write
                assert "no resource of this BMC carries a node power limit" in node.result.error
                why = "Processors/GPU_0/EnvironmentMetrics carries no PowerLimitWatts"
                assert why in gpu.result.results[0].message
                assert why in plan
                assert "HGX_ProcessorModule_0/EnvironmentMetrics: no PowerLimitWatts" in plan
                refused = in_force(gpu.state).refused  # what `devices show` lists under "refused caps"
                assert why in refused["gpu/0"] and "carries a node power limit" in refused["node"]
            else:
                assert "no power-limit resource" in node.result.error
                assert "node: refused" in plan


async def test_gh200_cpu_limits_on_the_modules_are_cpu_caps_never_a_node_cap(
    make_harness: Callable[..., Any],
) -> None:
    model = {"Model": "auto", "Name": "gh200"}
    async with served(make_harness, GH200) as (h, bmc, state):
        before = copy.deepcopy(state.documents)
        node = await h.call("set_policy", bmc, cap(node=700), model=model)
        assert not node.result.ok and state.writes == []
        assert "the processor modules' PowerLimitWatts are CPU limits" in node.result.error
        assert "PhysicalContext CPU" in node.result.error
        assert "this board offers no node limit" in node.result.error
        discovery = (node.state or {})["discovery"]
        assert [c["limit_uri"] for c in discovery["cpus"]] == [MODULE_EM.format(0), MODULE_EM.format(1)]
        plan = "\n".join(cap_plan(node.state or {}))
        assert "CPU 0's limit on processor module HGX_ProcessorModule_0" in plan
        assert "RelatedItem CPU_0" in plan  # module 0's control names its CPU; module 1's is the one it holds

        cpu = await h.call("set_policy", bmc, cap(cpu=600), model=model)
        assert cpu.result.ok, cpu.result.error
        assert sorted(state.writes, key=str) == [
            ("PATCH", MODULE_EM.format(i), {"PowerLimitWatts": {"SetPoint": 300}}) for i in (0, 1)
        ]
        await h.call("unset_policy", bmc, UNSET, model=model)
        assert state.documents == before  # restored exactly: the OEM action put the default back
        assert written_outside(state.writes, allowed_writes(discovery, {"cpu/0", "cpu/1"})) == []

        mark = len(state.writes)
        gpu = await h.call("update_gpu_policies", bmc, gpu_cap(500), model=model)
        assert gpu.result.results[0].ok, gpu.result.results[0].message
        assert [p for _, p, _ in state.writes[mark:]] == [
            "/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_0/EnvironmentMetrics"
        ]


async def test_a_limit_the_resource_no_longer_carries_is_refused_at_write_time(
    make_harness: Callable[..., Any],
) -> None:
    model = {"Model": "auto", "Name": "gh200"}
    async with served(make_harness, GH200) as (h, bmc, state):
        assert (await h.call("std_metrics", bmc, Empty(), model=model)).result.ok
        # after discovery, the firmware stops offering module 0's limit (an update, a reset)
        del state.documents[MODULE_EM.format(0)]["PowerLimitWatts"]
        out = await h.call("set_policy", bmc, cap(cpu=600), model=model)
        assert not out.result.ok
        assert f"{MODULE_EM.format(0)} carries no PowerLimitWatts" in out.result.error
        assert "nothing written" in out.result.error
        assert [p for _, p, _ in state.writes] == [MODULE_EM.format(1)]  # only the CPU that offers one


async def test_a_cap_below_lenovo_xccs_oem_capping_minimum_is_refused_naming_it(
    make_harness: Callable[..., Any],
) -> None:
    model = {"Model": "auto", "Name": "xcc"}
    power = "/redfish/v1/Chassis/1/Power"
    async with served(make_harness, LENOVO) as (h, bmc, state):
        before = copy.deepcopy(state.documents)
        low = await h.call("set_policy", bmc, cap(node=600), model=model)
        assert not low.result.ok and state.writes == []
        assert "675 W" in low.result.error and "CapacityMinAC" in low.result.error
        high = await h.call("set_policy", bmc, cap(node=760), model=model)
        assert not high.result.ok and state.writes == []
        assert "750 W" in high.result.error  # PowerCapacityWatts and MaxLimitInWatts, tighter than 782
        ok = await h.call("set_policy", bmc, cap(node=700), model=model)
        assert ok.result.ok, ok.result.error
        await h.call("unset_policy", bmc, UNSET, model=model)
        assert state.writes == [
            ("PATCH", power, {"PowerControl": [{"PowerLimit": {"LimitInWatts": 700}}]}),
            ("PATCH", power, {"PowerControl": [{"PowerLimit": {"LimitInWatts": None}}]}),
        ]
        assert state.documents == before


async def test_a_probed_dgx_h100_refuses_the_node_cap_with_the_real_reason(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(n=1, model="dgx-h100") as h:
        bmc = h.fleet.bmcs[0]
        out = await h.call("set_policy", bmc, cap(node=8000), model={"Model": "auto", "Name": "dgx"})
        assert not out.result.ok
        # the DGX H100 mockup (bmcsim/mockups, from NVIDIA's sources) offers no power-limit resource
        # at all: that is the reason given, never the old "no processor-module caps", and the platform
        # is named by its evidence (AMI host BMC next to the HGX board, H100 GPUs)
        assert "processor-module" not in out.result.error
        assert "DGX H100 host BMC (matched by its evidence: service root Vendor AMI" in out.result.error
        assert "the BMC offers no power-limit resource" in out.result.error, out.result.error
        assert "GPUs NVIDIA H100 80GB HBM3" in out.result.error
        writes = [c for c in h.calls(bmc) if c.split()[0] in ("PATCH", "POST") and "/Sessions" not in c]
        assert writes == []
        plan = "\n".join(cap_plan(out.state or {}))
        assert "matched nvidia-hgx-no-limit" in plan, plan  # inventory check --login names the platform
        assert "GPU 0-7: refused (DGX H100 host BMC" in plan
        gpu = await h.call("update_gpu_policies", bmc, gpu_cap(500), model={"Model": "auto", "Name": "dgx"})
        assert not gpu.result.results[0].ok and "DGX H100 host BMC" in gpu.result.results[0].message
        assert bmc.state.writes == []


async def test_a_dgx_h100_whose_gpus_offer_a_limit_is_capped_there_not_refused(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(n=1, model="dgx-h100-gpu-caps") as h:
        bmc = h.fleet.bmcs[0]
        out = await h.call("update_gpu_policies", bmc, gpu_cap(500), model={"Model": "auto", "Name": "dgx"})
        assert out.result.results[0].ok, out.result.results[0].message
        gpu = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_SXM_1/EnvironmentMetrics"
        assert bmc.state.writes == [("PATCH", gpu, {"PowerLimitWatts": {"SetPoint": 500}})]
        assert "matched nvidia-hgx:" in "\n".join(cap_plan(out.state or {}))


async def test_a_prior_recorded_under_a_key_discovery_no_longer_gives_goes_back_to_its_resource(
    make_harness: Callable[..., Any],
) -> None:
    # an earlier discovery took GH200 module 0's CPU limit for a node share and capped it at 350 W
    model = {"Model": "auto", "Name": "gh200"}
    async with served(make_harness, GH200) as (h, bmc, state):
        state.documents[MODULE_EM.format(0)]["PowerLimitWatts"]["SetPoint"] = 350
        prior = {"watts": 420, "capped": False, "mode": "Automatic", "uri": MODULE_EM.format(0)}
        h.states[bmc.index] = {"priors": {"topology": {"module/0": prior}}}
        out = await h.call("unset_policy", bmc, UNSET, model=model)
        assert out.result.ok, out.result.error
        clear = f"{MODULE_EM.format(0)}/Actions/Oem/NvidiaEnvironmentMetrics.ClearOOBSetPoint"
        assert [(m, p) for m, p, _ in state.writes] == [("POST", clear)]
        assert state.documents[MODULE_EM.format(0)]["PowerLimitWatts"]["SetPoint"] == 420
        assert not (out.state or {}).get("priors", {}).get("topology")


#: DPS's proxy (dps.md §7), with the capture's manager (`BMC_0`, not the `BMC` the proxy names) readable
DPS_PROXY = (*DPS_ALLOW_LIST, ("GET", "/redfish/v1/Managers/*"))
DGX_GB300 = {"Model": "DGX_GB300", "Name": "gb300"}
#: the node cap asked for, as DPS sends it: split evenly over the two modules
MODULE_WRITES = [("PATCH", MODULE_EM.format(i), {"PowerLimitWatts": {"SetPoint": 1000}}) for i in (0, 1)]


async def test_dps_models_follow_the_chassis_links_and_choose_modules_by_their_evidence(
    make_harness: Callable[..., Any],
) -> None:
    async with served(make_harness, GB300) as (h, bmc, state):
        out = await h.call("set_policy", bmc, cap(node=2000), model=DGX_GB300)
        assert out.result.ok, out.result.error
        plan = "\n".join(cap_plan(out.state or {}))
        # the chassis resources were read: their Links prove the modules cover the node, no rule needed
        assert "the modules together contain every GPU and CPU of the node" in plan
        assert "DPS documents" not in plan and "dps.md §7" not in plan
        assert sorted(state.writes, key=str) == MODULE_WRITES  # nothing but the modules' limits

    # the same firmware, but module 0's chassis says it is no module: its name makes it none
    async with served(make_harness, GB300) as (h, bmc, state):
        state.documents["/redfish/v1/Chassis/HGX_ProcessorModule_0"]["ChassisType"] = "Component"
        out = await h.call("set_policy", bmc, cap(node=2000), model=DGX_GB300)
        assert not out.result.ok and state.writes == []
        assert "not proven to cover the node together" in out.result.error, out.result.error


async def test_behind_dps_proxy_the_documented_module_limits_stand_only_where_the_bmc_agrees(
    make_harness: Callable[..., Any],
) -> None:
    # GB300 behind the proxy: the chassis and the Controls the limits name answer 403; the module
    # limits DPS documents are served as themselves, but what each covers is in its Control, which
    # cannot be read (GH200's look the same and are Grace CPU limits): refused, naming why
    async with served(make_harness, GB300, DPS_PROXY) as (h, bmc, state):
        out = await h.call("set_policy", bmc, cap(node=2000), model=DGX_GB300)
        assert not out.result.ok and state.writes == []
        plan = "\n".join(cap_plan(out.state or {}))
        assert f"{MODULE_EM.format(0)}: read at the path DPS documents (dps.md §7)" in plan
        assert "chassis refused (the BMC answered 403" in plan
        assert "its DataSourceUri could not be read" in out.result.error, out.result.error

    # where the proxy lets the Controls be read, the BMC's evidence agrees and DPS's rule stands
    async with served(make_harness, GB300, (*DPS_PROXY, ("GET", "/redfish/v1/Chassis/*/Controls/*"))) as (
        h,
        bmc,
        state,
    ):
        out = await h.call("set_policy", bmc, cap(node=2000), model=DGX_GB300)
        assert out.result.ok, out.result.error
        assert "and the BMC's evidence agrees" in "\n".join(cap_plan(out.state or {}))
        assert sorted(state.writes, key=str) == MODULE_WRITES

    # the resource at DPS's documented path is not what DPS says it is: refused, naming why
    async with served(make_harness, GB300, DPS_PROXY) as (h, bmc, state):
        state.documents[MODULE_EM.format(1)]["@odata.id"] = (
            "/redfish/v1/Chassis/HGX_Chassis_0/EnvironmentMetrics"
        )
        out = await h.call("set_policy", bmc, cap(node=2000), model=DGX_GB300)
        assert not out.result.ok and state.writes == []
        assert "does not agree with the BMC's evidence" in out.result.error, out.result.error
        assert f"{MODULE_EM.format(1)} answers as /redfish/v1/Chassis/HGX_Chassis_0" in out.result.error

    # a DPS model without that rule: no URI is built for it, the node cap is refused with the reason
    async with served(make_harness, GB300, DPS_PROXY) as (h, bmc, state):
        out = await h.call("set_policy", bmc, cap(node=2000), model={"Model": "DGX_B300EM", "Name": "b300"})
        assert not out.result.ok and state.writes == []
        assert "the chassis could not be read" in out.result.error, out.result.error
        assert "a URI is never built from a chassis' name" in out.result.error


async def test_a_dps_model_on_gh200_never_splits_a_node_cap_over_the_cpu_limits(
    make_harness: Callable[..., Any],
) -> None:
    # declared as a GB200 (DPS's module-sum model): the BMC's evidence still decides
    model = {"Model": "DGX_GB200", "Name": "gh200"}
    async with served(make_harness, GH200) as (h, bmc, state):
        node = await h.call("set_policy", bmc, cap(node=700), model=model)
        assert not node.result.ok and state.writes == []
        # the Control each limit names was read: Grace EDPp, PhysicalContext CPU
        assert "the processor modules' PowerLimitWatts are CPU limits" in node.result.error, node.result.error
        cpu = await h.call("set_policy", bmc, cap(cpu=600), model=model)
        assert cpu.result.ok, cpu.result.error
        assert sorted(p for _, p, _ in state.writes) == [MODULE_EM.format(0), MODULE_EM.format(1)]

    # behind DPS's proxy the Controls answer 403: what the limits cover is unknown, never a node share
    async with served(make_harness, GH200, DPS_PROXY) as (h, bmc, state):
        node = await h.call("set_policy", bmc, cap(node=700), model=model)
        assert not node.result.ok and state.writes == []
        assert "not proven to cover the node together" in node.result.error, node.result.error
        assert "its DataSourceUri could not be read" in node.result.error


async def test_a_lost_write_the_gate_then_refuses_to_repeat_stays_unknown_never_nothing_written(
    make_harness: Callable[..., Any],
) -> None:
    model = {"Model": "auto", "Name": "gh200"}
    async with served(make_harness, GH200) as (h, bmc, state):
        # module 0's PATCH gets no answer (nothing applied); while it hangs the firmware stops
        # offering that limit, so the read after it shows the old value and no limit to write again
        bmc.faults.set(FaultMode.HANG, writes_only=True, path_contains="ProcessorModule_0/", count=1)
        call = asyncio.ensure_future(
            h.call("set_policy", bmc, cap(cpu=600), model=model, timeout=20.0, options={"read_timeout": 2.0})
        )
        while ("PATCH", MODULE_EM.format(0)) not in bmc.stats.calls:
            assert not call.done(), call.result()
            await asyncio.sleep(0.01)
        del state.documents[MODULE_EM.format(0)]["PowerLimitWatts"]
        out = await call
        bmc.faults.clear()
        assert not out.result.ok
        # the first PATCH may still land: unknown, and why it was not sent again; never "nothing written"
        assert "not sent again" in out.result.error, out.result.error
        assert "carries no PowerLimitWatts" in out.result.error
        assert "whether it lands is unknown" in out.result.error
        assert "nothing written" not in out.result.error
        assert bmc.stats.calls[("PATCH", MODULE_EM.format(0))] == 1
