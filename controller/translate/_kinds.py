"""Which domain request and result type belongs to each request kind (oneof member)."""

from __future__ import annotations

from collections.abc import Mapping

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from plugins.base import (
    Allocation,
    AllocationResult,
    Empty,
    EntityModification,
    EntityModificationResult,
    GpuMetricsQuery,
    GpuMetricsResult,
    GpuPoliciesChange,
    GpuPoliciesResult,
    HealthQuery,
    HealthResult,
    InvalidRequestError,
    Ping,
    PingResult,
    PolicyChange,
    ProfileChange,
    ProfileResult,
    RawMetricsResult,
    RequestKind,
    StdMetricsResult,
)

K = RequestKind

ALLOCATION_KINDS = frozenset(
    {K.RESOURCE_GROUP_ACTIVATE, K.RESOURCE_GROUP_DEACTIVATE, K.RESOURCE_GROUP_UPDATE}
)
POLICY_SET_KINDS = frozenset({K.TOPOLOGY_ACTIVATE, K.TOPOLOGY_DEACTIVATE})
PROFILE_KINDS = frozenset({K.ENABLE_WORKLOAD_PROFILE, K.DISABLE_WORKLOAD_PROFILE, K.UPDATE_WORKLOAD_PROFILE})

#: the domain request type each kind carries
REQUEST_TYPES: Mapping[RequestKind, type] = {
    **dict.fromkeys(ALLOCATION_KINDS, Allocation),
    **dict.fromkeys(POLICY_SET_KINDS, PolicyChange),
    K.GPU_POLICIES_UPDATE: GpuPoliciesChange,
    **dict.fromkeys(PROFILE_KINDS, ProfileChange),
    K.PING: Ping,
    K.GPU_METRICS: GpuMetricsQuery,
    K.RAW_METRICS: Empty,
    K.STD_METRICS: Empty,
    K.MODIFY_ENTITY_MODEL: EntityModification,
    K.BMC_HEALTH: HealthQuery,
}

#: the domain result type each kind answers with (topology kinds answer with an allocation)
RESULT_TYPES: Mapping[RequestKind, type] = {
    **dict.fromkeys(ALLOCATION_KINDS | POLICY_SET_KINDS, AllocationResult),
    K.GPU_POLICIES_UPDATE: GpuPoliciesResult,
    **dict.fromkeys(PROFILE_KINDS, ProfileResult),
    K.PING: PingResult,
    K.GPU_METRICS: GpuMetricsResult,
    K.RAW_METRICS: RawMetricsResult,
    K.STD_METRICS: StdMetricsResult,
    K.MODIFY_ENTITY_MODEL: EntityModificationResult,
    K.BMC_HEALTH: HealthResult,
}


def request_kind(msg: pb.DeviceControllerRequest) -> RequestKind:
    """The kind of `msg`, from its `request` oneof.

    Raises:
        InvalidRequestError: when no request kind is set.
    """
    member = msg.WhichOneof("request")
    if member is None:
        expected = ", ".join(kind.value for kind in RequestKind)
        raise InvalidRequestError(f"request: no request kind set; expected one of {expected}")
    return RequestKind(member)


def response_kind(msg: pb.DeviceControllerResponse) -> RequestKind:
    """The kind of `msg`, from its `response` oneof.

    Raises:
        ValueError: when no response kind is set.
    """
    member = msg.WhichOneof("response")
    if member is None:
        raise ValueError("response: no response kind set")
    return RequestKind(member)
