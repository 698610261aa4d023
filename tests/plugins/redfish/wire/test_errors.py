"""`raise_for_response`: one mapping from HTTP status and Redfish error bodies to typed errors."""

from __future__ import annotations

import json
from email.utils import formatdate
from typing import Any

import pytest

from bmcsim import _errors as sim
from bmcsim import _messages as sim_messages
from plugins.base import (
    DeviceRejectedError,
    DeviceUnreachableError,
    TransientError,
    UnsupportedError,
)
from plugins.redfish._capping.outcome import may_have_landed
from plugins.redfish._wire.errors import (
    AccessError,
    BadRequestError,
    BmcBusyError,
    ConnectionFailedError,
    GatewayError,
    MethodNotAllowedError,
    PreconditionFailedError,
    ResourceNotFoundError,
    ServerSideError,
    ServiceUnavailableError,
    WriteMaybeAppliedError,
    extended_info_messages,
    nvidia_code,
    parse_retry_after,
    raise_for_response,
)
from plugins.redfish._wire.retry import retryable


class FakeReply:
    def __init__(self, status: int, body: Any = None, headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.text = body if isinstance(body, str) else json.dumps(body) if body is not None else ""
        self._headers = {k.lower(): v for k, v in (headers or {}).items()}

    def getheader(self, name: str) -> str | None:
        return self._headers.get(name.lower())


def error_for(status: int, body: Any = None, headers: dict[str, str] | None = None) -> Exception:
    with pytest.raises(Exception) as info:
        raise_for_response("https://bmc:443", "PATCH", "/redfish/v1/X", FakeReply(status, body, headers))
    return info.value


@pytest.mark.parametrize(
    ("status", "cls", "base"),
    [
        (400, BadRequestError, DeviceRejectedError),
        (401, AccessError, DeviceRejectedError),
        (403, AccessError, DeviceRejectedError),
        (404, ResourceNotFoundError, DeviceRejectedError),
        (405, MethodNotAllowedError, UnsupportedError),
        (412, PreconditionFailedError, DeviceRejectedError),
        (429, ServiceUnavailableError, TransientError),
        (500, ServerSideError, DeviceRejectedError),
        (502, GatewayError, TransientError),
        (503, GatewayError, TransientError),
        (504, GatewayError, TransientError),
    ],
)
def test_status_maps_to_one_typed_error(status: int, cls: type, base: type) -> None:
    error = error_for(status)
    assert type(error) is cls and isinstance(error, base)
    assert str(error).startswith(f"https://bmc:443: PATCH /redfish/v1/X failed: HTTP {status}")


def test_success_does_not_raise() -> None:
    for status in (200, 201, 202, 204):
        raise_for_response("https://bmc", "GET", "/", FakeReply(status))


def test_extended_info_becomes_the_message() -> None:
    body = sim_messages.error_body(
        [
            sim_messages.property_value_out_of_range(1, "PowerLimitWatts/SetPoint", 200, 1200),
            sim_messages.property_unknown("Foo"),
        ]
    )
    error = error_for(400, body)
    assert isinstance(error, BadRequestError)
    text = str(error)
    assert "HTTP 400 Bad Request" in text
    assert "Base.PropertyValueOutOfRange: The value '1' for the property PowerLimitWatts/SetPoint" in text
    assert "(AllowableMin 200, AllowableMax 1200)" in text
    assert "[#/PowerLimitWatts/SetPoint]" in text and "Base.PropertyUnknown" in text
    assert "A general error has occurred" not in text
    assert error.has_message("PropertyValueOutOfRange") and not error.has_message("Success")
    assert error.message_ids[0] == "Base.1.18.1.GeneralError"


def test_nvidia_codes_are_recognised_anywhere_in_the_body() -> None:
    busy = error_for(500, sim.nvidia_busy().body)
    assert isinstance(busy, BmcBusyError) and busy.retryable and busy.nvidia_code == "0x50A"
    assert "retry after about 60 s" in str(busy)
    maybe = error_for(500, sim.nvidia_timeout().body)
    assert isinstance(maybe, WriteMaybeAppliedError) and "may or may not have been applied" in str(maybe)
    assert nvidia_code({"error": {"message": "rc: 0x600 timeout"}}) == "0x600"
    assert nvidia_code(None, "SMBPBI busy 0x50a") == "0x50A"
    assert nvidia_code({"error": {"message": "0x6001"}}) is None


def test_a_timeout_inside_the_bmc_on_a_write_may_have_landed() -> None:
    # NVIDIA bmcweb's 500 OperationTimeout when its wait for the D-Bus set runs out (the set goes on)
    maybe = error_for(500, sim.operation_timeout().body)
    assert isinstance(maybe, WriteMaybeAppliedError) and may_have_landed(maybe) and maybe.nvidia_code is None
    assert "the write may or may not have been applied" in str(maybe)
    assert not retryable(maybe, "PATCH")  # read before writing again, never repeated blindly
    # on a read it is only a failed read; a plain 500 to a write is the BMC refusing it
    with pytest.raises(ServerSideError) as read:
        raise_for_response("https://bmc", "GET", "/", FakeReply(500, sim.operation_timeout().body))
    assert "may or may not" not in str(read.value)
    refused = error_for(500, sim.internal_error().body)
    assert isinstance(refused, ServerSideError) and not may_have_landed(refused)


def test_retry_after_seconds_and_http_date() -> None:
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert parse_retry_after(formatdate(1_000_030.0, usegmt=True), now=1_000_000.0) == pytest.approx(30.0)
    error = error_for(503, sim.service_unavailable(12).body, {"Retry-After": "12"})
    assert isinstance(error, ServiceUnavailableError) and error.retry_after == 12.0
    assert "(Retry-After: 12 s)" in str(error)


def test_non_json_error_body_is_quoted_briefly() -> None:
    error = error_for(502, "<html><body>Bad   Gateway from proxy</body></html>")
    assert "<html><body>Bad Gateway from proxy</body></html>" in str(error)


def test_partial_success_messages_and_transport_errors() -> None:
    body = {
        "@Message.ExtendedInfo": [
            sim_messages.message("Base.1.0.Success", "ok"),
            sim_messages.property_not_writable("Id"),
        ]
    }
    assert extended_info_messages(body) == [
        "Base.PropertyNotWritable: The property Id is a read-only property "
        "and cannot be assigned a value. [#/Id]"
    ]
    refused = ConnectionFailedError("cannot connect", sent=False)
    assert isinstance(refused, DeviceUnreachableError) and refused.retryable and not refused.sent


@pytest.mark.parametrize("status", [502, 503, 504])
def test_a_gateways_answer_to_a_write_is_never_retried_blindly(status: int) -> None:
    """The BMC behind the gateway may have applied it: the caller reads first (`_caps._write`)."""
    error = error_for(status)
    assert isinstance(error, GatewayError) and error.sent and may_have_landed(error)
    assert not retryable(error, "PATCH") and not retryable(error, "POST")
    assert retryable(error, "GET")
    error.sent = False  # the answer was to the write's login: the write itself never went
    assert retryable(error, "PATCH") and not may_have_landed(error)
    assert retryable(error_for(429), "PATCH")  # Too Many Requests: refused before any work
