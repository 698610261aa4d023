"""`DeviceControllerRequest` <-> (RequestKind, domain request)."""

from __future__ import annotations

from google.protobuf.message import Message

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import policy_pb2
from controller.api.json_fields import parse_json_object
from controller.translate._health import query_from_proto, query_to_proto
from controller.translate._json import Untranslatable, encode_json_object
from controller.translate._kinds import (
    ALLOCATION_KINDS,
    POLICY_SET_KINDS,
    PROFILE_KINDS,
    REQUEST_TYPES,
    request_kind,
)
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
    DeviceRequest,
    Empty,
    EntityModification,
    GpuMetricsQuery,
    GpuPoliciesChange,
    HealthQuery,
    InvalidRequestError,
    Ping,
    PolicyAction,
    PolicyChange,
    ProfileChange,
    RequestKind,
)

_Req = pb.DeviceControllerRequest


# ---- proto -> domain -----------------------------------------------------------------------


def _policy_change_from_proto(msg: _Req.PolicySetRequest, field: str) -> PolicyChange:
    return PolicyChange(
        action=action_from_proto(msg.policy_action, f"{field}.policy_action"),
        policy=policy_from_proto(msg.policy, f"{field}.policy") if msg.HasField("policy") else None,
    )


def _gpu_policies_from_proto(msg: _Req.GPUPoliciesSetRequest, field: str) -> GpuPoliciesChange:
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


def _profiles_from_proto(msg: _Req.PowerProfileRequest) -> ProfileChange:
    return ProfileChange(
        enable=tuple(msg.enable_profile_ids),
        disable=tuple(msg.disable_profile_ids),
        verify=not msg.disable_async_verification,
    )


def _allocation_from_proto(msg: _Req.AllocationRequest, field: str) -> Allocation:
    # each optional part is "no change" when absent, hence HasField rather than the default
    return Allocation(
        resource_group=msg.resource_group,
        policy=_policy_change_from_proto(msg.policy, f"{field}.policy") if msg.HasField("policy") else None,
        gpu_policies=(
            _gpu_policies_from_proto(msg.gpu_policies, f"{field}.gpu_policies")
            if msg.HasField("gpu_policies")
            else None
        ),
        profiles=_profiles_from_proto(msg.workload_profiles) if msg.HasField("workload_profiles") else None,
    )


def _entity_from_proto(msg: _Req.EntityModificationRequest, field: str) -> EntityModification:
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


def request_from_proto(msg: pb.DeviceControllerRequest) -> tuple[RequestKind, DeviceRequest]:
    """The request kind and its domain request.

    Absent optional parts become None; a GPU policy without `power_limit` becomes
    `GpuPolicy(limit=None)`; the GPU policies of a reset (UNSET_POLICY) are dropped, as the
    contract says they are ignored; entity device models are parsed (empty bytes -> {}).
    The envelope (device, request_id, timeouts, model and state JSON) is not part of the result.

    Raises:
        InvalidRequestError: naming the field, for a message with no domain equivalent (no kind,
            an UNSPECIFIED enum, a limit with neither watts nor percentage, a negative or NaN
            limit, a device model that is not a JSON object). `validate_request` catches all of
            these first.
    """
    kind = request_kind(msg)
    field = kind.value
    try:
        if kind in ALLOCATION_KINDS:
            return kind, _allocation_from_proto(getattr(msg, field), field)
        if kind in POLICY_SET_KINDS:
            return kind, _policy_change_from_proto(getattr(msg, field), field)
        if kind is RequestKind.GPU_POLICIES_UPDATE:
            return kind, _gpu_policies_from_proto(msg.gpu_policies_update, field)
        if kind in PROFILE_KINDS:
            return kind, _profiles_from_proto(getattr(msg, field))
        if kind is RequestKind.PING:
            return kind, Ping(retry_count=msg.ping.retry_count)
        if kind is RequestKind.GPU_METRICS:
            return kind, GpuMetricsQuery(gpu_ids=tuple(msg.gpu_metrics.gpu_ids))
        if kind is RequestKind.MODIFY_ENTITY_MODEL:
            return kind, _entity_from_proto(msg.modify_entity_model, field)
        if kind is RequestKind.BMC_HEALTH:
            return kind, query_from_proto(msg.bmc_health)
    except Untranslatable as exc:
        raise InvalidRequestError(str(exc)) from None
    # raw_metrics and std_metrics carry google.protobuf.Empty
    return kind, Empty()


