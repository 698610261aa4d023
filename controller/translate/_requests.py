"""Each request member of `DeviceControllerRequest` <-> its domain request, both directions.

Every `*_from_proto(msg, field)` names problems by `field`, the member's proto path; the rows of
`controller.translate.kinds` pick the pair of each kind.
"""

from __future__ import annotations

from google.protobuf import empty_pb2

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import policy_pb2
from controller.api.json_fields import parse_json_object
from controller.translate._health import query_from_proto
from controller.translate._json import encode_json_object
from controller.translate._policy import (
    action_from_proto,
    action_to_proto,
    gpu_policy_from_proto,
    gpu_policy_to_proto,
    policy_from_proto,
    policy_to_proto,
)
from controller.translate._wire import set_message
from plugins.base import (
    Allocation,
    Empty,
    EntityModification,
    GpuMetricsQuery,
    GpuPoliciesChange,
    HealthQuery,
    Ping,
    PolicyAction,
    PolicyChange,
    ProfileChange,
)

_Req = pb.DeviceControllerRequest


# ---- proto -> domain -----------------------------------------------------------------------


def policy_change_from_proto(msg: _Req.PolicySetRequest, field: str) -> PolicyChange:
    return PolicyChange(
        action=action_from_proto(msg.policy_action, f"{field}.policy_action"),
        policy=policy_from_proto(msg.policy, f"{field}.policy") if msg.HasField("policy") else None,
    )


def gpu_policies_from_proto(msg: _Req.GPUPoliciesSetRequest, field: str) -> GpuPoliciesChange:
    action = action_from_proto(msg.gpu_policy_action, f"{field}.gpu_policy_action")
    current = (
        policy_from_proto(msg.current_policy, f"{field}.current_policy")
        if msg.HasField("current_policy")
        else None
    )
    # the contract: "If resetting, gpu_policies field is ignored"
    policies = (
        ()
        if action is PolicyAction.UNSET
        else tuple(
            gpu_policy_from_proto(item, f"{field}.gpu_policies.policies[{index}]")
            for index, item in enumerate(msg.gpu_policies.policies)
        )
    )
    return GpuPoliciesChange(
        resource_group=msg.resource_group, action=action, current_policy=current, policies=policies
    )


def profiles_from_proto(msg: _Req.PowerProfileRequest, field: str = "") -> ProfileChange:
    return ProfileChange(
        enable=tuple(msg.enable_profile_ids),
        disable=tuple(msg.disable_profile_ids),
        verify=not msg.disable_async_verification,
    )


def allocation_from_proto(msg: _Req.AllocationRequest, field: str) -> Allocation:
    # each optional part is "no change" when absent, hence HasField rather than the default
    return Allocation(
        resource_group=msg.resource_group,
        policy=policy_change_from_proto(msg.policy, f"{field}.policy") if msg.HasField("policy") else None,
        gpu_policies=(
            gpu_policies_from_proto(msg.gpu_policies, f"{field}.gpu_policies")
            if msg.HasField("gpu_policies")
            else None
        ),
        profiles=profiles_from_proto(msg.workload_profiles, f"{field}.workload_profiles")
        if msg.HasField("workload_profiles")
        else None,
    )


def entity_from_proto(msg: _Req.EntityModificationRequest, field: str) -> EntityModification:
    return EntityModification(
        phase=msg.phase,
        old_model=parse_json_object(msg.old_device_model, f"{field}.old_device_model"),
        new_model=parse_json_object(msg.new_device_model, f"{field}.new_device_model"),
        old_default_policy=(
            policy_from_proto(msg.old_default_policy, f"{field}.old_default_policy")
            if msg.HasField("old_default_policy")
            else None
        ),
        new_default_policy=(
            policy_from_proto(msg.new_default_policy, f"{field}.new_default_policy")
            if msg.HasField("new_default_policy")
            else None
        ),
        resource_group=msg.resource_group,
    )


def ping_from_proto(msg: _Req.PingRequest, field: str = "") -> Ping:
    return Ping(retry_count=msg.retry_count)


def gpu_metrics_from_proto(msg: _Req.GPUMetricsRequest, field: str = "") -> GpuMetricsQuery:
    return GpuMetricsQuery(gpu_ids=tuple(msg.gpu_ids))


def empty_from_proto(msg: empty_pb2.Empty, field: str = "") -> Empty:
    """`raw_metrics` and `std_metrics` carry `google.protobuf.Empty`."""
    return Empty()


def health_query_from_proto(msg: _Req.BMCHealthDeviceRequest, field: str = "") -> HealthQuery:
    return query_from_proto(msg)


# ---- domain -> proto -----------------------------------------------------------------------


def policy_change_to_proto(change: PolicyChange) -> _Req.PolicySetRequest:
    msg = _Req.PolicySetRequest(policy_action=action_to_proto(change.action))
    if change.policy is not None:
        set_message(msg.policy, policy_to_proto(change.policy))
    return msg


def gpu_policies_to_proto(change: GpuPoliciesChange) -> _Req.GPUPoliciesSetRequest:
    msg = _Req.GPUPoliciesSetRequest(
        resource_group=change.resource_group, gpu_policy_action=action_to_proto(change.action)
    )
    if change.current_policy is not None:
        set_message(msg.current_policy, policy_to_proto(change.current_policy, "current_policy"))
    if change.action is PolicyAction.SET:
        # a reset's policies would be ignored by the receiver, so they are not sent at all
        set_message(
            msg.gpu_policies,
            policy_pb2.GPUPolicies(policies=[gpu_policy_to_proto(item) for item in change.policies]),
        )
    return msg


def profiles_to_proto(change: ProfileChange) -> _Req.PowerProfileRequest:
    return _Req.PowerProfileRequest(
        enable_profile_ids=change.enable,
        disable_profile_ids=change.disable,
        disable_async_verification=not change.verify,
    )


def allocation_to_proto(allocation: Allocation) -> _Req.AllocationRequest:
    msg = _Req.AllocationRequest(resource_group=allocation.resource_group)
    if allocation.policy is not None:
        set_message(msg.policy, policy_change_to_proto(allocation.policy))
    if allocation.gpu_policies is not None:
        set_message(msg.gpu_policies, gpu_policies_to_proto(allocation.gpu_policies))
    if allocation.profiles is not None:
        set_message(msg.workload_profiles, profiles_to_proto(allocation.profiles))
    return msg


def entity_to_proto(change: EntityModification) -> _Req.EntityModificationRequest:
    msg = _Req.EntityModificationRequest(
        phase=change.phase,
        old_device_model=encode_json_object(change.old_model, "old_model"),
        new_device_model=encode_json_object(change.new_model, "new_model"),
        resource_group=change.resource_group,
    )
    if change.old_default_policy is not None:
        set_message(msg.old_default_policy, policy_to_proto(change.old_default_policy, "old_default_policy"))
    if change.new_default_policy is not None:
        set_message(msg.new_default_policy, policy_to_proto(change.new_default_policy, "new_default_policy"))
    return msg


def ping_to_proto(request: Ping) -> _Req.PingRequest:
    return _Req.PingRequest(retry_count=request.retry_count)


def gpu_metrics_to_proto(request: GpuMetricsQuery) -> _Req.GPUMetricsRequest:
    return _Req.GPUMetricsRequest(gpu_ids=request.gpu_ids)


def empty_to_proto(request: Empty) -> empty_pb2.Empty:
    return empty_pb2.Empty()
