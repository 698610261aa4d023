"""`DeviceControllerRequest` / `DeviceControllerResponse` <-> (kind, domain request or result).

The envelope (device, ids, state, ping time and error) is the same for every kind; the member is
translated by the kind's row in `controller.translate.kinds`. The `*_member_*` functions translate a
member alone, for a kind whatever message carries it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from google.protobuf.message import Message

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.translate._json import Untranslatable, encode_json_object
from controller.translate._time import datetime_to_timestamp
from controller.translate._wire import set_message
from controller.translate.kinds import translation_of
from plugins.base import DeviceRequest, DeviceResult, InvalidRequestError, Outcome, RequestKind
from plugins.base.kinds import KINDS

#: largest response the controller sends: a receiver's default gRPC limit is 4 MiB per message;
#: 3 MiB keeps a margin for what the receiver's own framing and metadata add
MAX_RESPONSE_BYTES = 3 * 1024 * 1024


# ---- kinds ------------------------------------------------------------------------------------


def request_kind(msg: pb.DeviceControllerRequest) -> RequestKind:
    """The kind of `msg`, from its `request` oneof.

    Raises:
        InvalidRequestError: when no request kind is set.
    """
    member = msg.WhichOneof("request")
    if member is None:
        expected = ", ".join(KINDS.names())
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


# ---- members ----------------------------------------------------------------------------------


def request_member_from_proto(kind: str, member: Message) -> Any:
    """The domain request of a kind's request member.

    Raises:
        InvalidRequestError: naming the field, for a member with no domain equivalent.
    """
    try:
        return translation_of(kind).request_from_proto(member, str(kind))
    except Untranslatable as exc:
        raise InvalidRequestError(str(exc)) from None


def request_member_to_proto(kind: str, request: DeviceRequest | Any) -> Message:
    """The request member of a domain request. Raises TypeError when it is not the kind's type."""
    row = translation_of(kind)
    expected = row.kind.request
    if not isinstance(request, expected):
        raise TypeError(f"{row.name} carries {expected.__name__}, got {type(request).__name__}")
    return row.request_to_proto(request)


def result_member_to_proto(kind: str, result: DeviceResult | Any) -> Message:
    """The response member of a domain result. Raises TypeError when it is not the kind's type."""
    row = translation_of(kind)
    expected = row.kind.result
    if not isinstance(result, expected):
        raise TypeError(f"{row.name} answers with {expected.__name__}, got {type(result).__name__}")
    return row.result_to_proto(result)


def result_member_from_proto(kind: str, member: Message) -> Any:
    """The domain result of a kind's response member (ValueError naming a field it cannot take)."""
    return translation_of(kind).result_from_proto(member, str(kind))


def failed_member(kind: str, error: str, request: Any = None) -> Message:
    """The response member saying the request failed with `error` ("<kind> failed" when empty)."""
    return translation_of(kind).failure(error if error.strip() else f"{kind} failed", request)


def member_success(kind: str, member: Message) -> tuple[bool, str]:
    """Whether a kind's response member reports success, and its error text ("" on success)."""
    ok, error = translation_of(kind).success(member)
    return ok, "" if ok else (error or f"{kind} failed")


# ---- requests ---------------------------------------------------------------------------------


def request_from_proto(msg: pb.DeviceControllerRequest) -> tuple[RequestKind, DeviceRequest]:
    """The request kind and its domain request.

    Absent optional parts become None; a GPU policy without `power_limit` becomes
    `GpuPolicy(limit=None)`; the GPU policies of a reset (UNSET_POLICY) are dropped, as the
    contract says they are ignored; entity device models are parsed (empty bytes -> {}).
    The envelope (device, request_id, timeouts, model and state JSON) is not part of the result.

    Raises:
        InvalidRequestError: naming the field, for a message with no domain equivalent (no kind,
            an UNSPECIFIED enum, a limit with neither watts nor percentage, a negative or NaN
            limit, a device model that is not a JSON object). `validate_request` catches all of
            these first.
    """
    kind = request_kind(msg)
    return kind, request_member_from_proto(kind, getattr(msg, kind))


def request_to_proto(
    kind: str,
    request: DeviceRequest,
    *,
    device: str,
    request_id: str,
    timeout_seconds: int = 0,
    trace_id: str = "",
    device_model_json: bytes = b"",
    device_state_json: bytes = b"",
) -> pb.DeviceControllerRequest:
    """A `DeviceControllerRequest` carrying `request` as its `kind` member.

    The inverse of `request_from_proto`: `request_from_proto(request_to_proto(k, r, ...))`
    gives back `(k, r)`, with two normalisations that carry no meaning: the policies of a GPU
    policy reset are not sent (they would be ignored), and entity device models are sent as
    compact JSON.

    Raises:
        TypeError: when `request` is not the domain type of `kind`.
        ValueError: when a value cannot go on the wire (e.g. a device model that is not JSON).
    """
    member = request_member_to_proto(kind, request)
    msg = pb.DeviceControllerRequest(
        device=device,
        request_id=request_id,
        timeout_seconds=timeout_seconds,
        trace_id=trace_id,
        device_model_json=device_model_json,
        device_state_json=device_state_json,
    )
    set_message(getattr(msg, kind), member)
    return msg


# ---- responses --------------------------------------------------------------------------------


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
    kind: str,
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
    member = result_member_to_proto(kind, result)
    msg = envelope(
        device=device,
        request_id=request_id,
        trace_id=trace_id,
        state_json=state_json,
        ping_time=ping_time,
        ping_error=ping_error,
    )
    set_message(getattr(msg, kind), member)
    return msg


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
    return kind, result_member_from_proto(kind, getattr(msg, kind))


# ---- failures ---------------------------------------------------------------------------------


def error_response(
    kind: str,
    error: str,
    *,
    device: str,
    request_id: str,
    trace_id: str = "",
    ping_error: str = "",
    ping_time: datetime | None = None,
    request: DeviceRequest | None = None,
) -> pb.DeviceControllerResponse:
    """A response saying the request failed, with `error` where the kind's member keeps errors
    (each member's way: `controller.translate._failures`).

    `device_state_json` is left unset (keep the stored state). An empty `error` is replaced by
    "<kind> failed" so a failure never arrives without a reason.
    """
    msg = envelope(
        device=device,
        request_id=request_id,
        trace_id=trace_id,
        state_json=None,
        ping_time=ping_time,
        ping_error=ping_error,
    )
    getattr(msg, kind).CopyFrom(failed_member(kind, error, request))
    return msg


def bounded_response(
    kind: str,
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


def bounded_serialized(
    kind: str,
    msg: pb.DeviceControllerResponse,
    *,
    request: DeviceRequest | None = None,
    limit: int = MAX_RESPONSE_BYTES,
) -> tuple[pb.DeviceControllerResponse, bytes]:
    """`bounded_response` with its serialized bytes: a response within `limit` is serialized once,
    not sized and then serialized again (the size is the serialization's length)."""
    data = msg.SerializeToString()
    if len(data) <= limit:
        return msg, data
    out = bounded_response(kind, msg, request=request, limit=limit)
    return out, out.SerializeToString()


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
    return member_success(member_name, getattr(msg, member_name))
