"""Each response member of `DeviceControllerResponse` <-> its domain result, both directions.

The rows of `controller.translate.kinds` pick the pair of each kind. Component results carry
`applied_watts` as `power_cap_watts` and `message` as `diag_msg`; when `requested_watts` differs
from the applied value, the diag_msg also says "requested X W, applied Y W" (parsed back on the
way in).
"""

from __future__ import annotations

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.translate import _diag
from controller.translate._metrics import (
    node_metrics_from_proto,
    node_metrics_to_proto,
    raw_documents,
)
from controller.translate._policy import policy_from_proto, policy_into
from controller.translate._wire import set_message
from plugins.base import (
    AllocationResult,
    ComponentResult,
    EntityModificationResult,
    EntityVerdict,
    GpuMetricsResult,
    GpuPoliciesResult,
    GpuProfileStatus,
    GpuResult,
    GpuUsage,
    PingResult,
    ProfileResult,
    RawMetricsResult,
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


def component_to_proto(result: ComponentResult) -> _Resp.PolicyComponentResult:
    msg = _Resp.PolicyComponentResult()
    _component_into(msg, result)
    return msg


def _component_into(msg: _Resp.PolicyComponentResult, result: ComponentResult) -> None:
    """`component_to_proto` written into `msg` itself (present even when all its fields are zero)."""
    msg.SetInParent()
    msg.ok = result.ok
    msg.power_cap_watts = result.applied_watts
    msg.diag_msg = _diag.with_write(
        _diag.describe(result.message, result.requested_watts, result.applied_watts, _failed(result)),
        result.write,
    )


def gpu_policies_result_to_proto(result: GpuPoliciesResult) -> _Resp.GPUPoliciesUpdateResponse:
    msg = _Resp.GPUPoliciesUpdateResponse()
    _gpu_policies_result_into(msg, result)
    return msg


def _gpu_policies_result_into(msg: _Resp.GPUPoliciesUpdateResponse, result: GpuPoliciesResult) -> None:
    """`gpu_policies_result_to_proto` written into `msg` itself (each result added in place)."""
    msg.SetInParent()
    add = msg.results.add
    for item in result.results:
        add(
            gpu_id=item.gpu_id,
            ok=item.ok,
            power_cap_watts=item.applied_watts,
            diag_msg=_diag.with_write(
                _diag.describe(item.message, item.requested_watts, item.applied_watts, _failed(item)),
                item.write,
            ),
        )
    msg.resource_group = result.resource_group


def profiles_result_to_proto(result: ProfileResult) -> _Resp.PowerProfileResponse:
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


def allocation_result_to_proto(result: AllocationResult) -> _Resp.AllocationResponse:
    """Each part written in place, not built apart and copied in (one response per request)."""
    msg = _Resp.AllocationResponse(
        success=result.ok,
        error=result.error,
        resource_group=result.resource_group,
        power_cap_watts=result.power_cap_watts,
    )
    # every part "can be nil"; presence is kept even for an empty part
    if result.policy is not None:
        policy_into(msg.policy, result.policy)
    if result.gpu_policies is not None:
        _gpu_policies_result_into(msg.allocated_gpu_policies, result.gpu_policies)
    if result.profiles is not None:
        set_message(msg.workload_profile_result, profiles_result_to_proto(result.profiles))
    for part, component in (
        (msg.allocated_node_policy, result.node),
        (msg.allocated_cpu_policy, result.cpu),
        (msg.allocated_memory_policy, result.memory),
    ):
        if component is not None:
            _component_into(part, component)
    return msg


def ping_result_to_proto(result: PingResult) -> _Resp.PingResponse:
    return _Resp.PingResponse(success=result.ok, error=result.error)


def gpu_metrics_result_to_proto(result: GpuMetricsResult) -> _Resp.GPUMetricsResponse:
    return _Resp.GPUMetricsResponse(
        success=result.ok,
        error=result.error,
        metrics=[_Resp.GPUMetricsResponse.GPUMetrics(gpu_id=m.gpu_id, usage=m.watts) for m in result.metrics],
    )


def std_metrics_result_to_proto(result: StdMetricsResult) -> _Resp.StdMetricsResponse:
    msg = _Resp.StdMetricsResponse(success=result.ok, error=result.error)
    if result.metrics is not None:
        msg.metrics.CopyFrom(node_metrics_to_proto(result.metrics))
    return msg


def entity_result_to_proto(result: EntityModificationResult) -> _Entity:
    return _Entity(response=_VERDICT_TO_PROTO[result.verdict], diag_msg=result.message)


# ---- proto -> domain -----------------------------------------------------------------------


def component_from_proto(msg: _Resp.PolicyComponentResult) -> ComponentResult:
    rest, write = _diag.split_write(msg.diag_msg)
    message, requested = _diag.parse(rest, msg.power_cap_watts, None if msg.ok else write)
    return ComponentResult(
        ok=msg.ok, applied_watts=msg.power_cap_watts, requested_watts=requested, message=message, write=write
    )


def gpu_policies_result_from_proto(
    msg: _Resp.GPUPoliciesUpdateResponse, field: str = ""
) -> GpuPoliciesResult:
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


def profiles_result_from_proto(msg: _Resp.PowerProfileResponse, field: str = "") -> ProfileResult:
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


def allocation_result_from_proto(msg: _Resp.AllocationResponse, field: str) -> AllocationResult:
    def component(name: str) -> ComponentResult | None:
        return component_from_proto(getattr(msg, name)) if msg.HasField(name) else None

    return AllocationResult(
        ok=msg.success,
        error=msg.error,
        resource_group=msg.resource_group,
        policy=policy_from_proto(msg.policy, f"{field}.policy") if msg.HasField("policy") else None,
        power_cap_watts=msg.power_cap_watts,
        gpu_policies=(
            gpu_policies_result_from_proto(msg.allocated_gpu_policies)
            if msg.HasField("allocated_gpu_policies")
            else None
        ),
        profiles=(
            profiles_result_from_proto(msg.workload_profile_result)
            if msg.HasField("workload_profile_result")
            else None
        ),
        node=component("allocated_node_policy"),
        cpu=component("allocated_cpu_policy"),
        memory=component("allocated_memory_policy"),
    )


def ping_result_from_proto(msg: _Resp.PingResponse, field: str = "") -> PingResult:
    return PingResult(ok=msg.success, error=msg.error)


def gpu_metrics_result_from_proto(msg: _Resp.GPUMetricsResponse, field: str = "") -> GpuMetricsResult:
    return GpuMetricsResult(
        ok=msg.success,
        error=msg.error,
        metrics=tuple(GpuUsage(gpu_id=m.gpu_id, watts=m.usage) for m in msg.metrics),
    )


def raw_metrics_result_from_proto(msg: _Resp.RawMetricsResponse, field: str) -> RawMetricsResult:
    documents = raw_documents(msg, f"{field}.raw_metrics")
    return RawMetricsResult(ok=msg.success, error=msg.error, documents=documents)


def std_metrics_result_from_proto(msg: _Resp.StdMetricsResponse, field: str) -> StdMetricsResult:
    metrics = node_metrics_from_proto(msg.metrics, f"{field}.metrics") if msg.HasField("metrics") else None
    return StdMetricsResult(ok=msg.success, error=msg.error, metrics=metrics)


def entity_result_from_proto(msg: _Entity, field: str) -> EntityModificationResult:
    verdict = _VERDICT_FROM_PROTO.get(msg.response)
    if verdict is None:
        raise ValueError(f"{field}.response: no verdict (got {msg.response})")
    return EntityModificationResult(verdict=verdict, message=msg.diag_msg)
