"""Every request kind on the simulator's synthetic writable `gb200` tray (NVIDIA EnvironmentMetrics
platform), with exact BMC call counts.

The synthetic tray offers limits on its GPUs, CPUs and processor modules, as the GB300 NVL capture
does (tests/corpus/redfish/nvidia-gb300-nvl); GB200 NVL firmware offers neither the module nor (on
some firmware) the GPU limits: that truth is the `gb200-nvl` mockups, tested in
test_nvidia_mockups.py."""

from __future__ import annotations

import pytest

from plugins.base import (
    Allocation,
    ElementType,
    Empty,
    GpuMetricsQuery,
    GpuPoliciesChange,
    GpuPolicy,
    Ping,
    Policy,
    PolicyAction,
    PolicyChange,
    PolicyLimit,
    PowerLimit,
    ProfileChange,
)
from tests.plugins.redfish.harness import Harness

PROC_EM = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/{id}/EnvironmentMetrics"
CHASSIS_EM = "/redfish/v1/Chassis/{id}/EnvironmentMetrics"
WPPS = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/{id}/Oem/Nvidia/WorkloadPowerProfile"
ENABLE = WPPS + "/Actions/NvidiaWorkloadPower.EnableProfiles"
DISABLE = WPPS + "/Actions/NvidiaWorkloadPower.DisableProfiles"
CLEAR = PROC_EM + "/Actions/Oem/NvidiaEnvironmentMetrics.ClearOOBSetPoint"
CHASSIS_CLEAR = CHASSIS_EM + "/Actions/Oem/NvidiaEnvironmentMetrics.ClearOOBSetPoint"

#: login (service root + session POST) and the NVIDIA discovery walk
#: the first login, then the look for sessions an earlier process left (the list: only ours in it)
LOGIN = {
    "GET /redfish/v1": 1,
    "POST /redfish/v1/SessionService/Sessions": 1,
    "GET /redfish/v1/SessionService/Sessions": 1,
}
DISCOVERY = {
    "GET /redfish/v1": 1,
    "GET /redfish/v1/Managers": 1,
    "GET /redfish/v1/Managers/{id}": 1,
    "GET /redfish/v1/Systems": 1,
    "GET /redfish/v1/Systems/HGX_Baseboard_0": 1,
    "GET /redfish/v1/Systems/HGX_Baseboard_0/Processors": 1,
    "GET /redfish/v1/Systems/HGX_Baseboard_0/Processors/{id}": 6,
    "GET /redfish/v1/Chassis": 1,
    # each chassis the collection links: its ChassisType and the EnvironmentMetrics it links
    # (never a URI built from a chassis' name)
    "GET /redfish/v1/Chassis/{id}": 4,
    # which of them carries a limit: the processors' and the processor modules' EnvironmentMetrics
    "GET /redfish/v1/Systems/HGX_Baseboard_0/Processors/{id}/EnvironmentMetrics": 6,
    "GET /redfish/v1/Chassis/{id}/EnvironmentMetrics": 3,  # the modules' and HGX_Chassis_0's (a Module)
}


def node_policy(node: float, gpu: float | None = None, cpu: float | None = None, name: str = "P") -> Policy:
    limits = [PolicyLimit(ElementType.NODE, PowerLimit(watts=node))]
    if gpu is not None:
        limits.append(PolicyLimit(ElementType.GPU, PowerLimit(watts=gpu)))
    if cpu is not None:
        limits.append(PolicyLimit(ElementType.CPU, PowerLimit(watts=cpu)))
    return Policy(name, tuple(limits))


def caps(h: Harness) -> dict[str, int | None]:
    return h.fleet.bmcs[0].state.set_points()


