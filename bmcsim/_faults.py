"""Runtime-switchable fault injection for one simulated BMC.

One request fault is active at a time (`mode`), optionally limited to writes, to paths containing a
substring, and to the next `count` matching calls ("fail the next K calls, then recover"). Independently,
`revert_after` makes every applied cap write silently fall back to its previous value after N seconds,
like firmware that drops an out-of-band set point.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from aiohttp import web


class FaultMode(StrEnum):
    """What a faulted request experiences."""

    NONE = "none"
    #: no reply for `hang_seconds` (far longer than clients wait), then the connection is dropped
    HANG = "hang"
    #: the TCP connection is reset without any reply
    RESET = "reset"
    #: 500 InternalError; nothing is applied
    HTTP_500 = "http500"
    #: 503 ServiceTemporarilyUnavailable with `Retry-After: retry_after`; nothing is applied
    HTTP_503 = "http503"
    #: 404 ResourceMissingAtURI after authentication, as firmware answers for a linked resource it
    #: cannot serve (a sensor or device that is gone); nothing is applied
    NOT_FOUND = "http404"
    #: NVIDIA 500 with rc 0x50A (SMBPBI busy, retry after 60 s); nothing is applied
    NVIDIA_BUSY = "nvidia-busy"
    #: NVIDIA 500 with rc 0x600 (timeout); the write DID land
    NVIDIA_TIMEOUT = "nvidia-timeout"
    #: 500 with the Base registry's OperationTimeout; the write DID land. NVIDIA bmcweb answers it
    #: when its 60 s wait for an asynchronous D-Bus set runs out while the set goes on
    #: (NVIDIA/bmcweb `redfish-core/include/utils/nvidia_async_set_utils.hpp`,
    #: `doGenericSetAsyncAndGatherResult`'s timer; `redfish-core/src/error_messages.cpp`,
    #: `operationTimeout`: 500)
    OPERATION_TIMEOUT = "operation-timeout"
    #: the request is processed normally (writes land) but the reply body is truncated JSON
    INVALID_JSON = "invalid-json"
    #: the request is processed normally (writes land), then its reply is held for `hang_seconds`:
    #: a BMC still at work when a gateway in front of it gives up (nginx's 504)
    LATE_REPLY = "late-reply"


#: faults decided before authentication (transport-level or front-end failures)
PRE_AUTH_MODES = frozenset({FaultMode.HANG, FaultMode.RESET, FaultMode.HTTP_500, FaultMode.HTTP_503})

#: requests counted as writes: state changes on resources; logging in and out are not writes
WRITE_METHODS = frozenset({"PATCH", "PUT", "POST", "DELETE"})
_SESSION_PREFIX = "/redfish/v1/SessionService"


def is_write(method: str, path: str) -> bool:
    """Whether a request counts as a write for `writes_only` faults."""
    return method in WRITE_METHODS and not path.startswith(_SESSION_PREFIX)


@dataclass
class Faults:
    """The fault settings of one BMC; mutate at any time (tests, control endpoint).

    Attributes:
        mode: the request fault, see `FaultMode`.
        writes_only: fault only PATCH/PUT/POST/DELETE outside SessionService.
        path_contains: fault only requests whose path contains this substring (e.g. "GPU_1").
        count: fault only the next `count` matching requests, then switch back to `none`;
            None faults every matching request until cleared.
        retry_after: seconds sent in `Retry-After` with `http503`.
        hang_seconds: how long `hang` holds a request before dropping the connection.
        revert_after: seconds after which an applied cap write silently reverts; None disables.
        then: a fault spec (as for `update`) switched to when `count` runs out, e.g. a write
            answered late, then its read-back refused.
    """

    mode: FaultMode = FaultMode.NONE
    writes_only: bool = False
    path_contains: str | None = None
    count: int | None = None
    retry_after: int = 5
    hang_seconds: float = 3600.0
    revert_after: float | None = None
    then: dict[str, Any] | None = None

    def set(
        self,
        mode: FaultMode | str,
        *,
        writes_only: bool = False,
        path_contains: str | None = None,
        count: int | None = None,
        retry_after: int | None = None,
        hang_seconds: float | None = None,
        then: dict[str, Any] | None = None,
    ) -> None:
        """Switch the request fault (keeps `revert_after`)."""
        if count is not None and count < 0:
            raise ValueError("count must be >= 0")
        if then is not None and count is None:
            raise ValueError("then needs a count (it follows the last counted fault)")
        self.mode = FaultMode(mode)
        self.then = dict(then) if then is not None else None
        self.writes_only = writes_only
        self.path_contains = path_contains
        self.count = count
        if retry_after is not None:
            self.retry_after = int(retry_after)
        if hang_seconds is not None:
            self.hang_seconds = float(hang_seconds)

    def fail_next(
        self, k: int, mode: FaultMode | str = FaultMode.HTTP_500, *, writes_only: bool = False
    ) -> None:
        """Fail the next `k` matching calls with `mode`, then recover."""
        self.set(mode, writes_only=writes_only, count=k)

    def clear(self) -> None:
        """Back to a healthy BMC (request fault and cap revert both off)."""
        self.mode = FaultMode.NONE
        self.writes_only = False
        self.path_contains = None
        self.count = None
        self.revert_after = None
        self.then = None

    def pending(self, method: str, path: str) -> FaultMode:
        """The fault that would hit this request, without consuming it."""
        if self.mode is FaultMode.NONE or self.count == 0:
            return FaultMode.NONE
        if self.writes_only and not is_write(method, path):
            return FaultMode.NONE
        if self.path_contains and self.path_contains not in path:
            return FaultMode.NONE
        return self.mode

    def consume(self) -> None:
        """Account for one faulted request; switches back to `none` after the last of `count`."""
        if self.count is not None:
            self.count -= 1
            if self.count <= 0:
                self.mode = FaultMode.NONE
                self.count = None
                then, self.then = self.then, None
                if then is not None:
                    self.update(then)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly settings."""
        return {
            "mode": self.mode.value,
            "writes_only": self.writes_only,
            "path_contains": self.path_contains,
            "count": self.count,
            "retry_after": self.retry_after,
            "hang_seconds": self.hang_seconds,
            "revert_after": self.revert_after,
            "then": self.then,
        }

    def update(self, spec: dict[str, Any]) -> None:
        """Apply a JSON fault spec (control endpoint); unknown keys are rejected with ValueError.

        A spec with `mode` replaces the request fault (omitted filters reset to their defaults);
        `revert_after` may be given alone to change only the cap-revert behaviour.
        """
        unknown = set(spec) - set(self.to_dict())
        if unknown:
            raise ValueError(f"unknown fault settings: {sorted(unknown)}")
        if "mode" in spec:
            self.set(
                spec["mode"],
                writes_only=bool(spec.get("writes_only", False)),
                path_contains=spec.get("path_contains"),
                count=None if spec.get("count") is None else int(spec["count"]),
                retry_after=spec.get("retry_after"),
                hang_seconds=spec.get("hang_seconds"),
                then=spec.get("then"),
            )
        else:
            if spec.get("retry_after") is not None:
                self.retry_after = int(spec["retry_after"])
            if spec.get("hang_seconds") is not None:
                self.hang_seconds = float(spec["hang_seconds"])
        if "revert_after" in spec:
            value = spec["revert_after"]
            self.revert_after = None if value is None else float(value)


def reset_connection(request: web.BaseRequest) -> None:
    """Abort the request's connection with a TCP RST, like a crashing BMC web server."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            # linger 0: close() sends a TCP RST instead of a FIN, like a crashing BMC web server
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    transport.abort()
