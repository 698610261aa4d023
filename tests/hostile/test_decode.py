"""Bytes that are not a protobuf message get INVALID_ARGUMENT with one line, never UNKNOWN and a
traceback, on every method (defect 11). Sent over a real channel with no serializer."""

from __future__ import annotations

import random

import grpc
import pytest

from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from tests.hostile.conftest import LogCapture

SEND = "/devicecontroller.v1.DeviceController/SendDeviceRequest"
GET = "/devicecontroller.v1.DeviceControllerAdmin/GetRequest"
WAIT = "/devicecontroller.v1.DeviceControllerAdmin/WaitRequest"

#: each fails to decode for a different reason
CORRUPT = [
    b"\xff",  # field 31, wire type 7 (no such wire type)
    b"\x0a\x05ab",  # a length-delimited field that claims more bytes than follow
    b"\x0a\xff\xff\xff\xff\x0f",  # a length beyond the message
    b"\x08\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80",  # a varint longer than 10 bytes
    b"\x12\x02\xc3\x28",  # request_id (a proto3 string) that is not UTF-8
]


async def _code(call: grpc.aio.UnaryUnaryMultiCallable, data: bytes) -> tuple[grpc.StatusCode, str]:
    try:
        await call(data)
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


@pytest.mark.parametrize("data", CORRUPT, ids=["wiretype", "short", "length", "varint", "utf8"])
async def test_corrupt_send_is_invalid_argument_and_not_journaled(
    start_controller, log_capture: LogCapture, data: bytes
) -> None:
    h = await start_controller()
    code, details = await _code(h.channel.unary_unary(SEND), data)
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    assert "not a valid protobuf message" in details and "\n" not in details
    assert not (await h.admin.ListRequests(apb.ListRequestsRequest())).requests
    log_capture.assert_clean()
    assert any("rejected:" in line and "SendDeviceRequest" in line for line in log_capture.lines)


async def test_random_bytes_never_get_unknown(start_controller, sink, log_capture: LogCapture) -> None:
    h = await start_controller()
    call = h.channel.unary_unary(SEND)
    rng = random.Random(20261123)
    codes = [(await _code(call, rng.randbytes(rng.randrange(1, 300))))[0] for _ in range(300)]
    assert set(codes) == {grpc.StatusCode.INVALID_ARGUMENT}
    log_capture.assert_clean()
    # the server still serves well-formed requests afterwards
    ok = pb.DeviceControllerRequest(
        device="node000", request_id="after", ping=pb.DeviceControllerRequest.PingRequest()
    )
    await h.stub.SendDeviceRequest(ok)
    await sink.wait_for({"after"})


async def test_admin_methods_refuse_corrupt_bytes(start_controller, log_capture: LogCapture) -> None:
    h = await start_controller()
    assert (await _code(h.channel.unary_unary(GET), b"\xff"))[0] == grpc.StatusCode.INVALID_ARGUMENT
    stream = h.channel.unary_stream(WAIT)(b"\x0a\x05ab")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in stream:
            pass
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    log_capture.assert_clean()


#: admin requests whose strings reach SQL as they are: a NUL anywhere is refused before they do
NUL_REQUESTS = [
    ("ListRequests", apb.ListRequestsRequest(device="node\x00000")),
    ("GetDevice", apb.GetDeviceRequest(id="node000\x00")),
    ("ListVerifications", apb.ListVerificationsRequest(device="\x00")),
    ("ListBmcChecks", apb.ListBmcChecksRequest(device="node\x00")),
    ("GetRequest", apb.GetRequestRequest(request_id="r\x00")),
]


@pytest.mark.parametrize(("method", "message"), NUL_REQUESTS, ids=[m for m, _ in NUL_REQUESTS])
async def test_a_nul_in_any_admin_request_string_is_invalid_argument_on_every_database(
    start_controller, db_url: str, log_capture: LogCapture, method: str, message: object
) -> None:
    h = await start_controller()
    call = getattr(h.admin, method)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call(message)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
    assert "a NUL character is never part of a value" in (refused.value.details() or "")
    log_capture.assert_clean()
    # the same request without the NUL is served (the refusal is the NUL's, not the method's)
    await h.admin.ListRequests(apb.ListRequestsRequest(device="node000"))
