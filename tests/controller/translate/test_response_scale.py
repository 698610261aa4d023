"""Response building stays linear in the number of GPUs, and responses stay below the size bound."""

from __future__ import annotations

from controller import translate
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.translate import MAX_RESPONSE_BYTES, bounded_response, bounded_serialized, error_response
from plugins.base import GpuPoliciesChange, GpuPolicy, PolicyAction, PowerLimit, RequestKind

KIND = RequestKind.GPU_POLICIES_UPDATE


class CountingId(int):
    """A GPU id that counts equality comparisons: a quadratic scan shows up as n² of them."""

    comparisons = 0

    def __eq__(self, other: object) -> bool:
        CountingId.comparisons += 1
        return int(self) == other

    __hash__ = int.__hash__


def change(ids: list[int]) -> GpuPoliciesChange:
    return GpuPoliciesChange(
        "rg", PolicyAction.SET, policies=tuple(GpuPolicy(i, PowerLimit(watts=500.0)) for i in ids)
    )


def test_failed_gpu_results_compare_ids_a_linear_number_of_times() -> None:
    n = 2000
    CountingId.comparisons = 0
    ids = [CountingId(i) for i in range(n)]
    msg = error_response(KIND, "unreachable", device="d", request_id="r", request=change(ids))  # type: ignore[arg-type]
    assert len(msg.gpu_policies_update.results) == n
    assert CountingId.comparisons <= n, f"{CountingId.comparisons} comparisons for {n} ids"


def test_40000_gpu_ids_build_a_failed_response_naming_each_gpu_once() -> None:
    ids = [*range(40_000), *range(0, 40_000, 2)]  # duplicates are reported once, first-seen order
    msg = error_response(KIND, "unreachable", device="d", request_id="r", request=change(ids))
    results = msg.gpu_policies_update.results
    assert [r.gpu_id for r in results] == list(range(40_000))
    assert all(not r.ok and r.diag_msg == "unreachable" for r in results)
    assert translate.success_of(msg) == (False, "unreachable")


def test_a_response_over_the_size_bound_becomes_a_small_error_response() -> None:
    big = pb.DeviceControllerResponse(device="d", request_id="r", trace_id="t")
    big.gpu_metrics.success = True
    for i in range(400_000):
        big.gpu_metrics.metrics.add(gpu_id=i, usage=100.0)
    assert big.ByteSize() > MAX_RESPONSE_BYTES
    small = bounded_response(RequestKind.GPU_METRICS, big)
    assert small.ByteSize() < 1024
    assert small.request_id == "r" and small.trace_id == "t" and not small.gpu_metrics.success
    assert "exceeds the" in small.gpu_metrics.error
    # one failed result per GPU of a huge request would itself be too big: GPU 0 carries the error
    failed = bounded_response(
        KIND, big_policies_response(), request=change(list(range(300_000))), limit=100_000
    )
    assert failed.ByteSize() <= 100_000 and len(failed.gpu_policies_update.results) == 1
    ok = pb.DeviceControllerResponse(device="d", request_id="r")
    ok.ping.success = True
    assert bounded_response(RequestKind.PING, ok) is ok


def test_the_bounded_response_comes_with_its_bytes() -> None:
    ok = pb.DeviceControllerResponse(device="d", request_id="r")
    ok.ping.success = True
    same, data = bounded_serialized(RequestKind.PING, ok)
    assert same is ok and data == ok.SerializeToString()
    big = big_policies_response()
    small, data = bounded_serialized(KIND, big, request=change(list(range(20_000))), limit=big.ByteSize() - 1)
    assert small == bounded_response(KIND, big, request=change(list(range(20_000))), limit=big.ByteSize() - 1)
    assert data == small.SerializeToString() and not small.gpu_policies_update.results[0].ok
    at_the_bound, data = bounded_serialized(KIND, big, limit=big.ByteSize())
    assert at_the_bound is big and len(data) == big.ByteSize()


def big_policies_response() -> pb.DeviceControllerResponse:
    msg = pb.DeviceControllerResponse(device="d", request_id="r")
    for i in range(20_000):
        msg.gpu_policies_update.results.add(gpu_id=i, ok=True, power_cap_watts=500.0)
    return msg
