"""Every request kind on the DMTF Controls, legacy Power and DGX H100 (Node Manager) platforms."""

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

CONTROL = "/redfish/v1/Chassis/1/Controls/{id}"
POWER = "/redfish/v1/Chassis/1/Power"
#: the first login, then the look for sessions an earlier process left (the list: only ours in it)
LOGIN = {
    "GET /redfish/v1": 1,
    "POST /redfish/v1/SessionService/Sessions": 1,
    "GET /redfish/v1/SessionService/Sessions": 1,
}
DMTF_WALK = {
    "GET /redfish/v1": 1,
    "GET /redfish/v1/Managers": 1,
    "GET /redfish/v1/Managers/{id}": 1,
    "GET /redfish/v1/Systems": 1,
    "GET /redfish/v1/Systems/1": 1,
    "GET /redfish/v1/Systems/1/Processors": 1,
    "GET /redfish/v1/Systems/1/Processors/{id}": 2,
    "GET /redfish/v1/Chassis": 1,
    "GET /redfish/v1/Chassis/1": 1,
}


def policy(
    node: float | None = None, cpu: float | None = None, gpu: float | None = None, memory=None
) -> Policy:
    limits = []
    for element, watts in (
        (ElementType.NODE, node),
        (ElementType.CPU, cpu),
        (ElementType.GPU, gpu),
        (ElementType.MEMORY, memory),
    ):
        if watts is not None:
            limits.append(PolicyLimit(element, PowerLimit(watts=watts)))
    return Policy("P", tuple(limits))


def merged(*parts: dict[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in parts:
        for key, n in part.items():
            out[key] = out.get(key, 0) + n
    return out


# ---- DMTF Controls ------------------------------------------------------------------------------


async def test_dmtf_controls_topology_cycle_restores_exact_prior_values(mixed: Harness) -> None:
    bmc = mixed.fleet.bmcs[1]
    out = await mixed.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(node=900, cpu=500)))
    result = out.result
    assert result.ok, result.error
    assert result.node.applied_watts == 900 and result.cpu.applied_watts == 500
    assert result.gpu_policies is None  # no GPUs on this node and none in its spec
    caps = bmc.state.caps
    assert (caps["PowerLimit"].set_point, caps["PowerLimit"].control_mode) == (900, "Manual")
    assert caps["CPU1_PowerLimit"].set_point == 250 and caps["CPU2_PowerLimit"].set_point == 250
    assert mixed.calls(bmc) == merged(
        LOGIN,
        DMTF_WALK,
        {"GET /redfish/v1/Chassis/1/Controls": 1, "GET " + CONTROL: 3},  # discovery
        # three caps: PATCH, GET (the pre-write read is discovery's GET of the same operation)
        {"GET " + CONTROL: 3, "PATCH " + CONTROL: 3},
    )
    assert out.state["discovery"]["platform"] == "controls"
    prior = out.state["priors"]["topology"]["node"]
    assert {k: prior[k] for k in ("watts", "capped", "mode")} == {
        "watts": None,
        "capped": False,
        "mode": "Disabled",
    }

    mixed.reset()
    out = await mixed.call("unset_policy", bmc, PolicyChange(PolicyAction.UNSET))
    assert out.result.ok, out.result.error
    assert (caps["PowerLimit"].set_point, caps["PowerLimit"].control_mode) == (None, "Disabled")
    assert (caps["CPU1_PowerLimit"].set_point, caps["CPU1_PowerLimit"].control_mode) == (350, "Automatic")
    assert out.result.power_cap_watts == 0 and out.result.node.applied_watts == 0
    assert mixed.calls(bmc) == {"GET " + CONTROL: 6, "PATCH " + CONTROL: 3}


async def test_dmtf_resource_group_rejects_out_of_range_components_only(mixed: Harness) -> None:
    bmc = mixed.fleet.bmcs[1]
    alloc = Allocation("rg-a", policy=PolicyChange(PolicyAction.SET, policy(node=1000, cpu=900, memory=100)))
    out = await mixed.call("activate_allocation", bmc, alloc)
    result = out.result
    assert not result.ok
    assert result.node.ok and result.node.applied_watts == 1000
    assert not result.cpu.ok and "above the maximum of 350 W" in result.cpu.message
    assert (
        not result.memory.ok and "memory power limits: unsupported on this platform" in result.memory.message
    )
    assert "cpu share: 450 W" in result.error and "memory" in result.error
    assert bmc.state.caps["CPU1_PowerLimit"].set_point == 350  # untouched

    out = await mixed.call("deactivate_allocation", bmc, Allocation("rg-a"))
    assert out.result.ok and bmc.state.caps["PowerLimit"].set_point is None


