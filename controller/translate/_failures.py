"""The member of a failed response for each response shape, and success and error text read back
out of each; the rows of `controller.translate.kinds` pick those of each kind.

The response has no generic status, so each member reports failure its own way:

- allocation and topology kinds: `AllocationResponse{success=false, error}`, plus
  `resource_group` when the request is an Allocation; no part is set (nothing was applied).
- `gpu_policies_update`: `GPUPoliciesUpdateResponse` has no error field, so it gets one
  `GPUPolicyResult{gpu_id, ok=false, power_cap_watts=0, diag_msg=error}` per distinct GPU
  id of the request (when it is a GpuPoliciesChange setting policies), else a single such
  result for GPU 0; `resource_group` comes from the request when known.
- workload profile kinds, `ping`, the three metrics members and `bmc_health`:
  `{success=false, error}`, no data.
- `modify_entity_model`: `EntityModificationResponse{response=REJECTED, diag_msg=error}`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf.message import Message

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from plugins.base import Allocation, DeviceRequest, GpuPoliciesChange, PolicyAction

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


def _resource_group(request: DeviceRequest | None) -> str:
    if isinstance(request, Allocation | GpuPoliciesChange):
        return request.resource_group
    return ""


def allocation_failure(error: str, request: DeviceRequest | None) -> _Resp.AllocationResponse:
    return _Resp.AllocationResponse(success=False, error=error, resource_group=_resource_group(request))


def gpu_policies_failure(error: str, request: DeviceRequest | None) -> _Resp.GPUPoliciesUpdateResponse:
    return _Resp.GPUPoliciesUpdateResponse(
        resource_group=_resource_group(request), results=_failed_gpu_results(error, request)
    )


def entity_failure(error: str, request: DeviceRequest | None) -> _Entity:
    return _Entity(response=_Entity.REJECTED, diag_msg=error)


def error_failure(message: Callable[..., Message]) -> Callable[[str, Any], Message]:
    """The failure of a member shaped `{success, error}` (profiles, ping, metrics, readiness)."""

    def failure(error: str, request: Any) -> Message:
        return message(success=False, error=error)

    return failure


def gpu_policies_success(msg: _Resp.GPUPoliciesUpdateResponse) -> tuple[bool, str]:
    """Success means every GPU result is ok; the error text is the failed results' diag_msg (once if
    they all agree, else "gpu N: ..." joined by "; ")."""
    failed = [item for item in msg.results if not item.ok]
    if not failed:
        return True, ""
    texts = {item.diag_msg for item in failed}
    if len(texts) == 1:
        return False, texts.pop() or "GPU policy update failed"
    return False, "; ".join(f"gpu {item.gpu_id}: {item.diag_msg or 'failed'}" for item in failed)


def entity_success(msg: _Entity) -> tuple[bool, str]:
    """Both ACCEPTED verdicts are success; REJECTED and an unset verdict are failures."""
    if msg.response in (_Entity.ACCEPTED, _Entity.ACCEPTED_CALL_PHASE_1):
        return True, ""
    if msg.response == _Entity.REJECTED:
        return False, msg.diag_msg or "entity modification rejected"
    return False, "modify_entity_model.response: no verdict"


def error_success(msg: Any) -> tuple[bool, str]:
    """A member shaped `{success, error}`: its flag and its error ("" when it names none)."""
    return bool(msg.success), "" if msg.success else str(msg.error)
