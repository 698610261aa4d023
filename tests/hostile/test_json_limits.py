"""JSON fields have a size and a nesting limit at the RPC edge, rejected requests are not stored,
and log lines never carry a whole hostile field (defect 11, "What to build" 5)."""

from __future__ import annotations

import json

import grpc
import pytest

from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.api.json_fields import json_depth_exceeds
from controller.observability.logs import clip
from tests.hostile.conftest import LogCapture

R = pb.DeviceControllerRequest


def _ping(**fields: object) -> R:
    base: dict[str, object] = {"device": "node000", "request_id": "j1", "ping": R.PingRequest()}
    return R(**{**base, **fields})


async def _refused(h, msg: R) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await h.stub.SendDeviceRequest(msg)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return info.value.details() or ""


@pytest.mark.parametrize(
    ("field", "data", "words"),
    [
        ("device_model_json", json.dumps({"x": "a" * 400_000}).encode(), "exceeds the limit of 262144 bytes"),
        ("device_state_json", b'{"a":' * 33 + b"1" + b"}" * 33, "nested deeper than 32 levels"),
        ("device_state_json", b"[" * 200_000 + b"]" * 200_000, "exceeds the limit"),
        (
            "device_model_json",
            b'{"a":' + b"[" * 50_000 + b"]" * 50_000 + b"}",
            "nested deeper than 32 levels",
        ),
    ],
    ids=["model-400KB", "state-33-deep", "state-huge-deep", "model-50000-deep"],
)
async def test_json_limits_name_the_field_and_store_nothing(
    start_controller, log_capture: LogCapture, field: str, data: bytes, words: str
) -> None:
    h = await start_controller()
    details = await _refused(h, _ping(**{field: data}))
    assert details.startswith(field) and words in details
    assert not (await h.admin.ListRequests(apb.ListRequestsRequest())).requests
    log_capture.assert_clean()


async def test_limits_come_from_the_settings(start_controller) -> None:
    h = await start_controller(max_json_bytes=64, max_json_depth=2)
    assert "exceeds the limit of 64 bytes" in await _refused(
        h, _ping(device_model_json=b'{"a": "' + b"x" * 80 + b'"}')
    )
    assert "nested deeper than 2 levels" in await _refused(h, _ping(device_state_json=b'{"a": {"b": [1]}}'))
    await h.stub.SendDeviceRequest(_ping(device_state_json=b'{"a": {"b": 1}}'))  # depth 2 is fine


async def test_a_400kb_field_makes_a_short_log_line(start_controller, log_capture: LogCapture) -> None:
    h = await start_controller()
    huge = "n" * 400_000
    # invalid in several ways at once, each quoting as little of the input as it can
    await _refused(
        h, _ping(device=huge, request_id=huge, trace_id=huge + "\n", device_model_json=b"[" + b"1," * 200_000)
    )
    rejected = [line for line in log_capture.lines if "rejected:" in line]
    assert len(rejected) == 1, log_capture.lines
    assert len(rejected[0]) < 1200 and "more)" in rejected[0]
    log_capture.assert_clean()


def test_clip_keeps_short_values_and_one_line() -> None:
    assert clip("abc") == "abc"
    assert clip("x" * 250) == "x" * 200 + "…(50 more)"
    assert clip("a\nfake log line") == "a\\nfake log line"


def test_depth_check_ignores_brackets_in_strings_and_is_iterative() -> None:
    assert not json_depth_exceeds('{"a": "[[[[[[[[[[", "b": "\\"[[[["}', 1)
    assert json_depth_exceeds("[" * 1_000_000, 32)  # no recursion, however deep
    assert not json_depth_exceeds("[[]]", 2) and json_depth_exceeds("[[[]]]", 2)


def test_policy_properties_share_the_json_depth_limit() -> None:
    # properties end up in the plugin's stored state: deeper ones would make that state unloadable
    from controller._proto.devicecontroller.v1 import policy_pb2 as pp
    from controller.api.validate import request_problems

    def policy(depth: int) -> pp.PolicyObject:
        nested: dict = {}
        for _ in range(depth - 1):
            nested = {"a": nested}
        out = pp.PolicyObject(name="p")
        out.properties.update(nested)
        return out

    def problems(depth: int) -> list[str]:
        member = R.PolicySetRequest(policy_action=R.SET_POLICY, policy=policy(depth))
        return request_problems(R(device="d", request_id="r", topology_activate=member))

    assert problems(32) == []
    assert [p.endswith("nested deeper than 32 levels") for p in problems(33)] == [True]
