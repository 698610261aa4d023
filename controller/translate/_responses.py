"""(RequestKind, domain result) <-> `DeviceControllerResponse`."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from google.protobuf.message import Message

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.translate import _diag
from controller.translate._health import result_from_proto as health_result_from_proto
from controller.translate._health import result_to_proto as health_result_to_proto
from controller.translate._json import encode_json_object
from controller.translate._kinds import RESULT_TYPES, response_kind
from controller.translate._metrics import (
    node_metrics_from_proto,
    node_metrics_to_proto,
    raw_documents,
    raw_metrics_to_proto,
)
from controller.translate._policy import policy_from_proto, policy_to_proto
from controller.translate._time import datetime_to_timestamp
from controller.translate._wire import set_message
from plugins.base import (
    AllocationResult,
    ComponentResult,
    DeviceResult,
    EntityModificationResult,
    EntityVerdict,
    GpuMetricsResult,
    GpuPoliciesResult,
    GpuProfileStatus,
    GpuResult,
    GpuUsage,
    HealthResult,
    Outcome,
    PingResult,
    ProfileResult,
    RawMetricsResult,
    RequestKind,
    StdMetricsResult,
    WriteOutcome,
)

_Resp = pb.DeviceControllerResponse
_Entity = _Resp.EntityModificationResponse

_VERDICT_TO_PROTO = {
    EntityVerdict.ACCEPTED: _Entity.ACCEPTED,
    EntityVerdict.ACCEPTED_CALL_PHASE_1: _Entity.ACCEPTED_CALL_PHASE_1,
    EntityVerdict.REJECTED: _Entity.REJECTED,
}
_VERDICT_FROM_PROTO = {value: verdict for verdict, value in _VERDICT_TO_PROTO.items()}


# ---- domain -> proto -----------------------------------------------------------------------


def _failed(result: ComponentResult | GpuResult) -> WriteOutcome | None:
    """What a failed component's write did (the requested/applied note says "not applied" or "not
    confirmed" rather than "applied" the limit read before it); None for one that succeeded."""
    return None if result.ok else result.write


def _component_to_proto(result: ComponentResult) -> _Resp.PolicyComponentResult:
    return _Resp.PolicyComponentResult(
        ok=result.ok,
        power_cap_watts=result.applied_watts,
        diag_msg=_diag.with_write(
            _diag.describe(result.message, result.requested_watts, result.applied_watts, _failed(result)),
            result.write,
        ),
    )


def _gpu_policies_to_proto(result: GpuPoliciesResult) -> _Resp.GPUPoliciesUpdateResponse:
    return _Resp.GPUPoliciesUpdateResponse(
        resource_group=result.resource_group,
        results=[
            _Resp.GPUPolicyResult(
                gpu_id=item.gpu_id,
                ok=item.ok,
                power_cap_watts=item.applied_watts,
                diag_msg=_diag.with_write(
                    _diag.describe(item.message, item.requested_watts, item.applied_watts, _failed(item)),
                    item.write,
                ),
            )
            for item in result.results
        ],
    )


def _profiles_to_proto(result: ProfileResult) -> _Resp.PowerProfileResponse:
    return _Resp.PowerProfileResponse(
        success=result.ok,
        error=result.error,
        verification_id=result.verification_id,
        gpu_statuses=[
            _Resp.GPUProfileStatus(
                gpu_id=item.gpu_id,
                success=item.ok,
                enforced_workload_profile_ids=item.enforced,
                diag_msg=item.message,
            )
            for item in result.gpus
        ],
    )


def _allocation_to_proto(result: AllocationResult) -> _Resp.AllocationResponse:
    msg = _Resp.AllocationResponse(
        success=result.ok,
        error=result.error,
        resource_group=result.resource_group,
        power_cap_watts=result.power_cap_watts,
    )
    # every part "can be nil"; presence is kept even for an empty part
    if result.policy is not None:
        set_message(msg.policy, policy_to_proto(result.policy))
    if result.gpu_policies is not None:
        set_message(msg.allocated_gpu_policies, _gpu_policies_to_proto(result.gpu_policies))
    if result.profiles is not None:
        set_message(msg.workload_profile_result, _profiles_to_proto(result.profiles))
    for part, component in (
        (msg.allocated_node_policy, result.node),
        (msg.allocated_cpu_policy, result.cpu),
        (msg.allocated_memory_policy, result.memory),
    ):
        if component is not None:
            set_message(part, _component_to_proto(component))
    return msg


