"""The BMC as one operation sees it: a client, the request's deadline, and reachability.

Every write of the plugin (cap PATCH, action POST) goes through `OpBmc._write`, which records a
receipt for it, or, in a dry run, plans it and sends nothing.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Coroutine, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

from redfish.aio.response import AsyncRestResponse

from plugins.base import write_log
from plugins.redfish._client.client import BmcClient, Document
from plugins.redfish._platforms import CapRequest
from plugins.redfish._wire.errors import (
    ConnectionFailedError,
    DeadlineExceededError,
    RedfishError,
    RedfishHTTPError,
    RequestTimeoutError,
    TlsError,
)

T = TypeVar("T")

_UNREACHABLE = (ConnectionFailedError, RequestTimeoutError, TlsError, DeadlineExceededError)


class OpBmc:
    """The BMC as one operation sees it: a client, the request's deadline, and reachability.

    Attributes:
        reached_at: when the BMC last answered (any HTTP status) during this operation.
        reach_error: the last transport failure (unreachable, TLS, timeout), if any.
    """

    def __init__(self, client: BmcClient, deadline: float) -> None:
        self.client = client
        self.deadline = deadline
        #: when the BMC last answered, as `time.time()` (a float per call, the datetime on demand)
        self._reached: float | None = None
        self.reach_error = ""
        self.calls = 0
        #: the `etag_policy` option (None: each mechanism's default, see `Mechanism.etag_policy`)
        self.etag_policy: str | None = None
        #: the `persistent_caps` option
        self.persistent = False
        #: the `allow_power_off_on_limit` option: a cap may leave LimitException HardPowerOff in force
        self.allow_power_off = False

    @property
    def reached_at(self) -> datetime | None:
        """When the BMC last answered (any HTTP status) during this operation."""
        return None if self._reached is None else datetime.fromtimestamp(self._reached, UTC)

    @reached_at.setter
    def reached_at(self, value: datetime | None) -> None:
        self._reached = None if value is None else value.timestamp()

    @property
    def origin(self) -> str:
        """The BMC's `https://host:port`."""
        return self.client.origin

    def remaining(self) -> float:
        """Seconds left before the deadline."""
        return max(0.0, self.deadline - time.monotonic())

    def get(self, path: str) -> Coroutine[Any, Any, Document]:
        """GET a resource (the tracking coroutine itself: one coroutine less per BMC call)."""
        return self._track(self.client.get(path, deadline=self.deadline))

    @property
    def dry_run(self) -> bool:
        """Plan only: writes are recorded as planned and not sent."""
        return write_log().dry_run

    def send(
        self,
        request: CapRequest,
        etag: str | None,
        *,
        component: str = "",
        before: float | None = None,
        note: str = "",
    ) -> Coroutine[Any, Any, int]:
        """Send a cap request (PATCH or action POST); 202 is waited for. Returns its receipt index
        (the writing coroutine itself: one coroutine less per BMC call)."""
        if request.method == "PATCH":
            call = self.client.patch(request.path, request.body, deadline=self.deadline, etag=etag)
        else:
            call = self.client.post(request.path, request.body, deadline=self.deadline)
        return self._write(
            request.method, request.path, request.body, call, component=component, before=before, note=note
        )

    async def post(self, path: str, body: Mapping[str, Any], *, component: str = "") -> int:
        """POST an action; 202 is waited for. Returns its receipt index."""
        return await self._write(
            "POST", path, body, self.client.post(path, body, deadline=self.deadline), component=component
        )

    async def _write(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any],
        call: Coroutine[Any, Any, AsyncRestResponse],
        **receipt: Any,
    ) -> int:
        """The plugin's one write choke point: every PATCH/POST gets a receipt; a dry run sends none."""
        log = write_log()
        if log.dry_run:
            call.close()  # never awaited: nothing goes to the BMC
            return log.plan(path, method, body, **receipt)
        with log.write(path, method, body, **receipt) as index:
            try:
                reply = await self._track(call)
            except RedfishError as exc:
                exc.receipt = index  # a read-back may settle it later (`plugins.redfish._capping.caps`)
                raise
        log.set_status(index, str(reply.status))
        return index

    async def ping(self, attempts: int) -> Document:
        """GET the service root without authentication."""
        return await self._track(self.client.ping(deadline=self.deadline, attempts=attempts))

    async def _track(self, awaitable: Awaitable[T]) -> T:
        self.calls += 1
        try:
            result = await awaitable
        except RedfishHTTPError:
            self._reached = time.time()
            raise
        except _UNREACHABLE as exc:
            self.reach_error = str(exc)
            raise
        self._reached = time.time()
        return result
