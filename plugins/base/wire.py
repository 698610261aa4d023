"""The power-operation extension's messages ⇄ `plugins.base` types, shared by server and client.

Every request kind travels through the one `Operate` RPC: `OperationRequest.kind` names its row in
`plugins.base.kinds.KINDS`, whose request and result types decode the JSON on each side.
"""

from __future__ import annotations

import json
import time
from datetime import UTC
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration

from plugins._proto.devicectl.plugin.v1 import power_pb2 as ppb
from plugins.base import _errors as e
from plugins.base import _plugin as p
from plugins.base.codec import decode, encode, error_from
from plugins.base.kinds import Kind, kind_of
from plugins.base.receipts import DeviceWrite

SERVICE = "devicectl.plugin.v1.PowerOperations"
#: how long the plugin's `Relinquish` waits for the calls it cut to end before it answers
RELINQUISH_WAIT = 5.0
#: how long the host asks a plugin's `Settle` to wait for a device's writing calls to end (a write
#: cycle's restore runs under 60 s of its own), and the most a plugin waits whatever it is asked
SETTLE_WAIT = 90.0
SETTLE_WAIT_MAX = 300.0


#: gRPC status for each error class when a stream has to end with one
_STATUS = {
    e.InvalidRequestError.code: grpc.StatusCode.INVALID_ARGUMENT,
    e.UnknownDeviceError.code: grpc.StatusCode.NOT_FOUND,
    e.UnsupportedError.code: grpc.StatusCode.UNIMPLEMENTED,
    e.HostEnvironmentError.code: grpc.StatusCode.FAILED_PRECONDITION,
    e.DeviceRejectedError.code: grpc.StatusCode.FAILED_PRECONDITION,
    e.DeviceTimeoutError.code: grpc.StatusCode.DEADLINE_EXCEEDED,
}
ERROR_CODE_KEY = "devicectl-error-code"
ERROR_RETRYABLE_KEY = "devicectl-error-retryable"


def status_of(exc: e.DeviceControllerError) -> grpc.StatusCode:
    if exc.retryable and exc.code not in _STATUS:
        return grpc.StatusCode.UNAVAILABLE
    return _STATUS.get(exc.code, grpc.StatusCode.UNKNOWN)


def error_trailers(exc: e.DeviceControllerError) -> tuple[tuple[str, str], ...]:
    return ((ERROR_CODE_KEY, exc.code), (ERROR_RETRYABLE_KEY, "1" if exc.retryable else "0"))