async def test_dmtf_gpu_kinds_without_gpus_say_so(mixed: Harness) -> None:
    bmc = mixed.fleet.bmcs[1]
    change = GpuPoliciesChange("rg", PolicyAction.SET, policies=(GpuPolicy(0, PowerLimit(watts=300)),))
    out = await mixed.call("update_gpu_policies", bmc, change)
    assert [(r.gpu_id, r.ok) for r in out.result.results] == [(0, False)]
    assert "no such GPU on this node (GPUs: none)" in out.result.results[0].message

    out = await mixed.call("enable_profiles", bmc, ProfileChange(enable=(5,)))
    assert not out.result.ok and "workload power profiles: unsupported on this platform" in out.result.error
    assert out.verification is None

    out = await mixed.call("gpu_metrics", bmc, GpuMetricsQuery())
    assert not out.result.ok and "no GPUs" in out.result.error


async def test_dmtf_metrics(mixed: Harness) -> None:
    bmc = mixed.fleet.bmcs[1]
    await mixed.call("ping", bmc, Ping())
    await mixed.call("std_metrics", bmc, Empty())
    mixed.reset()
    out = await mixed.call("std_metrics", bmc, Empty())
    node = out.result.metrics
    assert out.result.ok and node.power_watts > 0 and node.gpus == ()
    assert [(c.id, c.limit_watts, c.min_watts, c.max_watts) for c in node.cpus] == [
        ("0", 350, 100, 350), ("1", 350, 100, 350)
    ]  # fmt: skip
    assert all(c.power_watts > 0 for c in node.cpus)
    # the CPUs' Controls and the node cap's (every cap is read: the drift check compares them)
    assert mixed.calls(bmc) == {"GET /redfish/v1/Chassis/1/EnvironmentMetrics": 1, "GET " + CONTROL: 3}
    out = await mixed.call("raw_metrics", bmc, Empty())
    assert "/redfish/v1/Chassis/1/Controls/PowerLimit" in out.result.documents


# ---- legacy Power -------------------------------------------------------------------------------


async def test_legacy_power_node_cap_set_and_removed(mixed: Harness) -> None:
    bmc = mixed.fleet.bmcs[2]
    out = await mixed.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(node=750, cpu=400)))
    result = out.result
    assert result.node.ok and result.node.applied_watts == 750 and result.power_cap_watts == 750
    assert not result.cpu.ok
    assert result.cpu.message.startswith("CPU power limits: unsupported on this platform")
    assert "legacy Chassis Power resource caps the whole node only" in result.cpu.message
    assert bmc.state.caps["PowerLimit"].set_point == 750
    assert out.state["discovery"]["platform"] == "legacy_power"
    # discovery's GET of Power (the pre-write read), PATCH, read-back
    assert mixed.calls(bmc) == merged(LOGIN, DMTF_WALK, {"GET " + POWER: 2, "PATCH " + POWER: 1})

    mixed.reset()
    out = await mixed.call("unset_policy", bmc, PolicyChange(PolicyAction.UNSET))
    assert out.result.ok and bmc.state.caps["PowerLimit"].set_point is None
    assert mixed.calls(bmc) == {"GET " + POWER: 2, "PATCH " + POWER: 1}

    out = await mixed.call("std_metrics", bmc, Empty())
    assert out.result.ok and out.result.metrics.power_watts > 0


async def test_legacy_power_limits_beyond_the_bmc_are_rejected_with_its_limits(mixed: Harness) -> None:
    bmc = mixed.fleet.bmcs[2]
    # the spec allows both values; the BMC publishes only PowerCapacityWatts and validates the rest
    model = {
        "Model": "GENERIC_DMTF_LEGACY",
        "Name": "node2",
        "spec": {"minLoadWatts": 100, "maxLoadWatts": 5000},
    }
    out = await mixed.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(node=3000)), model=model)
    assert out.result.node.message == (
        "node: 3000 W is above the BMC's PowerCapacityWatts of 1200 W (the BMC allows up to 1200 W)"
    )
    mixed.reset()
    out = await mixed.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(node=150)), model=model)
    node = out.result.node
    assert not node.ok
    assert "PATCH /redfish/v1/Chassis/1/Power failed: HTTP 400 Bad Request" in node.message
    assert (
        "Base.PropertyValueOutOfRange" in node.message
        and "AllowableMin 200, AllowableMax 1200" in node.message
    )
    assert mixed.calls(bmc) == {"GET " + POWER: 1, "PATCH " + POWER: 1}
    assert bmc.state.caps["PowerLimit"].set_point is None


