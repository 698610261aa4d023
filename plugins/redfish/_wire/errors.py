"""Typed Redfish errors and the one mapping from an HTTP reply to them (sushy's `raise_for_response`).

Every error is a `plugins.base` error as well, so the controller maps it to the response without
knowing Redfish: a 400 is a `DeviceRejectedError`, a 503 a `TransientError`, a refused connection a
`DeviceUnreachableError`. Messages name the BMC (scheme, host and port only), the method and the
path, and carry the BMC's own words from `@Message.ExtendedInfo`. They never contain credentials
or session tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from http import HTTPStatus
from typing import Protocol

from plugins.base import (
    DeviceControllerError,
    DeviceRejectedError,
    DeviceTimeoutError,
    DeviceUnreachableError,
    TransientError,
    UnsupportedError,
)
from plugins.redfish._wire.error_body import (
    NVIDIA_BUSY,
    NVIDIA_TIMEOUT,
    ExtendedInfo,
    describe_error,
    extended_info_messages,
    json_or_none,
    nvidia_code,
    parse_extended_info,
    parse_retry_after,
)


class Reply(Protocol):
    """What `raise_for_response` needs from a reply (`redfish.aio` `AsyncRestResponse` fits)."""

    @property
    def status(self) -> int: ...

    @property
    def text(self) -> str: ...

    def getheader(self, name: str) -> str | None: ...


# ---- the hierarchy ---------------------------------------------------------------------------


class RedfishError(DeviceControllerError):
    """Root of the Redfish plugin's errors (always also a `plugins.base` error)."""

    #: the receipt (`write_log()` index) of the write this error ended, set by the write choke
    #: point so that a later read-back can settle it
    receipt: int | None = None