def _result_to_proto(result: DeviceResult) -> Message:
    if isinstance(result, AllocationResult):
        return _allocation_to_proto(result)
    if isinstance(result, GpuPoliciesResult):
        return _gpu_policies_to_proto(result)
    if isinstance(result, ProfileResult):
        return _profiles_to_proto(result)
    if isinstance(result, PingResult):
        return _Resp.PingResponse(success=result.ok, error=result.error)
    if isinstance(result, GpuMetricsResult):
        return _Resp.GPUMetricsResponse(
            success=result.ok,
            error=result.error,
            metrics=[
                _Resp.GPUMetricsResponse.GPUMetrics(gpu_id=m.gpu_id, usage=m.watts) for m in result.metrics
            ],
        )
    if isinstance(result, RawMetricsResult):
        return raw_metrics_to_proto(result)
    if isinstance(result, StdMetricsResult):
        msg = _Resp.StdMetricsResponse(success=result.ok, error=result.error)
        if result.metrics is not None:
            msg.metrics.CopyFrom(node_metrics_to_proto(result.metrics))
        return msg
    if isinstance(result, HealthResult):
        return health_result_to_proto(result)
    assert isinstance(result, EntityModificationResult)
    return _Entity(response=_VERDICT_TO_PROTO[result.verdict], diag_msg=result.message)


def envelope(
    *,
    device: str,
    request_id: str,
    trace_id: str,
    state_json: bytes | None,
    ping_time: datetime | None,
    ping_error: str,
) -> pb.DeviceControllerResponse:
    """The response fields every kind shares; `state_json=None` leaves the state unset."""
    msg = pb.DeviceControllerResponse(
        device=device, request_id=request_id, trace_id=trace_id, device_ping_error=ping_error
    )
    if state_json is not None:
        msg.device_state_json = state_json
    if ping_time is not None:
        msg.device_ping_time.CopyFrom(datetime_to_timestamp(ping_time))
    return msg


def response_to_proto(
    kind: RequestKind,
    outcome_or_result: Outcome[Any] | DeviceResult,
    *,
    device: str,
    request_id: str,
    trace_id: str = "",
    state_json: bytes | None = None,
    ping_time: datetime | None = None,
    ping_error: str = "",
) -> pb.DeviceControllerResponse:
    """The `DeviceControllerResponse` for a finished request.

    Args:
        kind: the request's kind; the response member has the same name.
        outcome_or_result: the plugin's `Outcome`, or a bare result of the kind's result type.
        state_json: the new `device_state_json`; None means "keep the stored state" and leaves
            the field unset. When None and an `Outcome` carries `state`, that state is encoded.
            (On the wire `b""` is indistinguishable from unset, so it also means "keep".)
        ping_time: when the device was last reached (`device_ping_time`); defaults to the
            Outcome's `reached_at`.
        ping_error: why the device could not be reached; defaults to the Outcome's `reach_error`.

    Component results carry `applied_watts` as `power_cap_watts` and `message` as `diag_msg`;
    when `requested_watts` differs from the applied value, the diag_msg also says
    "requested X W, applied Y W". Raw metrics documents go in an `Any` packing a
    `google.protobuf.Struct`; std metrics energies are sent in Joules.

    Raises:
        TypeError: when the result is not the result type of `kind`.
        ValueError: when a value cannot go on the wire (e.g. a NaN in raw metrics documents).
    """
    result: Any = outcome_or_result
    if isinstance(outcome_or_result, Outcome):
        result = outcome_or_result.result
        if state_json is None and outcome_or_result.state is not None:
            state_json = encode_json_object(outcome_or_result.state, "state")
        if ping_time is None:
            ping_time = outcome_or_result.reached_at
        if not ping_error:
            ping_error = outcome_or_result.reach_error
    expected = RESULT_TYPES[kind]
    if not isinstance(result, expected):
        raise TypeError(f"{kind.value} answers with {expected.__name__}, got {type(result).__name__}")
    msg = envelope(
        device=device,
        request_id=request_id,
        trace_id=trace_id,
        state_json=state_json,
        ping_time=ping_time,
        ping_error=ping_error,
    )
    set_message(getattr(msg, kind.value), _result_to_proto(cast(DeviceResult, result)))
    return msg


# ---- proto -> domain -----------------------------------------------------------------------


def _component_from_proto(msg: _Resp.PolicyComponentResult) -> ComponentResult:
    rest, write = _diag.split_write(msg.diag_msg)
    message, requested = _diag.parse(rest, msg.power_cap_watts, None if msg.ok else write)
    return ComponentResult(
        ok=msg.ok, applied_watts=msg.power_cap_watts, requested_watts=requested, message=message, write=write
    )


