"""When `BmcClient` tries a request again, and what its error says when it gives up.

Transient failures (connection errors, 502/503/504, 429, NVIDIA `0x50A`) are retried; a write only
when it certainly did not land (never sent, or a status the protocol defines as "nothing changed":
429, NVIDIA `0x50A`). A write answered 502/503/504 may have landed behind the gateway that gave up
on it (docs/redfish.md, "Writes through gateways"): it raises to the caller, which reads first.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable

from plugins.redfish._wire.errors import (
    READS,
    BmcBusyError,
    ConnectionFailedError,
    DeadlineExceededError,
    GatewayError,
    RedfishError,
    RedfishHTTPError,
    RequestTimeoutError,
    ServiceUnavailableError,
)


async def before_sending(login: Awaitable[None]) -> None:
    """A login for a request: when it fails, the request itself was never sent (so a write that
    could not log in changed nothing, and may be tried again)."""
    try:
        await login
    except (ConnectionFailedError, RequestTimeoutError, DeadlineExceededError, GatewayError) as exc:
        exc.sent = False
        raise


def retryable(exc: BaseException, method: str) -> bool:
    if isinstance(exc, GatewayError):
        return method in READS or not exc.sent  # the gateway gave up; the BMC may have applied it
    if isinstance(exc, ServiceUnavailableError | BmcBusyError):
        return True  # the protocol says nothing was changed
    if isinstance(exc, ConnectionFailedError | RequestTimeoutError):
        return method in READS or not exc.sent
    return False


def gave_up(error: BaseException, attempts: int, deadline: float) -> BaseException:
    """The last error, its message saying why no further attempt was made."""
    if not isinstance(error, RedfishError) or not retryable_any(error):
        return error
    left = max(0.0, deadline - time.monotonic())
    wait = ""
    if isinstance(error, RedfishHTTPError) and error.retry_after is not None:
        wait = f" the BMC asked to wait {error.retry_after:g} s and"
    plural = "s" if attempts != 1 else ""
    note = f" (gave up after {attempts} attempt{plural};{wait} {left:.1f} s of the deadline left)"
    error.message += note
    error.args = (error.message,)
    return error


def retryable_any(exc: BaseException) -> bool:
    return isinstance(
        exc, ServiceUnavailableError | BmcBusyError | ConnectionFailedError | RequestTimeoutError
    )