def merged(*parts: dict[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in parts:
        for key, n in part.items():
            out[key] = out.get(key, 0) + n
    return out


async def test_first_request_logs_in_and_discovers_once_then_metrics_cost_one_get_each(
    gb200: Harness,
) -> None:
    bmc = gb200.fleet.bmcs[0]
    out = await gb200.call("std_metrics", bmc, Empty())
    assert out.result.ok, out.result.error
    # the node's power, and its two modules' caps (every cap is read: the drift check compares them)
    metrics = {"GET " + CHASSIS_EM: 3, "GET " + PROC_EM: 6}
    assert gb200.calls(bmc) == merged(LOGIN, DISCOVERY, metrics)
    node = out.result.metrics
    assert len(node.gpus) == 4 and len(node.cpus) == 2
    assert node.power_watts > 0
    assert all(g.max_watts == 1200 and g.min_watts == 200 and g.limit_watts == 1200 for g in node.gpus)
    assert all(c.max_watts == 420 and c.energy_joules > 0 and c.temperature_celsius > 0 for c in node.cpus)
    assert out.state["discovery"]["platform"] == "environment_metrics"
    assert out.state["discovery"]["firmware"] == bmc.firmware_version
    assert out.reached_at is not None and out.reach_error == ""
    readings = out.state["readings"]  # every cap as read: the modules' (the node cap) too
    assert {"module/0", "module/1", "cpu/0", "gpu/3"} <= set(readings)
    assert readings["module/0"]["watts"] is not None and readings["module/0"]["mode"]

    gb200.reset()
    out = await gb200.call("std_metrics", bmc, Empty())
    assert gb200.calls(bmc) == metrics  # discovery cached in the state, session reused
    assert bmc.stats.sessions_created == 0


async def test_topology_activate_sets_every_component_and_reads_back(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("ping", bmc, Ping())
    await gb200.call("std_metrics", bmc, Empty())  # discovery + login out of the way
    gb200.reset()
    policy = node_policy(5000, gpu=2800, cpu=600, name="Node-Low")
    out = await gb200.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy))
    result = out.result
    assert result.ok, result.error
    assert result.policy == policy
    assert result.power_cap_watts == 5000
    assert result.node is not None and result.node.applied_watts == 5000 and result.node.ok
    assert result.cpu is not None and result.cpu.applied_watts == 600
    assert result.memory is None
    gpus = result.gpu_policies.results
    assert [(g.gpu_id, g.ok, g.applied_watts) for g in gpus] == [(i, True, 700.0) for i in range(4)]
    assert caps(gb200) == {
        "GPU_0": 700, "GPU_1": 700, "GPU_2": 700, "GPU_3": 700,
        "CPU_0": 300, "CPU_1": 300,
        "HGX_ProcessorModule_0": 2500, "HGX_ProcessorModule_1": 2500,
    }  # fmt: skip
    # per component: GET (prior value), PATCH (no If-Match: body-hash ETags), GET (read back)
    assert gb200.calls(bmc) == {
        "GET " + CHASSIS_EM: 4,
        "GET " + PROC_EM: 12,
        "PATCH " + CHASSIS_EM: 2,
        "PATCH " + PROC_EM: 6,
    }
    priors = out.state["priors"]["topology"]
    assert set(priors) == {"gpu/0", "gpu/1", "gpu/2", "gpu/3", "cpu/0", "cpu/1", "module/0", "module/1"}
    gpu0 = PROC_EM.format(id="GPU_0")
    assert priors["gpu/0"] == {
        "watts": 1200.0,
        "capped": False,
        "mode": "Automatic",
        "uri": gpu0,
        "persistency": "off",  # as NVIDIA shows a GPU's (a captured GB300 tray),
    }
    assert out.state["applied"]["gpu/2"]["watts"] == 700

    # the same policy again: everything is already in force, one GET per component, no write
    gb200.reset()
    out = await gb200.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy))
    assert out.result.ok
    assert gb200.calls(bmc) == {"GET " + CHASSIS_EM: 2, "GET " + PROC_EM: 6}