def _gpu_policies_from_proto(msg: _Resp.GPUPoliciesUpdateResponse) -> GpuPoliciesResult:
    results = []
    for item in msg.results:
        rest, write = _diag.split_write(item.diag_msg)
        message, requested = _diag.parse(rest, item.power_cap_watts, None if item.ok else write)
        results.append(
            GpuResult(
                gpu_id=item.gpu_id,
                ok=item.ok,
                applied_watts=item.power_cap_watts,
                requested_watts=requested,
                message=message,
                write=write,
            )
        )
    return GpuPoliciesResult(resource_group=msg.resource_group, results=tuple(results))


def _profiles_from_proto(msg: _Resp.PowerProfileResponse) -> ProfileResult:
    return ProfileResult(
        ok=msg.success,
        error=msg.error,
        verification_id=msg.verification_id,
        gpus=tuple(
            GpuProfileStatus(
                gpu_id=item.gpu_id,
                ok=item.success,
                enforced=tuple(item.enforced_workload_profile_ids),
                message=item.diag_msg,
            )
            for item in msg.gpu_statuses
        ),
    )


def _allocation_from_proto(msg: _Resp.AllocationResponse, field: str) -> AllocationResult:
    def component(name: str) -> ComponentResult | None:
        return _component_from_proto(getattr(msg, name)) if msg.HasField(name) else None

    return AllocationResult(
        ok=msg.success,
        error=msg.error,
        resource_group=msg.resource_group,
        policy=policy_from_proto(msg.policy, f"{field}.policy") if msg.HasField("policy") else None,
        power_cap_watts=msg.power_cap_watts,
        gpu_policies=(
            _gpu_policies_from_proto(msg.allocated_gpu_policies)
            if msg.HasField("allocated_gpu_policies")
            else None
        ),
        profiles=(
            _profiles_from_proto(msg.workload_profile_result)
            if msg.HasField("workload_profile_result")
            else None
        ),
        node=component("allocated_node_policy"),
        cpu=component("allocated_cpu_policy"),
        memory=component("allocated_memory_policy"),
    )


def response_from_proto(msg: pb.DeviceControllerResponse) -> tuple[RequestKind, DeviceResult]:
    """The response's kind and its domain result (the inverse of `response_to_proto`).

    A `diag_msg` note "requested X W, applied Y W" is parsed back into `requested_watts`; a
    requested value equal to the applied one is not on the wire and comes back as None. Energies
    are converted to joules; raw metrics that are not a packed Struct come back as
    `{"@type": type_url, "value": base64}`. The envelope (state, ping time and error) is not
    part of the result: read it from the message.

    Raises:
        ValueError: when no response kind is set, an entity verdict is RESPONSE_UNSPECIFIED, or a
            value has no domain equivalent (e.g. an UNSPECIFIED element type in a policy).
    """
    kind = response_kind(msg)
    field = kind.value
    member: Any = getattr(msg, field)
    result: DeviceResult
    expected = RESULT_TYPES[kind]
    if expected is AllocationResult:
        result = _allocation_from_proto(member, field)
    elif expected is GpuPoliciesResult:
        result = _gpu_policies_from_proto(member)
    elif expected is ProfileResult:
        result = _profiles_from_proto(member)
    elif expected is PingResult:
        result = PingResult(ok=member.success, error=member.error)
    elif expected is GpuMetricsResult:
        result = GpuMetricsResult(
            ok=member.success,
            error=member.error,
            metrics=tuple(GpuUsage(gpu_id=m.gpu_id, watts=m.usage) for m in member.metrics),
        )
    elif expected is RawMetricsResult:
        documents = raw_documents(member, f"{field}.raw_metrics")
        result = RawMetricsResult(ok=member.success, error=member.error, documents=documents)
    elif expected is StdMetricsResult:
        metrics = (
            node_metrics_from_proto(member.metrics, f"{field}.metrics")
            if member.HasField("metrics")
            else None
        )
        result = StdMetricsResult(ok=member.success, error=member.error, metrics=metrics)
    elif expected is HealthResult:
        result = health_result_from_proto(member, field)
    else:
        verdict = _VERDICT_FROM_PROTO.get(member.response)
        if verdict is None:
            raise ValueError(f"{field}.response: no verdict (got {member.response})")
        result = EntityModificationResult(verdict=verdict, message=member.diag_msg)
    return kind, result
