"""Power caps: topology policies, GPU policies, validation, units, read-back, restore, scopes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pynvml
import pytest

from plugins.base import (
    ElementType,
    GpuPoliciesChange,
    GpuPolicy,
    HostEnvironmentError,
    InvalidRequestError,
    Policy,
    PolicyAction,
    PolicyChange,
    PolicyLimit,
    PowerLimit,
    RequestKind,
    run_operation,
)
from plugins.nvml.testing import FakeNode

MakeNode = Callable[..., Awaitable[FakeNode]]


def policy(name: str = "p", **limits: float) -> Policy:
    """`policy(gpu=2000, node=5000)` in watts; `gpu_pct=80` for a percentage."""
    items = []
    for key, value in limits.items():
        element, _, kind = key.partition("_")
        limit = PowerLimit(percent=value) if kind == "pct" else PowerLimit(watts=value)
        items.append(PolicyLimit(ElementType(element), limit))
    return Policy(name, tuple(items))


def SET(p: Policy) -> PolicyChange:
    return PolicyChange(PolicyAction.SET, p)


UNSET = PolicyChange(PolicyAction.UNSET)


# ---- topology activation ---------------------------------------------------------------------------


async def test_gpu_element_is_split_across_gpus_in_milliwatts(h100x4: FakeNode) -> None:
    out = await h100x4.do("set_policy", SET(policy(gpu=2000)))
    result = out.result
    assert result.ok, result.error
    assert [g.gpu_id for g in result.gpu_policies.results] == [0, 1, 2, 3]
    for i in range(4):
        assert h100x4.fake.gpu(i).limit_mw == 500_000  # 2000 W / 4 GPUs = 500 W = 500000 mW
        gpu = result.gpu_policies.results[i]
        assert (gpu.requested_watts, gpu.applied_watts) == (500.0, 500.0)
    assert result.power_cap_watts == 0.0  # NVML sets no node cap


async def test_fractional_watts_round_to_milliwatts(make_node: MakeNode) -> None:
    node = await make_node("h100", "h100", "h100")
    await node.do("set_policy", SET(policy(gpu=1000)))
    assert node.fake.gpu(0).limit_mw == 333_333


async def test_percent_resolves_against_each_gpus_own_maximum(make_node: MakeNode) -> None:
    node = await make_node("h100", "b200")  # max 700 W and 1000 W
    out = await node.do("set_policy", SET(policy(gpu_pct=50)))
    assert out.result.ok, out.result.error
    assert (node.limit_w(0), node.limit_w(1)) == (350.0, 500.0)


async def test_out_of_range_is_rejected_per_gpu_naming_min_and_max(h100x4: FakeNode) -> None:
    h100x4.fake.gpu(2).min_mw = 300_000  # this one cannot go as low as the others
    out = await h100x4.do("set_policy", SET(policy(gpu=1000)))  # 250 W each
    results = out.result.gpu_policies.results
    assert [r.ok for r in results] == [True, True, False, True]  # the others still proceed
    rejected = results[2]
    assert rejected.requested_watts == 250.0
    assert "GPU 2: 250 W is below the minimum of 300 W (allowed 300..700 W)" in rejected.message
    assert not out.result.ok and "1 of 4 GPU(s) failed" in out.result.error
    # validated before writing: the rejected GPU saw no write at all
    assert h100x4.uuid(2) not in {c.uuid for c in h100x4.fake.writes()}
    assert h100x4.limit_w(2) == 700.0 and h100x4.limit_w(3) == 250.0


async def test_above_maximum_is_rejected(h100x4: FakeNode) -> None:
    out = await h100x4.do("set_policy", SET(policy(gpu=4000)))
    assert (
        "1000 W is above the maximum of 700 W (allowed 200..700 W)"
        in out.result.gpu_policies.results[0].message
    )


async def test_requested_and_enforced_are_both_reported(h100x4: FakeNode) -> None:
    h100x4.fake.gpu(0).oob_limit_mw = 450_000  # the BMC caps this GPU lower
    out = await h100x4.do("set_policy", SET(policy(gpu=2000)))
    gpu0 = out.result.gpu_policies.results[0]
    assert gpu0.ok
    assert (gpu0.requested_watts, gpu0.applied_watts) == (500.0, 450.0)
    assert "enforced 450 W: a lower limit from another limiter" in gpu0.message


async def test_persistence_mode_off_warns_that_limits_revert(h100x4: FakeNode) -> None:
    h100x4.fake.gpu(1).persistence = False
    out = await h100x4.do("set_policy", SET(policy(gpu=2000)))
    messages = [r.message for r in out.result.gpu_policies.results]
    assert "reverts to the default when the driver unloads" in messages[1]
    assert "driver unloads" not in messages[0]


async def test_node_cpu_memory_elements_are_reported_not_controllable(make_node: MakeNode) -> None:
    node = await make_node("h100", "h100", model={"Model": "DGX_H100"})
    out = await node.do("set_policy", SET(policy(node=7650, gpu=1000, cpu=700, memory_pct=50)))
    result = out.result
    assert result.ok  # what NVML controls was applied
    assert result.node is not None and not result.node.ok
    assert result.node.requested_watts == 7650.0
    assert "not controllable in-band by NVML" in result.node.message
    assert result.cpu is not None and not result.cpu.ok and "cpu:" in result.cpu.message
    assert result.memory is not None and not result.memory.ok and result.memory.requested_watts is None
    assert node.limit_w(0) == 500.0


async def test_a_policy_without_gpu_limit_is_not_reported_as_success(h100x4: FakeNode) -> None:
    out = await h100x4.do("set_policy", SET(policy(node=5000)))
    assert not out.result.ok
    assert "sets no GPU limit" in out.result.error
    assert not h100x4.fake.writes()


async def test_set_without_a_policy_is_invalid(h100x4: FakeNode) -> None:
    with pytest.raises(InvalidRequestError):
        await h100x4.do("set_policy", PolicyChange(PolicyAction.SET, None))


async def test_no_permission_is_reported_per_gpu(make_node: MakeNode) -> None:
    node = await make_node("h100", "h100", privileged=False)
    out = await node.do("set_policy", SET(policy(gpu=1000)))
    assert not out.result.ok
    for r in out.result.gpu_policies.results:
        assert not r.ok
        assert "run devicectl as root" in r.message and "NVML_ERROR_NO_PERMISSION" in r.message


async def test_a_lost_gpu_fails_alone_and_keeps_its_slot(h100x4: FakeNode) -> None:
    await h100x4.do("set_policy", SET(policy(gpu=2000)))
    h100x4.fake.lose(h100x4.uuid(1))
    out = await h100x4.do("set_policy", SET(policy(gpu=1600)))
    results = {r.gpu_id: r for r in out.result.gpu_policies.results}
    assert not results[1].ok and "GPU is lost" in results[1].message
    assert h100x4.uuid(1) in results[1].message
    assert [results[i].ok for i in (0, 2, 3)] == [True, True, True]
    assert h100x4.fake.gpu(3).limit_mw == 400_000  # GPU 3 is still GPU 3, not renumbered
    # its recorded prior limit is kept for when it comes back
    assert h100x4.state["limits"][h100x4.uuid(1)]["gpu"]["prior_mw"] == 700_000


async def test_repeating_a_request_writes_nothing(h100x4: FakeNode) -> None:
    await h100x4.do("set_policy", SET(policy(gpu=2000)))
    writes = len(h100x4.fake.writes())
    out = await h100x4.do("set_policy", SET(policy(gpu=2000)))
    assert out.result.ok
    assert len(h100x4.fake.writes()) == writes
    assert "already in force" in out.result.gpu_policies.results[0].message


async def test_a_limit_reverted_by_a_driver_reload_is_noticed_and_put_back(h100x4: FakeNode) -> None:
    for i in range(4):
        h100x4.fake.gpu(i).persistence = False
    await h100x4.do("set_policy", SET(policy(gpu=2000)))
    h100x4.fake.unload_driver()
    assert h100x4.limit_w(0) == 700.0  # the driver went back to the default
    out = await h100x4.do("set_policy", SET(policy(gpu=2000)))
    assert h100x4.limit_w(0) == 500.0
    assert "instead of the 500 W set earlier" in out.result.gpu_policies.results[0].message
    # the value from before devicectl's first change is still the one recorded
    assert h100x4.state["limits"][h100x4.uuid(0)]["gpu"]["prior_mw"] == 700_000


async def test_driver_reload_with_persistence_on_keeps_limits(h100x4: FakeNode) -> None:
    await h100x4.do("set_policy", SET(policy(gpu=2000)))
    h100x4.fake.unload_driver()
    assert h100x4.limit_w(0) == 500.0


# ---- restore ("unset") ---------------------------------------------------------------------------


async def test_unset_restores_the_value_from_before_the_first_change(h100x4: FakeNode) -> None:
    h100x4.fake.gpu(0).limit_mw = 600_000  # an operator's own cap before devicectl
    await h100x4.do("set_policy", SET(policy(gpu=2000)))
    await h100x4.do("set_policy", SET(policy(gpu=1600)))  # second change: prior stays 600 W
    assert h100x4.state["limits"][h100x4.uuid(0)]["gpu"]["prior_mw"] == 600_000
    out = await h100x4.do("unset_policy", UNSET)
    assert out.result.ok, out.result.error
    assert h100x4.limit_w(0) == 600.0  # not the 700 W default
    assert h100x4.limit_w(1) == 700.0
    assert "from before devicectl's change" in out.result.gpu_policies.results[0].message
    assert h100x4.state["limits"] == {} and h100x4.state["policies"] == {}


async def test_unset_without_a_record_falls_back_to_the_default(h100x4: FakeNode) -> None:
    h100x4.fake.gpu(2).limit_mw = 650_000  # set by someone, never recorded by devicectl
    out = await h100x4.do("unset_policy", UNSET)
    assert h100x4.limit_w(2) == 700.0
    assert (
        "restored the default limit (no earlier value recorded)" in out.result.gpu_policies.results[2].message
    )


async def test_set_policy_with_unset_action_is_a_deactivation(h100x4: FakeNode) -> None:
    await h100x4.do("set_policy", SET(policy(gpu=2000)))
    await h100x4.do("set_policy", UNSET)
    assert h100x4.limit_w(0) == 700.0


async def test_deactivation_applies_the_specs_idle_policy(make_node: MakeNode) -> None:
    model = {"Model": "DGX_H100", "spec": {"idlePolicy": {"Node": {"watts": 3000}, "GPU": {"watts": 800}}}}
    node = await make_node("h100", "h100", model=model)
    await node.do("set_policy", SET(policy(gpu=1000)))
    out = await node.do("unset_policy", UNSET)
    assert node.limit_w(0) == 400.0  # idle GPU 800 W across two GPUs
    assert out.result.policy is not None and out.result.policy.name == "idle"
    assert out.result.node is not None and not out.result.node.ok
    # the idle cap is devicectl's change too: the original value is still recorded
    assert node.state["limits"][node.uuid(0)]["gpu"]["prior_mw"] == 700_000


async def test_a_recorded_prior_outside_todays_range_falls_back_to_the_default(h100x4: FakeNode) -> None:
    await h100x4.do("set_policy", SET(policy(gpu=2000)))
    h100x4.state["limits"][h100x4.uuid(0)]["gpu"]["prior_mw"] = 900_000
    out = await h100x4.do("unset_policy", UNSET)
    assert h100x4.limit_w(0) == 700.0
    assert "outside today's 200..700 W" in out.result.gpu_policies.results[0].message


# ---- GPU-specific policies -------------------------------------------------------------------------


async def test_gpu_policies_override_the_share(h100x4: FakeNode) -> None:
    await h100x4.do("set_policy", SET(policy(gpu=2000)))
    change = GpuPoliciesChange(
        "rg-1",
        PolicyAction.SET,
        policies=(GpuPolicy(1, PowerLimit(watts=300)), GpuPolicy(2, PowerLimit(percent=90))),
    )
    out = await h100x4.do("update_gpu_policies", change)
    assert out.result.resource_group == "rg-1"
    assert all(r.ok for r in out.result.results)
    assert [h100x4.limit_w(i) for i in range(4)] == [500.0, 300.0, 630.0, 500.0]


async def test_gpu_policies_merge_and_a_none_limit_removes_one(h100x4: FakeNode) -> None:
    await h100x4.do("set_policy", SET(policy(gpu=2000)))
    await h100x4.do(
        "update_gpu_policies",
        GpuPoliciesChange("rg", PolicyAction.SET, policies=(GpuPolicy(0, PowerLimit(watts=250)),)),
    )
    await h100x4.do(
        "update_gpu_policies",
        GpuPoliciesChange("rg", PolicyAction.SET, policies=(GpuPolicy(3, PowerLimit(watts=650)),)),
    )
    assert (h100x4.limit_w(0), h100x4.limit_w(3)) == (250.0, 650.0)
    await h100x4.do(
        "update_gpu_policies", GpuPoliciesChange("rg", PolicyAction.SET, policies=(GpuPolicy(0, None),))
    )
    assert (h100x4.limit_w(0), h100x4.limit_w(3)) == (500.0, 650.0)  # back to the share


async def test_a_none_limit_without_a_share_removes_the_cap_with_a_receipt(h100x4: FakeNode) -> None:
    h100x4.fake.gpu(1).limit_mw = 450_000  # capped by someone else, never recorded by devicectl
    await h100x4.do(
        "update_gpu_policies",
        GpuPoliciesChange("rg", PolicyAction.SET, policies=(GpuPolicy(0, PowerLimit(watts=250)),)),
    )
    seen = len(h100x4.fake.writes())
    change = GpuPoliciesChange("rg", PolicyAction.SET, policies=(GpuPolicy(0, None), GpuPolicy(1, None)))
    out = await run_operation(h100x4.plugin, RequestKind.GPU_POLICIES_UPDATE, h100x4.ctx(), change)
    assert out.state is not None
    h100x4.state = dict(out.state)
    # before: `none` only dropped the GPU-specific policy and answered ok with no result and no write
    assert [(r.gpu_id, r.ok) for r in out.result.results] == [(0, True), (1, True)]
    assert (h100x4.limit_w(0), h100x4.limit_w(1)) == (700.0, 700.0)
    assert "from before devicectl's change" in out.result.results[0].message
    assert "restored the default limit" in out.result.results[1].message
    assert [c.uuid for c in h100x4.fake.writes()[seen:]] == [h100x4.uuid(0), h100x4.uuid(1)]
    assert [(w.component.split(" (")[0], w.status) for w in out.writes] == [("GPU 0", "ok"), ("GPU 1", "ok")]
    again = await h100x4.do(
        "update_gpu_policies", GpuPoliciesChange("rg", PolicyAction.SET, policies=(GpuPolicy(1, None),))
    )
    assert again.result.results[0].ok and "already in force" in again.result.results[0].message
    assert len(h100x4.fake.writes()) == seen + 2  # nothing left to remove: no write, and it says so


async def test_gpu_policies_reset_falls_back_to_the_share_or_restores(h100x4: FakeNode) -> None:
    await h100x4.do(
        "update_gpu_policies",
        GpuPoliciesChange("rg", PolicyAction.SET, policies=(GpuPolicy(0, PowerLimit(watts=250)),)),
    )
    assert h100x4.limit_w(0) == 250.0
    out = await h100x4.do("update_gpu_policies", GpuPoliciesChange("rg", PolicyAction.UNSET))
    assert out.result.results[0].ok
    assert h100x4.limit_w(0) == 700.0


async def test_gpu_policies_use_the_current_policy_for_the_others(h100x4: FakeNode) -> None:
    change = GpuPoliciesChange(
        "rg",
        PolicyAction.SET,
        current_policy=policy(gpu=1600),
        policies=(GpuPolicy(0, PowerLimit(watts=600)),),
    )
    await h100x4.do("update_gpu_policies", change)
    assert [h100x4.limit_w(i) for i in range(4)] == [600.0, 400.0, 400.0, 400.0]


async def test_a_gpu_policy_for_a_missing_gpu_is_an_error_entry(h100x4: FakeNode) -> None:
    change = GpuPoliciesChange("rg", PolicyAction.SET, policies=(GpuPolicy(7, PowerLimit(watts=300)),))
    out = await h100x4.do("update_gpu_policies", change)
    assert [(r.gpu_id, r.ok) for r in out.result.results] == [(7, False)]
    assert "no such GPU on this node (GPUs: 0, 1, 2, 3)" in out.result.results[0].message


# ---- module scope (Grace superchips) ---------------------------------------------------------------


async def test_module_scope_uses_the_checked_v2_setter(make_node: MakeNode) -> None:
    node = await make_node("gh200", options={"power_scope": "module"})
    out = await node.do("set_policy", SET(policy(gpu=800)))
    assert out.result.ok, out.result.error
    assert node.fake.gpu(0).module_limit_mw == 800_000
    assert node.fake.gpu(0).limit_mw == 900_000  # the GPU-only limit is untouched
    assert "module scope" in out.result.gpu_policies.results[0].message
    assert node.fake.called("nvmlDeviceSetPowerManagementLimit_v2") == 1
    assert node.state["limits"][node.uuid(0)]["module"]["prior_mw"] == 1_000_000
    await node.do("unset_policy", UNSET)
    assert node.fake.gpu(0).module_limit_mw == 1_000_000


async def test_module_scope_errors_are_not_swallowed(make_node: MakeNode) -> None:
    """The stock `_v2` wrapper returns success whatever the driver says; ours raises."""
    node = await make_node("gh200", options={"power_scope": "module"}, privileged=False)
    out = await node.do("set_policy", SET(policy(gpu=800)))
    gpu = out.result.gpu_policies.results[0]
    assert not gpu.ok and "NVML_ERROR_NO_PERMISSION" in gpu.message
    assert node.fake.gpu(0).module_limit_mw == 1_000_000


async def test_module_scope_validates_against_module_constraints(make_node: MakeNode) -> None:
    node = await make_node("gb200", options={"power_scope": "module"})
    out = await node.do("set_policy", SET(policy(gpu=300)))
    assert "minimum of 500 W (allowed 500..2700 W)" in out.result.gpu_policies.results[0].message


async def test_module_scope_on_a_gpu_without_it_is_unsupported(make_node: MakeNode) -> None:
    node = await make_node("h100", options={"power_scope": "module"})
    out = await node.do("set_policy", SET(policy(gpu=500)))
    gpu = out.result.gpu_policies.results[0]
    assert not gpu.ok and "only available on Grace superchips" in gpu.message
    assert not node.fake.writes()


async def test_an_unknown_power_scope_option_is_a_configuration_error(make_node: MakeNode) -> None:
    node = await make_node("h100", options={"power_scope": "board"})
    with pytest.raises(HostEnvironmentError, match="power_scope must be one of gpu, module"):
        await node.do("set_policy", SET(policy(gpu=500)))
    schema = node.plugin.config_schema()
    assert schema["properties"]["power_scope"]["enum"] == ["gpu", "module"]


async def test_invalid_argument_from_the_driver_is_reported(h100x4: FakeNode) -> None:
    h100x4.fake.fail(
        "nvmlDeviceSetPowerManagementLimit", pynvml.NVML_ERROR_INVALID_ARGUMENT, uuid=h100x4.uuid(0)
    )
    out = await h100x4.do("set_policy", SET(policy(gpu=2000)))
    assert "NVML_ERROR_INVALID_ARGUMENT" in out.result.gpu_policies.results[0].message
    assert out.result.gpu_policies.results[1].ok


async def test_a_write_the_driver_does_not_keep_is_reported(h100x4: FakeNode) -> None:
    setter = pynvml.nvmlDeviceSetPowerManagementLimit

    def clamping(handle: object, limit: int) -> None:
        setter(handle, limit - 5_000)  # a driver that rounds down to its own step

    pynvml.nvmlDeviceSetPowerManagementLimit = clamping
    out = await h100x4.do("set_policy", SET(policy(gpu=2000)))
    gpu = out.result.gpu_policies.results[0]
    assert not gpu.ok and "but NVML reads back 495 W" in gpu.message
    assert (gpu.requested_watts, gpu.applied_watts) == (500.0, 495.0)


async def test_a_failed_restore_keeps_the_record_for_the_next_try(h100x4: FakeNode) -> None:
    await h100x4.do("set_policy", SET(policy(gpu=2000)))
    h100x4.fake.privileged = False
    out = await h100x4.do("unset_policy", UNSET)
    assert not out.result.ok and "NVML_ERROR_NO_PERMISSION" in out.result.error
    assert h100x4.state["limits"][h100x4.uuid(0)]["gpu"]["prior_mw"] == 700_000
    h100x4.fake.privileged = True
    out = await h100x4.do("unset_policy", UNSET)
    assert out.result.ok and h100x4.limit_w(0) == 700.0 and h100x4.state["limits"] == {}
