"""Resource groups: layering over the topology policy, GPU policies and profiles in one request."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from plugins.base import (
    Allocation,
    ElementType,
    Empty,
    EntityModification,
    EntityVerdict,
    GpuMetricsQuery,
    GpuPoliciesChange,
    GpuPolicy,
    HealthQuery,
    InvalidRequestError,
    Ping,
    Policy,
    PolicyAction,
    PolicyChange,
    PolicyLimit,
    PowerLimit,
    ProfileChange,
    RequestKind,
    UnsupportedError,
    run_operation,
)
from plugins.base.kinds import KINDS
from plugins.nvml.testing import FakeNode

MakeNode = Callable[..., Awaitable[FakeNode]]


def gpu_policy(name: str, watts: float) -> Policy:
    return Policy(name, (PolicyLimit(ElementType.GPU, PowerLimit(watts=watts)),))


def SET(p: Policy) -> PolicyChange:
    return PolicyChange(PolicyAction.SET, p)


async def test_a_resource_group_overrides_the_topology_and_falls_back_on_deactivation(
    h100x4: FakeNode,
) -> None:
    await h100x4.do("set_policy", SET(gpu_policy("topology", 2400)))
    assert h100x4.limit_w(0) == 600.0
    out = await h100x4.do("activate_allocation", Allocation("rg-1", policy=SET(gpu_policy("job", 1600))))
    assert out.result.ok and out.result.resource_group == "rg-1"
    assert out.result.policy is not None and out.result.policy.name == "job"
    assert h100x4.limit_w(0) == 400.0
    out = await h100x4.do("deactivate_allocation", Allocation("rg-1"))
    assert out.result.ok
    assert out.result.policy is not None and out.result.policy.name == "topology"
    assert h100x4.limit_w(0) == 600.0  # the job's cap does not leak into the next job


async def test_deactivation_without_topology_restores_the_prior_limits(h100x4: FakeNode) -> None:
    h100x4.fake.gpu(1).limit_mw = 550_000
    await h100x4.do("activate_allocation", Allocation("rg-1", policy=SET(gpu_policy("job", 1600))))
    await h100x4.do("deactivate_allocation", Allocation("rg-1"))
    assert [h100x4.limit_w(i) for i in range(4)] == [700.0, 550.0, 700.0, 700.0]
    assert h100x4.state["limits"] == {}


async def test_update_changes_only_the_parts_it_carries(h100x4: FakeNode) -> None:
    await h100x4.do("activate_allocation", Allocation("rg-1", policy=SET(gpu_policy("job", 1600))))
    change = GpuPoliciesChange("rg-1", PolicyAction.SET, policies=(GpuPolicy(2, PowerLimit(watts=650)),))
    out = await h100x4.do("update_allocation", Allocation("rg-1", gpu_policies=change))
    assert out.result.ok, out.result.error
    assert [h100x4.limit_w(i) for i in range(4)] == [400.0, 400.0, 650.0, 400.0]  # the job policy stays
    assert {r.gpu_id for r in out.result.gpu_policies.results} == {0, 1, 2, 3}


async def test_an_unset_part_removes_the_groups_policy(h100x4: FakeNode) -> None:
    await h100x4.do("set_policy", SET(gpu_policy("topology", 2400)))
    await h100x4.do("activate_allocation", Allocation("rg-1", policy=SET(gpu_policy("job", 1600))))
    await h100x4.do("update_allocation", Allocation("rg-1", policy=PolicyChange(PolicyAction.UNSET)))
    assert h100x4.limit_w(0) == 600.0


async def test_a_set_part_needs_a_policy(h100x4: FakeNode) -> None:
    with pytest.raises(InvalidRequestError):
        await h100x4.do("activate_allocation", Allocation("rg", policy=PolicyChange(PolicyAction.SET)))


async def test_a_group_with_caps_and_profiles_in_one_request(b200x2: FakeNode) -> None:
    request = Allocation(
        "rg-7",
        policy=SET(gpu_policy("job", 1600)),
        gpu_policies=GpuPoliciesChange(
            "rg-7", PolicyAction.SET, policies=(GpuPolicy(1, PowerLimit(watts=900)),)
        ),
        profiles=ProfileChange(enable=(5,)),  # out-of-band 5 = NVML 2 = COMPUTE
    )
    out = await b200x2.do("activate_allocation", request)
    result = out.result
    assert result.ok, result.error
    assert (b200x2.limit_w(0), b200x2.limit_w(1)) == (800.0, 900.0)
    assert result.profiles is not None and result.profiles.ok
    assert [g.enforced for g in result.profiles.gpus] == [(5,), (5,)]
    assert out.verification is not None
    assert result.profiles.verification_id == out.verification.verification_id
    assert b200x2.fake.gpu(0).requested_profiles == {2}

    out = await b200x2.do("deactivate_allocation", Allocation("rg-7"))
    assert out.result.ok, out.result.error
    assert (b200x2.limit_w(0), b200x2.limit_w(1)) == (1000.0, 1000.0)
    assert b200x2.fake.gpu(0).requested_profiles == set()  # profiles enabled for the group are gone
    assert out.result.profiles is not None and "restored requested profiles to none" in (
        out.result.profiles.gpus[0].message
    )
    assert b200x2.state["profiles"] == {} and b200x2.state["policies"] == {}


async def test_deactivating_a_profile_only_group_leaves_untracked_limits_alone(b200x2: FakeNode) -> None:
    b200x2.fake.gpu(0).limit_mw = 800_000  # the operator's own cap
    await b200x2.do("activate_allocation", Allocation("rg", profiles=ProfileChange(enable=(4,))))
    out = await b200x2.do("deactivate_allocation", Allocation("rg"))
    assert out.result.ok
    assert b200x2.limit_w(0) == 800.0
    assert out.result.gpu_policies is not None and out.result.gpu_policies.results == ()


async def test_a_failing_profile_part_fails_the_allocation_but_keeps_the_caps(h100x4: FakeNode) -> None:
    request = Allocation("rg", policy=SET(gpu_policy("job", 1600)), profiles=ProfileChange(enable=(5,)))
    out = await h100x4.do("activate_allocation", request)
    assert not out.result.ok
    assert "workload profiles" in out.result.error and "not supported on this GPU" in out.result.error
    assert h100x4.limit_w(0) == 400.0
    assert h100x4.state["limits"]  # the caps' prior values are recorded all the same


async def test_every_request_kind_is_served(b200x2: FakeNode) -> None:
    requests = {
        RequestKind.RESOURCE_GROUP_ACTIVATE: Allocation("rg", policy=SET(gpu_policy("j", 1600))),
        RequestKind.RESOURCE_GROUP_UPDATE: Allocation("rg", policy=SET(gpu_policy("j", 1500))),
        RequestKind.RESOURCE_GROUP_DEACTIVATE: Allocation("rg"),
        RequestKind.TOPOLOGY_ACTIVATE: SET(gpu_policy("t", 1800)),
        RequestKind.TOPOLOGY_DEACTIVATE: PolicyChange(PolicyAction.UNSET),
        RequestKind.GPU_POLICIES_UPDATE: GpuPoliciesChange(
            "rg", PolicyAction.SET, policies=(GpuPolicy(0, PowerLimit(watts=500)),)
        ),
        RequestKind.ENABLE_WORKLOAD_PROFILE: ProfileChange(enable=(5, 8)),
        RequestKind.UPDATE_WORKLOAD_PROFILE: ProfileChange(enable=(9,), disable=(8,)),
        RequestKind.DISABLE_WORKLOAD_PROFILE: ProfileChange(disable=(5, 9)),
        RequestKind.PING: Ping(),
        RequestKind.GPU_METRICS: GpuMetricsQuery(),
        RequestKind.RAW_METRICS: Empty(),
        RequestKind.STD_METRICS: Empty(),
        RequestKind.MODIFY_ENTITY_MODEL: EntityModification(0, {}, {}),
    }
    # a readiness check is the BMC's (out of band): in band it is answered "unsupported"
    assert set(requests) | {RequestKind.BMC_HEALTH} == set(KINDS.names())
    with pytest.raises(UnsupportedError, match="health verification is not supported"):
        await run_operation(b200x2.plugin, RequestKind.BMC_HEALTH, b200x2.ctx(), HealthQuery())
    for kind, request in requests.items():
        outcome = await run_operation(b200x2.plugin, kind, b200x2.ctx(), request)
        if outcome.state is not None:
            b200x2.state = dict(outcome.state)
        ok = getattr(outcome.result, "ok", None)
        if kind is RequestKind.GPU_POLICIES_UPDATE:
            ok = all(r.ok for r in outcome.result.results)
        if kind is RequestKind.MODIFY_ENTITY_MODEL:
            ok = outcome.result.verdict is EntityVerdict.ACCEPTED
        assert ok, f"{kind}: {outcome.result}"
    assert b200x2.fake.gpu(1).requested_profiles == set()