class RedfishHTTPError(RedfishError):
    """The BMC answered with an unsuccessful HTTP status.

    Attributes:
        status: the HTTP status code.
        method: the request method.
        path: the request path.
        code: the error body's `code` (a MessageId), if any.
        infos: the parsed `@Message.ExtendedInfo` entries.
        retry_after: seconds from the `Retry-After` header, if any.
        nvidia_code: `0x50A` / `0x600` when the BMC is NVIDIA bmcweb and said so.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int,
        method: str = "",
        path: str = "",
        error_code: str = "",
        infos: Sequence[ExtendedInfo] = (),
        retry_after: float | None = None,
        nvidia: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.method = method
        self.path = path
        self.error_code = error_code
        self.infos = tuple(infos)
        self.retry_after = retry_after
        self.nvidia_code = nvidia

    @property
    def message_ids(self) -> tuple[str, ...]:
        """Every MessageId in the body (the envelope's `code` first)."""
        ids = [self.error_code] if self.error_code else []
        return tuple(ids + [i.message_id for i in self.infos if i.message_id])

    def has_message(self, suffix: str) -> bool:
        """Whether any MessageId ends with `suffix` (registry prefixes vary between vendors)."""
        return any(mid.endswith(suffix) for mid in self.message_ids)


class BadRequestError(RedfishHTTPError, DeviceRejectedError):
    """400: the BMC refused the payload (bad value, read-only property, out of range)."""


class AccessError(RedfishHTTPError, DeviceRejectedError):
    """401/403: credentials refused or not allowed."""

    code = "AUTHENTICATION_FAILED"


class ResourceNotFoundError(RedfishHTTPError, DeviceRejectedError):
    """404: the resource does not exist (stale discovery, other firmware)."""


class MethodNotAllowedError(RedfishHTTPError, UnsupportedError):
    """405/501: the BMC does not implement this operation on this resource."""


class ConflictError(RedfishHTTPError, DeviceRejectedError):
    """409: the resource is in a state that forbids the change."""


class PreconditionFailedError(RedfishHTTPError, DeviceRejectedError):
    """412: the `If-Match` ETag no longer matches; nothing was changed."""


class ServiceUnavailableError(RedfishHTTPError, TransientError):
    """429/502/503/504: the BMC (or its proxy) is temporarily unable to serve."""


class GatewayError(ServiceUnavailableError):
    """502/503/504: a gateway (or the BMC's own front end) gave up on the request. A write may
    still have reached the BMC and landed: its outcome is unknown until a read shows it.

    `sent` is False only when the write itself was never sent (the answer was to its login).
    """

    sent = True


class BmcBusyError(RedfishHTTPError, TransientError):
    """NVIDIA `0x50A`: SMBPBI busy; nothing was applied, retry after about 60 seconds."""


class WriteMaybeAppliedError(RedfishHTTPError, TransientError):
    """The write timed out inside the BMC and may or may not have landed: NVIDIA `0x600`, or a 5xx
    with the Base registry's `OperationTimeout` to a write (NVIDIA bmcweb answers it when its 60 s
    wait for an asynchronous D-Bus set runs out, the set still under way:
    `redfish-core/include/utils/nvidia_async_set_utils.hpp`, `doGenericSetAsyncAndGatherResult`)."""


class SessionLimitError(RedfishHTTPError, DeviceRejectedError):
    """`SessionLimitExceeded` at login with nothing of ours to free and no `basic_fallback`."""

    retryable = False


class ServerSideError(RedfishHTTPError, DeviceRejectedError):
    """Any other 5xx."""


class ConnectionFailedError(RedfishError, DeviceUnreachableError):
    """The BMC could not be reached or dropped the connection.

    `sent` is False when the request certainly never reached the BMC (connect failed), so a write
    may be repeated without reading first.
    """

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


class TlsError(RedfishError, DeviceUnreachableError):
    """TLS failed (certificate not trusted, hostname mismatch); repeating will not help."""

    code = "TLS_ERROR"
    retryable = False


class RequestTimeoutError(RedfishError, DeviceTimeoutError):
    """A connect or read timeout. `sent` as for `ConnectionFailedError`."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


class DeadlineExceededError(RedfishError, DeviceTimeoutError):
    """The request's deadline passed; no further attempt is made.

    `sent` is False only when the request certainly never left (a write may have landed otherwise).
    """

    retryable = False

    def __init__(self, message: str, *, sent: bool = True) -> None:
        super().__init__(message)
        self.sent = sent


class ProtocolError(RedfishError, DeviceRejectedError):
    """The BMC answered with something that is not valid Redfish (bad JSON, missing fields)."""


class ReplyBoundError(ProtocolError):
    """A reply past one of the client's bounds: `bound` names it (`max_document_bytes`, `gzip
    members`, `JSON values`, `JSON containers`, `nesting depth`, `head bytes`, `head fields`,
    `interim replies`, `trailer fields`, `trailer bytes`, `framing bytes`), `limit` is its value.
    The request was sent: a write's outcome is unknown until a read shows it. Not retried (the BMC
    would send the same)."""

    sent = True

    def __init__(self, message: str, *, bound: str, limit: int) -> None:
        super().__init__(message)
        self.bound = bound
        self.limit = limit


class TaskFailedError(RedfishError, DeviceRejectedError):
    """A Redfish task finished in a state other than `Completed`/OK."""


class TaskLostError(RedfishError, DeviceUnreachableError):
    """The BMC accepted a write (202) but its task could not be followed to its end: whether the
    write applied is unknown (the caller reads the resource to find out)."""

    sent = True


class PlatformUnsupportedError(RedfishError, UnsupportedError):
    """The platform has no (supported) control path for this component or operation."""


_BY_STATUS: dict[int, type[RedfishHTTPError]] = {
    400: BadRequestError,
    401: AccessError,
    403: AccessError,
    404: ResourceNotFoundError,
    405: MethodNotAllowedError,
    409: ConflictError,
    412: PreconditionFailedError,
    429: ServiceUnavailableError,
    501: MethodNotAllowedError,
    502: GatewayError,
    503: GatewayError,
    504: GatewayError,
}


#: methods that change nothing on the BMC: retried freely, followed across redirects, and a timeout
#: inside the BMC on one of them is only a failed read
READS = frozenset({"GET", "HEAD"})


def _timed_out_inside(error_code: str, infos: Sequence[ExtendedInfo]) -> bool:
    """Whether the reply names the Base registry's `OperationTimeout` ("a timeout internal to the
    service occurred as part of the request; partial results may have been returned")."""
    ids = [error_code, *(i.message_id for i in infos)]
    return any(mid.endswith(".OperationTimeout") or mid == "OperationTimeout" for mid in ids if mid)


def raise_for_response(bmc: str, method: str, path: str, reply: Reply) -> None:
    """Raise the typed error for an unsuccessful reply; return for 1xx-3xx.

    Args:
        bmc: the BMC's origin for messages (`https://host:port`, no credentials).
        method: the request method.
        path: the request path.
        reply: the reply (status, text, headers).
    """
    status = reply.status
    if status < 400:
        return
    raise error_for_response(bmc, method, path, reply)


def error_for_response(bmc: str, method: str, path: str, reply: Reply) -> RedfishHTTPError:
    """The typed error for an unsuccessful reply (see `raise_for_response`)."""
    status = reply.status
    text = reply.text or ""
    body = json_or_none(text)
    error_code, error_message, infos = parse_extended_info(body)
    nv = nvidia_code(body, text if body is None else "") if status >= 500 else None
    retry_after = parse_retry_after(reply.getheader("Retry-After"))
    cls: type[RedfishHTTPError]
    if nv == NVIDIA_BUSY:
        cls = BmcBusyError
    elif nv == NVIDIA_TIMEOUT:
        cls = WriteMaybeAppliedError
    elif status >= 500 and method not in READS and _timed_out_inside(error_code, infos):
        cls = WriteMaybeAppliedError
    else:
        cls = _BY_STATUS.get(status, ServerSideError if status >= 500 else BadRequestError)
    detail = describe_error(error_code, error_message, infos, text if body is None else "")
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = ""
    message = f"{bmc}: {method} {path} failed: HTTP {status}{' ' + reason if reason else ''}"
    if detail:
        message += f": {detail}"
    if nv == NVIDIA_BUSY:
        message += " (NVIDIA 0x50A: BMC busy, nothing applied; retry after about 60 s)"
    elif nv == NVIDIA_TIMEOUT:
        message += " (NVIDIA 0x600: the BMC timed out; the setting may or may not have been applied)"
    elif cls is WriteMaybeAppliedError:
        message += " (OperationTimeout: timed out inside the BMC; the write may or may not have been applied)"
    if retry_after is not None and issubclass(cls, ServiceUnavailableError):
        message += f" (Retry-After: {retry_after:g} s)"
    return cls(
        message,
        status=status,
        method=method,
        path=path,
        error_code=error_code,
        infos=infos,
        retry_after=retry_after,
        nvidia=nv,
    )


__all__ = [
    "NVIDIA_BUSY",
    "NVIDIA_TIMEOUT",
    "READS",
    "AccessError",
    "BadRequestError",
    "BmcBusyError",
    "ConflictError",
    "ConnectionFailedError",
    "DeadlineExceededError",
    "ExtendedInfo",
    "GatewayError",
    "MethodNotAllowedError",
    "PlatformUnsupportedError",
    "PreconditionFailedError",
    "ProtocolError",
    "RedfishError",
    "RedfishHTTPError",
    "ReplyBoundError",
    "RequestTimeoutError",
    "ResourceNotFoundError",
    "ServerSideError",
    "ServiceUnavailableError",
    "TaskFailedError",
    "TaskLostError",
    "TlsError",
    "WriteMaybeAppliedError",
    "error_for_response",
    "extended_info_messages",
    "nvidia_code",
    "parse_extended_info",
    "parse_retry_after",
    "raise_for_response",
]