# ---- DGX H100: Node Manager, unsupported ----------------------------------------------------------


async def test_dgx_h100_answers_unsupported_per_component_and_writes_nothing(mixed: Harness) -> None:
    bmc = mixed.fleet.bmcs[3]
    await mixed.call("std_metrics", bmc, Empty())
    mixed.reset()
    out = await mixed.call(
        "set_policy", bmc, PolicyChange(PolicyAction.SET, policy(node=8000, gpu=4800, cpu=400))
    )
    result = out.result
    assert not result.ok
    assert result.node.message.startswith("node power limit: unsupported on this platform (DGX_H100")
    assert "NodeManager" in result.node.message
    assert not result.cpu.ok and "unsupported on this platform" in result.cpu.message
    gpus = result.gpu_policies.results
    assert [g.gpu_id for g in gpus] == list(range(8)) and not any(g.ok for g in gpus)
    assert all("unsupported on this platform" in g.message for g in gpus)
    assert "GPUs 0, 1, 2, 3, 4, 5, 6, 7 power limit: unsupported" in result.error  # folded, not 8 lines
    assert mixed.calls(bmc) == {}  # nothing to read or write

    change = GpuPoliciesChange("rg", PolicyAction.SET, policies=(GpuPolicy(3, PowerLimit(watts=500)),))
    out = await mixed.call("update_gpu_policies", bmc, change)
    assert not out.result.results[0].ok and "unsupported" in out.result.results[0].message

    # removing a cap it cannot write is refused, not answered ok with nothing done
    change = GpuPoliciesChange("rg", PolicyAction.SET, policies=(GpuPolicy(3, None),))
    out = await mixed.call("update_gpu_policies", bmc, change)
    assert [(g.gpu_id, g.ok) for g in out.result.results] == [(3, False)]
    assert "GPU 3 power limit (removing it): unsupported on this platform" in out.result.results[0].message

    out = await mixed.call("enable_profiles", bmc, ProfileChange(enable=(5,)))
    assert not out.result.ok and len(out.result.gpus) == 8
    assert "workload power profiles: unsupported on this platform (DGX_H100" in out.result.error

    out = await mixed.call("deactivate_allocation", bmc, Allocation("nothing"))
    assert out.result.ok  # nothing was changed, nothing to restore
    assert mixed.calls(bmc) == {}


async def test_dgx_h100_metrics_work(mixed: Harness) -> None:
    bmc = mixed.fleet.bmcs[3]
    out = await mixed.call("std_metrics", bmc, Empty())
    node = out.result.metrics
    assert out.result.ok and len(node.gpus) == 8 and node.power_watts > 0
    assert all(g.power_watts > 0 and g.limit_watts == 0 for g in node.gpus)
    mixed.reset()
    out = await mixed.call("gpu_metrics", bmc, GpuMetricsQuery())
    assert [u.gpu_id for u in out.result.metrics] == list(range(8))
    # one GET per GPU's own (linked) EnvironmentMetrics, nothing else (the DGX H100 mockup)
    assert mixed.calls(bmc) == {
        f"GET /redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_SXM_{n}/EnvironmentMetrics": 1
        for n in range(1, 9)
    }


@pytest.mark.parametrize("index", [0, 1, 2, 3])
async def test_ping_every_platform_without_login(mixed: Harness, index: int) -> None:
    bmc = mixed.fleet.bmcs[index]
    out = await mixed.call("ping", bmc, Ping())
    assert out.result.ok and mixed.calls(bmc) == {"GET /redfish/v1": 1}
    assert bmc.stats.sessions_created == 0


async def test_platform_option_forces_the_legacy_path_on_a_controls_bmc(mixed: Harness) -> None:
    bmc = mixed.fleet.bmcs[1]
    out = await mixed.call(
        "set_policy",
        bmc,
        PolicyChange(PolicyAction.SET, policy(node=640)),
        options={"platform": "legacy_power"},
    )
    assert out.result.ok and out.state["discovery"]["platform"] == "legacy_power"
    assert bmc.state.caps["PowerLimit"].set_point == 640