async def test_second_activation_keeps_the_first_prior_values(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("set_policy", bmc, PolicyChange(PolicyAction.SET, node_policy(5000, gpu=2800)))
    out = await gb200.call("set_policy", bmc, PolicyChange(PolicyAction.SET, node_policy(4000, gpu=2000)))
    assert out.result.ok
    assert out.state["priors"]["topology"]["gpu/0"]["watts"] == 1200  # not 700
    assert caps(gb200)["GPU_0"] == 500


async def test_topology_deactivate_applies_the_idle_policy(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("set_policy", bmc, PolicyChange(PolicyAction.SET, node_policy(5000, gpu=2800, cpu=600)))
    gb200.reset()
    out = await gb200.call("unset_policy", bmc, PolicyChange(PolicyAction.UNSET))
    result = out.result
    assert result.ok, result.error
    # DGX_GB200 idle policy (dps.md §4): Node 1000 W, GPU 800 W, CPU 100 W, split evenly
    assert result.policy is not None and result.policy.name == "idle"
    assert caps(gb200) == {
        "GPU_0": 200, "GPU_1": 200, "GPU_2": 200, "GPU_3": 200,
        "CPU_0": 50, "CPU_1": 50,
        "HGX_ProcessorModule_0": 500, "HGX_ProcessorModule_1": 500,
    }  # fmt: skip
    assert result.power_cap_watts == 1000
    assert "topology" not in out.state.get("priors", {})
    assert gb200.calls(bmc)["PATCH " + PROC_EM] == 6


async def test_topology_deactivate_without_idle_policy_restores_prior_values(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    model = {"Model": "DGX_GB200", "Name": "node0", "spec": {"idlePolicy": None}}
    bmc.state.caps["GPU_3"].set_point = 900  # someone else's cap before ours
    bmc.state.caps["GPU_3"].oob_active = True
    await gb200.call(
        "set_policy", bmc, PolicyChange(PolicyAction.SET, node_policy(5000, gpu=2800)), model=model
    )
    gb200.reset()
    # a spec without an idle policy: the catalogue's would apply otherwise, so drop it explicitly
    out = await gb200.call(
        "unset_policy",
        bmc,
        PolicyChange(PolicyAction.UNSET),
        model={"Model": "GB200_NO_IDLE", "Name": "node0", "spec": {"maxLoadWatts": 6667}},
        options={"platform": "environment_metrics"},
    )
    assert out.result.ok, out.result.error
    points = caps(gb200)
    assert points["GPU_0"] == 1200 and points["GPU_3"] == 900
    assert not bmc.state.caps["GPU_0"].oob_active  # cleared with ClearOOBSetPoint, not a PATCH
    assert points["HGX_ProcessorModule_0"] == 2820
    calls = gb200.calls(bmc)
    assert calls["POST " + CLEAR] == 3  # GPUs 0-2 were at the default: cleared
    assert calls["POST " + CHASSIS_CLEAR] == 2
    assert calls["PATCH " + PROC_EM] == 1  # GPU 3 had an explicit 900 W cap: put back
    assert out.state.get("priors", {}) == {}


async def test_resource_group_lifecycle_with_gpu_policies_and_profiles(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("std_metrics", bmc, Empty())
    gb200.reset()
    activate = Allocation(
        resource_group="job-1",
        policy=PolicyChange(PolicyAction.SET, node_policy(5200, gpu=3200)),
        gpu_policies=GpuPoliciesChange(
            "job-1", PolicyAction.SET, policies=(GpuPolicy(1, PowerLimit(watts=650)), GpuPolicy(2, None))
        ),
        profiles=ProfileChange(enable=(5, 7), verify=False),
    )
    out = await gb200.call("activate_allocation", bmc, activate)
    result = out.result
    assert result.ok, result.error
    assert result.resource_group == "job-1"
    assert [(g.gpu_id, g.applied_watts) for g in result.gpu_policies.results] == [
        (0, 800.0), (1, 650.0), (2, 800.0), (3, 800.0)
    ]  # fmt: skip
    assert result.node.applied_watts == 5200 and result.power_cap_watts == 5200
    assert result.profiles is not None and result.profiles.ok
    assert [s.enforced for s in result.profiles.gpus] == [(5, 7)] * 4
    assert result.profiles.verification_id == ""  # verification disabled
    assert bmc.state.profiles["GPU_0"].requested == (1 << 2) | (1 << 4)  # NVML ids 2 and 4
    calls = gb200.calls(bmc)
    assert calls["GET " + WPPS] == 8 and calls["POST " + ENABLE] == 4
    assert calls["PATCH " + PROC_EM] == 4 and calls["PATCH " + CHASSIS_EM] == 2
    assert "DISABLE" not in str(calls)

    # update: lower the node cap; GPUs untouched by the policy change stay as they are
    gb200.reset()
    update = Allocation("job-1", policy=PolicyChange(PolicyAction.SET, node_policy(4000, gpu=3200)))
    out = await gb200.call("update_allocation", bmc, update)
    assert out.result.ok, out.result.error
    assert caps(gb200)["HGX_ProcessorModule_1"] == 2000
    assert out.state["priors"]["rg:job-1"]["module/0"]["watts"] == 2820  # still the first prior

    gb200.reset()
    out = await gb200.call("deactivate_allocation", bmc, Allocation("job-1"))
    assert out.result.ok, out.result.error
    assert set(caps(gb200).values()) == {1200, 420, 2820}
    assert bmc.state.profiles["GPU_3"].requested == 0
    assert out.result.profiles is not None and out.result.profiles.ok
    assert out.state.get("priors", {}) == {} and out.state["profiles"].get("priors", {}) == {}
    calls = gb200.calls(bmc)
    assert calls["POST " + DISABLE] == 4 and calls["GET " + WPPS] == 8
    assert calls["POST " + CLEAR] == 4 and calls["POST " + CHASSIS_CLEAR] == 2  # CPUs were not touched


async def test_gpu_policies_update_reports_actual_caps_and_rejects_out_of_range(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("std_metrics", bmc, Empty())
    gb200.reset()
    change = GpuPoliciesChange(
        "job-2",
        PolicyAction.SET,
        policies=(
            GpuPolicy(0, PowerLimit(watts=500)),
            GpuPolicy(1, PowerLimit(watts=150)),  # below the GB200 minimum of 200 W
            GpuPolicy(2, PowerLimit(percent=50)),  # of the 1200 W maximum
            GpuPolicy(9, PowerLimit(watts=500)),  # no such GPU
        ),
    )
    out = await gb200.call("update_gpu_policies", bmc, change)
    by_id = {r.gpu_id: r for r in out.result.results}
    assert by_id[0].ok and by_id[0].applied_watts == 500
    assert not by_id[1].ok and "below the minimum of 200 W" in by_id[1].message
    assert "allowed 200..1200 W" in by_id[1].message
    assert by_id[2].ok and by_id[2].applied_watts == 600
    assert not by_id[9].ok and "no such GPU" in by_id[9].message
    assert caps(gb200)["GPU_1"] == 1200  # nothing written for the rejected GPU
    assert gb200.calls(bmc) == {"GET " + PROC_EM: 4, "PATCH " + PROC_EM: 2}

    # reset: the GPU-specific caps go back to what they were before
    gb200.reset()
    out = await gb200.call("update_gpu_policies", bmc, GpuPoliciesChange("job-2", PolicyAction.UNSET))
    assert all(r.ok for r in out.result.results), out.result
    assert {caps(gb200)[f"GPU_{i}"] for i in range(4)} == {1200}
    assert gb200.calls(bmc) == {"GET " + PROC_EM: 4, "POST " + CLEAR: 2}


async def test_workload_profiles_enable_disable_update_and_verification(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("std_metrics", bmc, Empty())
    gb200.reset()
    # 5 (COMPUTE, NVML 2) and 6 (MEMORY_BOUND, NVML 3) conflict: the firmware keeps COMPUTE
    out = await gb200.call("enable_profiles", bmc, ProfileChange(enable=(5, 6)))
    result = out.result
    assert result.ok, result.error
    assert [s.gpu_id for s in result.gpus] == ["0", "1", "2", "3"]
    assert all(s.enforced == (5,) for s in result.gpus)
    assert "enforced 5" in result.gpus[0].message and "arbitrates" in result.gpus[0].message
    assert result.verification_id and out.verification is not None
    assert out.verification.verification_id == result.verification_id
    # each GPU's resource read before its POST (the target it lists) and after it (the read-back)
    assert gb200.calls(bmc) == {"POST " + ENABLE: 4, "GET " + WPPS: 8}
    assert out.state["profiles"]["gpus"]["gpu/1"] == {
        "requested": [5, 6], "enforced": [5], "at": out.state["profiles"]["gpus"]["gpu/1"]["at"]
    }  # fmt: skip

    check = await gb200.plugin.verify(gb200.ctx(bmc), out.verification)
    assert check.done and check.status == "mismatch" and "enforced 5" in check.detail

    out = await gb200.call("disable_profiles", bmc, ProfileChange(disable=(6,)))
    assert out.result.ok and all(s.enforced == (5,) for s in out.result.gpus)
    check = await gb200.plugin.verify(gb200.ctx(bmc), out.verification)
    assert check.done and check.status == "verified", check

    gb200.reset()
    out = await gb200.call("update_profiles", bmc, ProfileChange(enable=(12,), disable=(5,), verify=False))
    assert out.result.ok and out.verification is None and out.result.verification_id == ""
    assert all(s.enforced == (12,) for s in out.result.gpus)
    assert gb200.calls(bmc) == {"POST " + DISABLE: 4, "POST " + ENABLE: 4, "GET " + WPPS: 8}


@pytest.mark.parametrize("ids", [(2,), (259,)])
async def test_workload_profile_ids_outside_3_to_258_are_rejected_before_any_call(
    gb200: Harness, ids: tuple[int, ...]
) -> None:
    from plugins.base import InvalidRequestError

    bmc = gb200.fleet.bmcs[0]
    with pytest.raises(InvalidRequestError, match=r"3\.\.258"):
        await gb200.call("enable_profiles", bmc, ProfileChange(enable=ids))
    assert bmc.stats.total_calls == 0


async def test_ping_gpu_metrics_and_raw_metrics(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    out = await gb200.call("ping", bmc, Ping(retry_count=2))
    assert out.result.ok and out.reached_at is not None and out.reach_error == ""
    assert out.state is None  # ping keeps the stored state
    assert gb200.calls(bmc) == {"GET /redfish/v1": 1}  # no login needed
    assert bmc.stats.sessions_created == 0

    await gb200.call("std_metrics", bmc, Empty())
    gb200.reset()
    out = await gb200.call("gpu_metrics", bmc, GpuMetricsQuery(gpu_ids=(1, 3)))
    assert out.result.ok and [u.gpu_id for u in out.result.metrics] == [1, 3]
    assert all(u.watts > 0 for u in out.result.metrics)
    assert gb200.calls(bmc) == {"GET " + PROC_EM: 2}
    out = await gb200.call("gpu_metrics", bmc, GpuMetricsQuery(gpu_ids=(7,)))
    assert not out.result.ok and "no GPU 7" in out.result.error and "GPUs: 0, 1, 2, 3" in out.result.error

    gb200.reset()
    out = await gb200.call("raw_metrics", bmc, Empty())
    docs = out.result.documents
    assert out.result.ok
    assert "/redfish/v1/Chassis/Chassis_0/EnvironmentMetrics" in docs
    assert docs["/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_2/EnvironmentMetrics"]["PowerLimitWatts"]
    assert "/redfish/v1/Chassis/HGX_ProcessorModule_1/EnvironmentMetrics" in docs
    assert gb200.calls(bmc) == {"GET " + CHASSIS_EM: 3, "GET " + PROC_EM: 6}


async def test_auto_model_probes_to_the_same_platform(gb200: Harness) -> None:
    from tests.plugins.redfish.harness import model_json

    bmc = gb200.fleet.bmcs[0]
    out = await gb200.call(
        "set_policy",
        bmc,
        PolicyChange(PolicyAction.SET, node_policy(4000, gpu=2400)),
        model=model_json(bmc, auto=True),
    )
    assert out.result.ok, out.result.error
    disc = out.state["discovery"]
    assert disc["platform"] == "environment_metrics" and disc["model"] == "auto"
    assert [c["name"] for c in disc["node"]] == ["HGX_ProcessorModule_0", "HGX_ProcessorModule_1"]
    assert caps(gb200)["GPU_0"] == 600 and caps(gb200)["HGX_ProcessorModule_0"] == 2000


async def test_a_chassis_that_cannot_be_read_never_fails_a_dps_models_discovery(gb200: Harness) -> None:
    from bmcsim import FaultMode

    # discovery reads each chassis the collection links for its evidence (ChassisType, links); one
    # whose reply is no Redfish document is named in the evidence, and the rest still decide
    bmc = gb200.fleet.bmcs[0]
    bmc.faults.set(FaultMode.INVALID_JSON, path_contains="/redfish/v1/Chassis/HGX_Chassis_0", count=1)
    out = await gb200.call("set_policy", bmc, PolicyChange(PolicyAction.SET, node_policy(4000, gpu=2400)))
    assert out.result.ok, out.result.error
    assert [c["name"] for c in out.state["discovery"]["node"]] == [
        "HGX_ProcessorModule_0",
        "HGX_ProcessorModule_1",
    ]
    assert caps(gb200)["HGX_ProcessorModule_0"] == 2000
    evidence = "\n".join(out.state["discovery"]["evidence"])
    assert "/redfish/v1/Chassis/HGX_Chassis_0: not read (not a Redfish document (" in evidence, evidence


async def test_a_cap_asked_to_persist_where_the_bmc_offers_no_persistency_says_it_is_not_kept(
    gb200: Harness,
) -> None:
    """`persistent_caps`: NVIDIA's firmware takes a persistency for a GPU only (a Grace CPU's is read
    and dropped, a module's is refused: environment_metrics.hpp), and shows it only there. The
    CPUs' and modules' caps are written without it, and the answer says whether they survive a
    reset is not known (NVIDIA writes a Grace cap to every power control of the CPU, a non-volatile
    one among them on a captured GB300); the GPUs' persist, with nothing to say."""
    bmc = gb200.fleet.bmcs[0]
    policy = node_policy(5000, gpu=2800, cpu=600)
    out = await gb200.call(
        "set_policy", bmc, PolicyChange(PolicyAction.SET, policy), options={"persistent_caps": True}
    )
    result = out.result
    assert result.ok, result.error
    assert result.cpu is not None and result.node is not None
    for part in (result.cpu, result.node):
        assert "whether this cap survives a BMC or host reset is the BMC's and not shown" in part.message
    assert all(bmc.state.caps[name].persistent is True for name in ("GPU_0", "GPU_1", "GPU_2", "GPU_3"))
    assert not any("survives" in g.message for g in result.gpu_policies.results)
    assert not bmc.state.caps["CPU_0"].persistent and not bmc.state.caps["HGX_ProcessorModule_0"].persistent
