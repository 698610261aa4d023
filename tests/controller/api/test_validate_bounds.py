"""Every repeated field of a request is bounded at the edge (`MAX_REPEATED` entries)."""

from __future__ import annotations

import pytest

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import policy_pb2 as pp
from controller.api.validate import MAX_REPEATED, request_problems

R = pb.DeviceControllerRequest


def gpu_policies(n: int) -> pb.DeviceControllerRequest:
    policies = [pp.GPUPolicy(gpu_id=i, power_limit=pp.PowerLimit(watts=500)) for i in range(n)]
    return R(
        device="d",
        request_id="r",
        gpu_policies_update=R.GPUPoliciesSetRequest(
            gpu_policy_action=R.SET_POLICY, gpu_policies=pp.GPUPolicies(policies=policies)
        ),
    )


def gpu_metrics(n: int) -> pb.DeviceControllerRequest:
    return R(device="d", request_id="r", gpu_metrics=R.GPUMetricsRequest(gpu_ids=range(n)))


def profiles(n: int) -> pb.DeviceControllerRequest:
    return R(
        device="d",
        request_id="r",
        enable_workload_profile=R.PowerProfileRequest(enable_profile_ids=[3] * n),
    )


def limits(n: int) -> pb.DeviceControllerRequest:
    limit = pp.PolicyLimit(element_type=pp.COMP_NODE, power_limit=pp.PowerLimit(watts=1000))
    policy = pp.PolicyObject(name="p", limits=[limit] * n)
    return R(
        device="d",
        request_id="r",
        topology_activate=R.PolicySetRequest(policy_action=R.SET_POLICY, policy=policy),
    )


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (gpu_policies, "gpu_policies_update.gpu_policies.policies"),
        (gpu_metrics, "gpu_metrics.gpu_ids"),
        (profiles, "enable_workload_profile.enable_profile_ids"),
        (limits, "topology_activate.policy.limits"),
    ],
)
def test_a_repeated_field_over_the_bound_is_one_clear_problem(build, field) -> None:  # type: ignore[no-untyped-def]
    problems = request_problems(build(200_000))
    assert problems == [f"{field}: at most {MAX_REPEATED} entries, got 200000"]


def test_the_bound_itself_is_accepted() -> None:
    assert request_problems(gpu_policies(MAX_REPEATED)) == []
    assert request_problems(gpu_metrics(MAX_REPEATED)) == []
