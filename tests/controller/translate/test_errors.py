"""error_response for every kind, and success_of on what it builds."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.translate import error_response, response_from_proto, success_of
from plugins.base import (
    Allocation,
    AllocationResult,
    EntityModificationResult,
    EntityVerdict,
    GpuPoliciesChange,
    GpuPoliciesResult,
    GpuPolicy,
    GpuResult,
    PolicyAction,
    PowerLimit,
    RequestKind,
)

K = RequestKind
Resp = pb.DeviceControllerResponse


def _error(
    kind: RequestKind, error: str = "BMC unreachable", **kwargs: object
) -> pb.DeviceControllerResponse:
    return error_response(kind, error, device="node001", request_id="req-1", trace_id="t-1", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", list(RequestKind), ids=lambda k: k.value)
def test_every_kind_fails_with_its_own_member(kind: RequestKind) -> None:
    msg = _error(kind)
    assert msg.WhichOneof("response") == kind.value
    assert (msg.device, msg.request_id, msg.trace_id) == ("node001", "req-1", "t-1")
    assert msg.device_state_json == b""  # keep the stored state
    assert success_of(msg) == (False, "BMC unreachable")
    # it translates back like any other response
    response_kind, result = response_from_proto(msg)
    assert response_kind is kind
    if isinstance(result, GpuPoliciesResult):
        assert [r.ok for r in result.results] == [False]
    elif isinstance(result, EntityModificationResult):
        assert result == EntityModificationResult(EntityVerdict.REJECTED, "BMC unreachable")
    else:
        assert not result.ok
        assert result.error == "BMC unreachable"


def test_allocation_error_names_the_resource_group() -> None:
    msg = _error(K.RESOURCE_GROUP_ACTIVATE, request=Allocation("rg-7"))
    assert response_from_proto(msg)[1] == AllocationResult(
        ok=False, error="BMC unreachable", resource_group="rg-7"
    )


def test_gpu_policies_error_has_one_result_per_requested_gpu() -> None:
    change = GpuPoliciesChange(
        "rg-1",
        PolicyAction.SET,
        policies=(
            GpuPolicy(2, PowerLimit(watts=500)),
            GpuPolicy(0, None),
            GpuPolicy(5, PowerLimit(percent=10)),
        ),
    )
    msg = _error(K.GPU_POLICIES_UPDATE, "write failed", request=change)
    assert response_from_proto(msg)[1] == GpuPoliciesResult(
        "rg-1",
        (
            GpuResult(2, False, message="write failed"),
            GpuResult(0, False, message="write failed"),
            GpuResult(5, False, message="write failed"),
        ),
    )
    assert success_of(msg) == (False, "write failed")


@pytest.mark.parametrize(
    "request_",
    [None, GpuPoliciesChange("rg", PolicyAction.UNSET), GpuPoliciesChange("rg", PolicyAction.SET)],
    ids=["unknown", "reset", "empty"],
)
def test_gpu_policies_error_without_gpus_still_fails(request_: GpuPoliciesChange | None) -> None:
    msg = _error(K.GPU_POLICIES_UPDATE, "nope", request=request_)
    results = msg.gpu_policies_update.results
    assert [(r.gpu_id, r.ok, r.diag_msg) for r in results] == [(0, False, "nope")]


def test_ping_fields() -> None:
    when = datetime(2026, 5, 1, tzinfo=UTC)
    msg = _error(K.PING, "timed out", ping_error="connect timeout", ping_time=when)
    assert msg.device_ping_error == "connect timeout"
    assert msg.device_ping_time.ToDatetime(tzinfo=UTC) == when
    assert msg.ping == Resp.PingResponse(success=False, error="timed out")


def test_empty_error_text_is_replaced() -> None:
    assert success_of(_error(K.STD_METRICS, "  ")) == (False, "std_metrics failed")


def test_success_of_joins_differing_gpu_failures() -> None:
    msg = Resp(
        gpu_policies_update=Resp.GPUPoliciesUpdateResponse(
            results=[
                Resp.GPUPolicyResult(gpu_id=0, ok=True),
                Resp.GPUPolicyResult(gpu_id=1, ok=False, diag_msg="too low"),
                Resp.GPUPolicyResult(gpu_id=2, ok=False, diag_msg="lost"),
            ]
        )
    )
    assert success_of(msg) == (False, "gpu 1: too low; gpu 2: lost")
    assert success_of(Resp(gpu_policies_update=Resp.GPUPoliciesUpdateResponse())) == (True, "")


def test_success_of_entity_verdicts() -> None:
    entity = Resp.EntityModificationResponse
    assert success_of(Resp(modify_entity_model=entity(response=entity.ACCEPTED_CALL_PHASE_1))) == (True, "")
    assert success_of(Resp(modify_entity_model=entity(response=entity.REJECTED))) == (
        False,
        "entity modification rejected",
    )
    assert success_of(Resp(modify_entity_model=entity()))[0] is False


def test_success_of_failure_without_text() -> None:
    assert success_of(Resp(ping=Resp.PingResponse(success=False))) == (False, "ping failed")