def error_from_status(err: grpc.aio.AioRpcError, plugin: str) -> e.DeviceControllerError:
    """The plugin's error back from a status that ended a call (or a transport failure)."""
    trailers = {k: v for k, v in (err.trailing_metadata() or ()) if isinstance(v, str)}
    if ERROR_CODE_KEY in trailers:
        return error_from(
            trailers[ERROR_CODE_KEY], err.details() or "", trailers.get(ERROR_RETRYABLE_KEY) == "1"
        )
    code = err.code()
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return e.UnsupportedError(f"plugin {plugin}: not supported ({err.details()})")
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
        return e.TransientError(f"plugin {plugin} is not reachable: {err.details()}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return e.DeviceTimeoutError(f"plugin {plugin} did not answer in time")
    return e.DeviceControllerError(f"plugin {plugin}: {code.name}: {err.details()}")


def error_to_pb(exc: e.DeviceControllerError) -> ppb.OperationError:
    return ppb.OperationError(code=exc.code, message=exc.message, retryable=exc.retryable)


# ---- targets and contexts ---------------------------------------------------------------------


def target_to_pb(target: p.DeviceTarget) -> ppb.DeviceTarget:
    ep = target.endpoint
    out = ppb.DeviceTarget(device_id=target.device_id, model_json=json.dumps(encode(target.model)))
    out.endpoint.CopyFrom(
        ppb.Endpoint(
            url=ep.url,
            has_credentials=ep.credentials is not None,
            username=ep.credentials.username if ep.credentials else "",
            password=ep.credentials.password if ep.credentials else "",
            verify_tls=ep.verify_tls,
            ca_bundle=ep.ca_bundle or "",
            options_json=json.dumps(encode(ep.options)),
        )
    )
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def _loads(text: str, where: str) -> Any:
    """JSON from the other side, refusing NaN and Infinity (Python's json takes them; no option,
    limit or request field may hold one: `plugins.base.bounds`)."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        raise e.InvalidRequestError(f"{where}: not valid JSON: {exc}") from None


def _json_object(text: str, where: str) -> dict[str, Any]:
    if not text:
        return {}
    value = _loads(text, where)
    if not isinstance(value, dict):
        raise e.InvalidRequestError(f"{where}: must be a JSON object")
    return value


def target_from_pb(msg: ppb.DeviceTarget) -> dict[str, Any]:
    """Keyword arguments of a `DeviceTarget` (also the base of a `DeviceContext`)."""
    ep = msg.endpoint
    return {
        "device_id": msg.device_id,
        "model": _json_object(msg.model_json, "model_json"),
        "endpoint": p.Endpoint(
            url=ep.url,
            credentials=p.Credentials(ep.username, ep.password) if ep.has_credentials else None,
            verify_tls=ep.verify_tls,
            ca_bundle=ep.ca_bundle or None,
            options=_json_object(ep.options_json, "options_json"),
        ),
    }


def request_to_pb(ctx: p.DeviceContext, request: Any, kind: str = "") -> ppb.OperationRequest:
    """An `Operate` request for `kind` (a `Verify` call's context has no kind)."""
    remaining = Duration()
    remaining.FromNanoseconds(int(ctx.remaining() * 1e9))
    return ppb.OperationRequest(
        target=target_to_pb(ctx),
        request_id=ctx.request_id,
        trace_id=ctx.trace_id,
        remaining=remaining,
        state_json=json.dumps(encode(ctx.state)),
        request_json=json.dumps(encode(request)),
        dry_run=ctx.dry_run,
        kind=kind,
    )


def context_from_pb(msg: ppb.OperationRequest) -> p.DeviceContext:
    return p.DeviceContext(
        **target_from_pb(msg.target),
        request_id=msg.request_id,
        trace_id=msg.trace_id,
        deadline=time.monotonic() + msg.remaining.ToNanoseconds() / 1e9,
        state=_json_object(msg.state_json, "state_json"),
        dry_run=msg.dry_run,
    )


def kind_from_pb(msg: ppb.OperationRequest) -> Kind:
    """The row of the request's kind. Raises UnsupportedError for a kind this side has no row for
    (a plugin process older than its host)."""
    try:
        return kind_of(msg.kind)
    except KeyError as exc:
        raise e.UnsupportedError(f"plugin protocol: {exc.args[0]}") from None


def request_from_pb(kind: Kind, msg: ppb.OperationRequest) -> Any:
    return decode(kind.request, _loads(msg.request_json or "{}", "request_json"), "request")


# ---- outcomes ---------------------------------------------------------------------------------


def outcome_to_pb(outcome: p.Outcome[Any]) -> ppb.OperationResponse:
    out = ppb.OperationResponse(
        result_json=json.dumps(encode(outcome.result)),
        has_state=outcome.state is not None,
        state_json=json.dumps(encode(outcome.state)) if outcome.state is not None else "",
        reach_error=outcome.reach_error,
        verification_json=json.dumps(encode(outcome.verification)) if outcome.verification else "",
        writes_json=json.dumps(encode(outcome.writes)) if outcome.writes else "",
    )
    if outcome.reached_at is not None:
        out.reached_at.FromDatetime(outcome.reached_at.astimezone(UTC))
    return out


def outcome_from_pb(kind: Kind, msg: ppb.OperationResponse) -> p.Outcome[Any]:
    """The plugin's outcome, or its error raised.

    The reply comes from another process, so it is read as strictly as a request: a document that
    is not JSON, holds NaN or Infinity, or does not decode to its type is the plugin's fault, never
    the caller's. It raises a `DeviceControllerError` without receipts (None: each write asked for
    may have landed); an error whose receipts do not decode keeps its own class, receipts unknown.
    """
    if msg.HasField("error"):
        error = error_from(msg.error.code, msg.error.message, msg.error.retryable)
        # the writes it made before failing (a plugin older than this field sends none: unknown)
        try:
            error.receipts = (
                _reply(tuple[DeviceWrite, ...], msg.writes_json, "writes_json") if msg.writes_json else None
            )
        except e.DeviceControllerError:
            error.receipts = None
        raise error
    return p.Outcome(
        result=_reply(kind.result, msg.result_json, "result_json"),
        state=_reply(dict[str, Any], msg.state_json or "{}", "state_json") if msg.has_state else None,
        reached_at=msg.reached_at.ToDatetime(tzinfo=UTC) if msg.HasField("reached_at") else None,
        reach_error=msg.reach_error,
        verification=(
            _reply(p.PendingVerification, msg.verification_json, "verification_json")
            if msg.verification_json
            else None
        ),
        writes=(_reply(tuple[DeviceWrite, ...], msg.writes_json, "writes_json") if msg.writes_json else ()),
    )


def _reply(tp: Any, text: str, where: str) -> Any:
    """One JSON document of a plugin's reply, decoded to `tp`; a bad one as the plugin's error."""
    try:
        return decode(tp, _loads(text, where), where)
    except e.DeviceControllerError as exc:
        raise e.DeviceControllerError(f"the plugin's reply is unreadable: {exc.message}") from None
