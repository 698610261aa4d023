"""Failed responses, and reading success and error text out of any response."""

from __future__ import annotations

from datetime import datetime

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.translate._kinds import ALLOCATION_KINDS, POLICY_SET_KINDS
from controller.translate._responses import envelope
from plugins.base import Allocation, DeviceRequest, GpuPoliciesChange, PolicyAction, RequestKind

_Resp = pb.DeviceControllerResponse
_Entity = _Resp.EntityModificationResponse


def _failed_gpu_results(error: str, request: DeviceRequest | None) -> list[_Resp.GPUPolicyResult]:
    gpu_ids: list[int] = []
    if isinstance(request, GpuPoliciesChange) and request.action is PolicyAction.SET:
        # distinct ids in first-seen order; a dict keeps this linear (a list's `in` made 40,000
        # ids take seconds on the event loop)
        gpu_ids = list(dict.fromkeys(policy.gpu_id for policy in request.policies))
    # with no GPU to name (no request, a reset, an empty list) one result for GPU 0 still
    # carries the error: an empty results list would read as "nothing failed"
    return [_Resp.GPUPolicyResult(gpu_id=gpu_id, ok=False, diag_msg=error) for gpu_id in gpu_ids or [0]]


#: largest response the controller sends: a receiver's default gRPC limit is 4 MiB per message;
#: 3 MiB keeps a margin for what the receiver's own framing and metadata add
MAX_RESPONSE_BYTES = 3 * 1024 * 1024


def bounded_response(
    kind: RequestKind,
    msg: pb.DeviceControllerResponse,
    *,
    request: DeviceRequest | None = None,
    limit: int = MAX_RESPONSE_BYTES,
) -> pb.DeviceControllerResponse:
    """`msg` if it serializes to at most `limit` bytes, else a failed response saying so.

    A response no receiver would take would block the device's later responses; a small
    error response tells the topology service what happened instead. The stored state is
    still updated by the completion (the device did the work); only the response shrinks.
    """
    size = msg.ByteSize()
    if size <= limit:
        return msg
    error = f"response of {size} bytes exceeds the {limit}-byte limit and was not sent"
    out = error_response(
        kind, error, device=msg.device, request_id=msg.request_id, trace_id=msg.trace_id, request=request
    )
    if out.ByteSize() > limit:  # one failed result per GPU of a huge (pre-bounds) request
        out = error_response(kind, error, device=msg.device, request_id=msg.request_id, trace_id=msg.trace_id)
    return out


def _resource_group(request: DeviceRequest | None) -> str:
    if isinstance(request, Allocation | GpuPoliciesChange):
        return request.resource_group
    return ""


def error_response(
    kind: RequestKind,
    error: str,
    *,
    device: str,
    request_id: str,
    trace_id: str = "",
    ping_error: str = "",
    ping_time: datetime | None = None,
    request: DeviceRequest | None = None,
) -> pb.DeviceControllerResponse:
    """A response saying the request failed, with `error` where the kind's member keeps errors.

    The response has no generic status, so each member reports failure its own way:

    - allocation and topology kinds: `AllocationResponse{success=false, error}`, plus
      `resource_group` when `request` is an Allocation; no part is set (nothing was applied).
    - `gpu_policies_update`: `GPUPoliciesUpdateResponse` has no error field, so it gets one
      `GPUPolicyResult{gpu_id, ok=false, power_cap_watts=0, diag_msg=error}` per distinct GPU
      id of `request` (when it is a GpuPoliciesChange setting policies), else a single such
      result for GPU 0; `resource_group` comes from `request` when known.
    - workload profile kinds: `PowerProfileResponse{success=false, error}`.
    - `ping`, `gpu_metrics`, `raw_metrics`, `std_metrics`: `{success=false, error}`, no data.
    - `modify_entity_model`: `EntityModificationResponse{response=REJECTED, diag_msg=error}`.

    `device_state_json` is left unset (keep the stored state). An empty `error` is replaced by
    "<kind> failed" so a failure never arrives without a reason.
    """
    if not error.strip():
        error = f"{kind.value} failed"
    msg = envelope(
        device=device,
        request_id=request_id,
        trace_id=trace_id,
        state_json=None,
        ping_time=ping_time,
        ping_error=ping_error,
    )
    member = getattr(msg, kind.value)
    if kind in ALLOCATION_KINDS or kind in POLICY_SET_KINDS:
        member.CopyFrom(
            _Resp.AllocationResponse(success=False, error=error, resource_group=_resource_group(request))
        )
    elif kind is RequestKind.GPU_POLICIES_UPDATE:
        member.CopyFrom(
            _Resp.GPUPoliciesUpdateResponse(
                resource_group=_resource_group(request), results=_failed_gpu_results(error, request)
            )
        )
    elif kind is RequestKind.MODIFY_ENTITY_MODEL:
        member.CopyFrom(_Entity(response=_Entity.REJECTED, diag_msg=error))
    else:  # profiles, ping and the three metrics members all have success + error
        member.success = False
        member.error = error
    return msg


def success_of(msg: pb.DeviceControllerResponse) -> tuple[bool, str]:
    """Whether the response reports success, and its error text ("" on success).

    For `gpu_policies_update` success means every GPU result is ok; the error text is the
    failed results' diag_msg (once if they all agree, else "gpu N: ..." joined by "; ").
    For `modify_entity_model` both ACCEPTED verdicts are success; REJECTED and an unset
    verdict are failures.
    """
    member_name = msg.WhichOneof("response")
    if member_name is None:
        return False, "response: no response kind set"
    kind = RequestKind(member_name)
    if kind is RequestKind.GPU_POLICIES_UPDATE:
        failed = [item for item in msg.gpu_policies_update.results if not item.ok]
        if not failed:
            return True, ""
        texts = {item.diag_msg for item in failed}
        if len(texts) == 1:
            return False, texts.pop() or "GPU policy update failed"
        return False, "; ".join(f"gpu {item.gpu_id}: {item.diag_msg or 'failed'}" for item in failed)
    if kind is RequestKind.MODIFY_ENTITY_MODEL:
        verdict = msg.modify_entity_model.response
        if verdict in (_Entity.ACCEPTED, _Entity.ACCEPTED_CALL_PHASE_1):
            return True, ""
        if verdict == _Entity.REJECTED:
            return False, msg.modify_entity_model.diag_msg or "entity modification rejected"
        return False, "modify_entity_model.response: no verdict"
    member = getattr(msg, member_name)
    if member.success:
        return True, ""
    return False, member.error or f"{member_name} failed"