# ---- domain -> proto -----------------------------------------------------------------------


def _policy_change_to_proto(change: PolicyChange) -> _Req.PolicySetRequest:
    msg = _Req.PolicySetRequest(policy_action=action_to_proto(change.action))
    if change.policy is not None:
        set_message(msg.policy, policy_to_proto(change.policy))
    return msg


def _gpu_policies_to_proto(change: GpuPoliciesChange) -> _Req.GPUPoliciesSetRequest:
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


def _profiles_to_proto(change: ProfileChange) -> _Req.PowerProfileRequest:
    return _Req.PowerProfileRequest(
        enable_profile_ids=change.enable,
        disable_profile_ids=change.disable,
        disable_async_verification=not change.verify,
    )


def _allocation_to_proto(allocation: Allocation) -> _Req.AllocationRequest:
    msg = _Req.AllocationRequest(resource_group=allocation.resource_group)
    if allocation.policy is not None:
        set_message(msg.policy, _policy_change_to_proto(allocation.policy))
    if allocation.gpu_policies is not None:
        set_message(msg.gpu_policies, _gpu_policies_to_proto(allocation.gpu_policies))
    if allocation.profiles is not None:
        set_message(msg.workload_profiles, _profiles_to_proto(allocation.profiles))
    return msg


def _entity_to_proto(change: EntityModification) -> _Req.EntityModificationRequest:
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


def _member_to_proto(kind: RequestKind, request: DeviceRequest) -> Message:
    if isinstance(request, Allocation):
        return _allocation_to_proto(request)
    if isinstance(request, PolicyChange):
        return _policy_change_to_proto(request)
    if isinstance(request, GpuPoliciesChange):
        return _gpu_policies_to_proto(request)
    if isinstance(request, ProfileChange):
        return _profiles_to_proto(request)
    if isinstance(request, Ping):
        return _Req.PingRequest(retry_count=request.retry_count)
    if isinstance(request, GpuMetricsQuery):
        return _Req.GPUMetricsRequest(gpu_ids=request.gpu_ids)
    if isinstance(request, EntityModification):
        return _entity_to_proto(request)
    if isinstance(request, HealthQuery):
        return query_to_proto(request)
    return getattr(_Req(), kind.value)  # google.protobuf.Empty


def request_to_proto(
    kind: RequestKind,
    request: DeviceRequest,
    *,
    device: str,
    request_id: str,
    timeout_seconds: int = 0,
    trace_id: str = "",
    device_model_json: bytes = b"",
    device_state_json: bytes = b"",
) -> pb.DeviceControllerRequest:
    """A `DeviceControllerRequest` carrying `request` as its `kind` member.

    The inverse of `request_from_proto`: `request_from_proto(request_to_proto(k, r, ...))`
    gives back `(k, r)`, with two normalisations that carry no meaning: the policies of a GPU
    policy reset are not sent (they would be ignored), and entity device models are sent as
    compact JSON.

    Raises:
        TypeError: when `request` is not the domain type of `kind`.
        ValueError: when a value cannot go on the wire (e.g. a device model that is not JSON).
    """
    expected = REQUEST_TYPES[kind]
    if not isinstance(request, expected):
        raise TypeError(f"{kind.value} carries {expected.__name__}, got {type(request).__name__}")
    msg = pb.DeviceControllerRequest(
        device=device,
        request_id=request_id,
        timeout_seconds=timeout_seconds,
        trace_id=trace_id,
        device_model_json=device_model_json,
        device_state_json=device_state_json,
    )
    set_message(getattr(msg, kind.value), _member_to_proto(kind, request))
    return msg
