"""Redfish error replies, shaped like a real BMC's (their messages: `_messages`).

Error replies follow `redfish-error.v1_0_2`: `{"error": {"code", "message", "@Message.ExtendedInfo": [...]}}`.
With one message the top-level code and message are that message's (as bmcweb does); with several the
top-level code is `GeneralError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bmcsim._messages import BASE, JsonDict, error_body, message

#: prefix NVIDIA bmcweb uses for asynchronous D-Bus command failures (busy, timeout)
NVIDIA_ASYNC_ERROR = "OpenBMC.0.4.1.AsyncError"

NVIDIA_BUSY_CODE = "0x50A"
NVIDIA_BUSY_RESOLUTION = "SMBPBI Command failed with error busy, please try after 60 seconds"
NVIDIA_TIMEOUT_CODE = "0x600"
NVIDIA_TIMEOUT_RESOLUTION = "Settings may/maynot have applied, please check get response before patching"


class RedfishError(Exception):
    """An HTTP error reply with a Redfish error body; raised by resource handlers."""

    def __init__(
        self,
        status: int,
        messages: Sequence[JsonDict],
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(messages[0]["Message"] if messages else str(status))
        self.status = status
        self.messages = list(messages)
        self.headers = dict(headers or {})

    @property
    def body(self) -> JsonDict:
        """The JSON error document."""
        return error_body(self.messages)


# --- the messages this simulator needs (text from the DMTF Base registry) ----------------------------


def resource_not_found(path: str) -> RedfishError:
    """404 for a URI that names no resource."""
    return RedfishError(
        404,
        [
            message(
                BASE + "ResourceMissingAtURI",
                f"The resource at the URI '{path}' was not found.",
                [path],
                severity="Critical",
                resolution="Place a valid resource at the URI or correct the URI and resubmit the request.",
            )
        ],
    )


def method_not_allowed(method: str, allowed: Sequence[str]) -> RedfishError:
    """405 for a method the resource does not implement (read-only resources, collections)."""
    return RedfishError(
        405,
        [
            message(
                BASE + "OperationNotAllowed",
                f"The HTTP method {method} is not allowed on this resource.",
                [method],
                severity="Critical",
                resolution="None.",
            )
        ],
        headers={"Allow": ", ".join(allowed)},
    )


def malformed_json() -> RedfishError:
    """400 for a body that is not JSON (or not a JSON object)."""
    return RedfishError(
        400,
        [
            message(
                BASE + "MalformedJSON",
                "The request body submitted was malformed JSON and could not be parsed by the receiving "
                "service.",
                severity="Critical",
                resolution="Ensure that the request body is valid JSON and resubmit the request.",
            )
        ],
    )


def empty_json() -> RedfishError:
    """400 for a PATCH without any property."""
    return RedfishError(
        400,
        [
            message(
                BASE + "EmptyJSON",
                "The request body submitted contained an empty JSON object and the service is unable "
                "to process it.",
                resolution="Add properties in the JSON object and resubmit the request.",
            )
        ],
    )


def bad_request(messages: Sequence[JsonDict]) -> RedfishError:
    """400 carrying the given messages."""
    return RedfishError(400, messages)


def precondition_failed() -> RedfishError:
    """412: the If-Match ETag no longer matches; nothing was changed."""
    return RedfishError(
        412,
        [
            message(
                BASE + "PreconditionFailed",
                "The ETag supplied did not match the ETag required to change this resource.",
                severity="Critical",
                resolution="Try the operation again using the appropriate ETag.",
            )
        ],
    )


def no_valid_session() -> RedfishError:
    """401 for a missing, unknown or expired credential."""
    return RedfishError(
        401,
        [
            message(
                BASE + "NoValidSession",
                "There is no valid session established with the implementation.",
                severity="Critical",
                resolution="Establish a session before attempting any operations.",
            )
        ],
    )


def login_failed(path: str) -> RedfishError:
    """401 for a login with wrong credentials (the credentials are never echoed)."""
    return RedfishError(
        401,
        [
            message(
                BASE + "ResourceAtUriUnauthorized",
                f"While accessing the resource at '{path}', the service received an authorization error "
                "'Invalid username or password'.",
                [path, "Invalid username or password"],
                severity="Critical",
                resolution="Ensure that the appropriate access is provided for the service in order for it "
                "to access the URI.",
            )
        ],
    )


def session_limit_exceeded() -> RedfishError:
    """503 when the BMC's Redfish session table is full."""
    return RedfishError(
        503,
        [
            message(
                BASE + "SessionLimitExceeded",
                "The session establishment failed due to the number of simultaneous sessions exceeding "
                "the limit of the implementation.",
                severity="Critical",
                resolution="Reduce the number of other sessions before trying to establish the session or "
                "increase the limit of simultaneous sessions, if supported.",
            )
        ],
    )


def action_not_supported(action: str) -> RedfishError:
    """400 ActionNotSupported (bmcweb: a power-limit write while capping is disabled)."""
    return RedfishError(
        400,
        [
            message(
                BASE + "ActionNotSupported",
                f"The action {action} is not supported by the resource.",
                [action],
                severity="Critical",
                resolution="The action supplied cannot be resubmitted to the implementation.  Perhaps the "
                "action was invalid, the wrong resource was the target or the implementation documentation "
                "may be of assistance.",
            )
        ],
    )


def internal_error() -> RedfishError:
    """Plain 500."""
    return RedfishError(
        500,
        [
            message(
                BASE + "InternalError",
                "The request failed due to an internal service error.  The service is still operational.",
                severity="Critical",
                resolution="Resubmit the request.  If the problem persists, consider resetting the service.",
            )
        ],
    )


def operation_timeout() -> RedfishError:
    """500 OperationTimeout, as NVIDIA bmcweb answers a write whose D-Bus set outlived its wait
    (`redfish-core/src/error_messages.cpp`, `operationTimeout`; the text is the Base registry's)."""
    return RedfishError(
        500,
        [
            message(
                BASE + "OperationTimeout",
                "A timeout internal to the service occurred as part of the request.  Partial results may "
                "have been returned.",
                severity="Warning",
                resolution="Resubmit the request.  If the problem persists, consider resetting the "
                "service or provider.",
            )
        ],
    )


def service_unavailable(retry_after: int) -> RedfishError:
    """503 with `Retry-After`, as openbmc sends it."""
    return RedfishError(
        503,
        [
            message(
                BASE + "ServiceTemporarilyUnavailable",
                f"The service is temporarily unavailable.  Retry in {retry_after} seconds.",
                [str(retry_after)],
                severity="Critical",
                resolution="Wait for the indicated retry duration and retry the operation.",
            )
        ],
        headers={"Retry-After": str(retry_after)},
    )


def nvidia_async_error(code: str, resolution: str) -> RedfishError:
    """NVIDIA bmcweb's 500 for a failed asynchronous D-Bus write (`0x50A` busy, `0x600` timeout)."""
    return RedfishError(
        500,
        [message(NVIDIA_ASYNC_ERROR, f"Async command failed with rc:{code}", [code], resolution=resolution)],
    )


def nvidia_busy() -> RedfishError:
    """SMBPBI busy: nothing was applied; retry after 60 s."""
    return nvidia_async_error(NVIDIA_BUSY_CODE, NVIDIA_BUSY_RESOLUTION)


def nvidia_timeout() -> RedfishError:
    """D-Bus timeout: the setting may or may not have been applied."""
    return nvidia_async_error(NVIDIA_TIMEOUT_CODE, NVIDIA_TIMEOUT_RESOLUTION)
