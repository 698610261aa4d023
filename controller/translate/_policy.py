"""Policy shapes: `PolicyObject`, `PowerLimit`, `GPUPolicy`, element types and policy actions."""

from __future__ import annotations

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import policy_pb2
from controller.translate._json import Untranslatable, dict_to_struct, struct_to_dict
from plugins.base import ElementType, GpuPolicy, Policy, PolicyAction, PolicyLimit, PowerLimit

_Req = pb.DeviceControllerRequest

_ELEMENT_FROM_PROTO: dict[policy_pb2.PolicyElementType, ElementType] = {
    policy_pb2.COMP_NODE: ElementType.NODE,
    policy_pb2.COMP_GPU: ElementType.GPU,
    policy_pb2.COMP_CPU: ElementType.CPU,
    policy_pb2.COMP_MEMORY: ElementType.MEMORY,
}
_ELEMENT_TO_PROTO = {element: value for value, element in _ELEMENT_FROM_PROTO.items()}

_ACTION_FROM_PROTO: dict[pb.DeviceControllerRequest.PolicyAction, PolicyAction] = {
    _Req.SET_POLICY: PolicyAction.SET,
    _Req.UNSET_POLICY: PolicyAction.UNSET,
}
_ACTION_TO_PROTO = {action: value for value, action in _ACTION_FROM_PROTO.items()}


def action_from_proto(value: int, field: str) -> PolicyAction:
    """SET_POLICY/UNSET_POLICY as a PolicyAction; anything else is untranslatable."""
    try:
        return _ACTION_FROM_PROTO[value]  # type: ignore[index]  # an int is fine for lookup
    except KeyError:
        raise Untranslatable(f"{field}: must be SET_POLICY or UNSET_POLICY, got {value}") from None


def action_to_proto(action: PolicyAction) -> pb.DeviceControllerRequest.PolicyAction:
    """The wire value of a PolicyAction."""
    return _ACTION_TO_PROTO[action]


def element_from_proto(value: int, field: str) -> ElementType:
    """COMP_NODE/GPU/CPU/MEMORY as an ElementType; COMP_UNSPECIFIED is untranslatable."""
    try:
        return _ELEMENT_FROM_PROTO[value]  # type: ignore[index]  # an int is fine for lookup
    except KeyError:
        raise Untranslatable(
            f"{field}: must be COMP_NODE, COMP_GPU, COMP_CPU or COMP_MEMORY, got {value}"
        ) from None


def element_to_proto(element: ElementType) -> policy_pb2.PolicyElementType:
    """The wire value of an ElementType."""
    return _ELEMENT_TO_PROTO[element]


def power_limit_from_proto(msg: policy_pb2.PowerLimit, field: str) -> PowerLimit:
    """`watts` -> PowerLimit(watts=...), `percentage` -> PowerLimit(percent=...)."""
    which = msg.WhichOneof("power_limit")
    try:
        if which == "watts":
            return PowerLimit(watts=msg.watts)
        if which == "percentage":
            return PowerLimit(percent=msg.percentage)
    except ValueError as exc:  # negative, NaN or infinite: PowerLimit refuses them
        raise Untranslatable(f"{field}.{which}: {exc}") from None
    raise Untranslatable(f"{field}: must set watts or percentage")


def power_limit_to_proto(limit: PowerLimit) -> policy_pb2.PowerLimit:
    """The wire form of a PowerLimit (PowerLimit guarantees exactly one of the two is set)."""
    if limit.watts is not None:
        return policy_pb2.PowerLimit(watts=limit.watts)
    return policy_pb2.PowerLimit(percentage=limit.percent)


def policy_from_proto(msg: policy_pb2.PolicyObject, field: str) -> Policy:
    """A Policy; `properties` becomes a plain dict (empty when absent)."""
    limits = tuple(
        PolicyLimit(
            element=element_from_proto(item.element_type, f"{field}.limits[{index}].element_type"),
            limit=power_limit_from_proto(item.power_limit, f"{field}.limits[{index}].power_limit"),
        )
        for index, item in enumerate(msg.limits)
    )
    properties = struct_to_dict(msg.properties, f"{field}.properties") if msg.HasField("properties") else {}
    return Policy(name=msg.name, limits=limits, properties=properties)


def policy_to_proto(policy: Policy, field: str = "policy") -> policy_pb2.PolicyObject:
    """The wire form of a Policy; empty `properties` leave the Struct unset."""
    msg = policy_pb2.PolicyObject()
    policy_into(msg, policy, field)
    return msg


def policy_into(msg: policy_pb2.PolicyObject, policy: Policy, field: str = "policy") -> None:
    """`policy_to_proto` written into `msg` itself (present even for an empty policy): each limit is
    added in place rather than built apart and copied in."""
    msg.SetInParent()
    msg.name = policy.name
    add = msg.limits.add
    for item in policy.limits:
        limit = add(element_type=_ELEMENT_TO_PROTO[item.element]).power_limit
        if item.limit.watts is not None:  # PowerLimit guarantees exactly one of the two is set
            limit.watts = item.limit.watts
        elif item.limit.percent is not None:
            limit.percentage = item.limit.percent
    if policy.properties:
        msg.properties.CopyFrom(dict_to_struct(policy.properties, f"{field}.properties"))


def gpu_policy_from_proto(msg: policy_pb2.GPUPolicy, field: str) -> GpuPolicy:
    """A GpuPolicy; an absent `power_limit` means "remove the GPU-specific policy" (limit=None)."""
    if not msg.HasField("power_limit"):
        return GpuPolicy(gpu_id=msg.gpu_id, limit=None)
    return GpuPolicy(gpu_id=msg.gpu_id, limit=power_limit_from_proto(msg.power_limit, f"{field}.power_limit"))


def gpu_policy_to_proto(policy: GpuPolicy) -> policy_pb2.GPUPolicy:
    """The wire form of a GpuPolicy; `limit=None` leaves `power_limit` absent."""
    msg = policy_pb2.GPUPolicy(gpu_id=policy.gpu_id)
    if policy.limit is not None:
        msg.power_limit.CopyFrom(power_limit_to_proto(policy.limit))
    return msg
