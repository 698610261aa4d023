"""One BMC connection: `AsyncRedfishClient` plus login, retries, ETags, tasks and typed errors.

`BmcClient` is the only code that issues Redfish requests. Its rules:

- one long-lived Redfish session per BMC, created on the first authenticated request and reused;
  once it is open, GET, PATCH and POST go through the transport with its token, not through
  `AsyncRedfishClient` (`_send`); a 401 on a GET is re-logged-in by the library's own renewal
  (single flight), a 401 on a write
  re-logs in once here (single flight too) and the write is sent once more; a login that fails
  (ours or the library's own) leaves no session, so the next request logs in again; sessions a crashed
  process left behind (marked with its `Session.Context`) are deleted after the first login, or when
  `SessionLimitExceeded` refuses it; Basic auth is used then only with `basic_fallback`;
  `logout()` DELETEs the session;
- transient failures (connection errors, 502/503/504, 429, NVIDIA `0x50A`) are retried with
  exponential back-off and jitter, waiting `Retry-After` when the BMC sends one, never past the
  request's deadline;
  writes are retried only when they certainly did not land (connect failures, 429, NVIDIA
  `0x50A`): a dropped connection or a read timeout after a write was sent, a gateway's
  502/503/504, and NVIDIA `0x600`, raise to the caller, which reads the resource before trying again;
- `patch()` sends `If-Match` when given an ETag; `202 Accepted` is followed through the task
  monitor until the task ends or the deadline passes;
- every unsuccessful reply becomes a typed error through `raise_for_response`;
- the last read-back of each resource is kept (`read_backs`, see `plugins.redfish._client.readbacks`) and
  answers a GET only where the caller accepts it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import ssl
import time
from collections.abc import Mapping
from typing import Any

from redfish.aio import AsyncRedfishClient
from redfish.aio import exceptions as dmtf
from redfish.aio.response import AsyncRestResponse

from plugins.base.identity import ProcessIdentity
from plugins.base.receipts import refuse_in_dry_run
from plugins.redfish._client.login import BmcLogin
from plugins.redfish._client.readbacks import (
    ReadBacks,
    note_read,
    note_refused,
    note_served,
    offered,
    take_parsed,
)
from plugins.redfish._client.tasks import wait_task
from plugins.redfish._config import ConnectionSettings
from plugins.redfish._wire.document import Document, loads
from plugins.redfish._wire.errors import (
    BmcBusyError,
    ConnectionFailedError,
    DeadlineExceededError,
    PreconditionFailedError,
    ProtocolError,
    RedfishError,
    RedfishHTTPError,
    TaskFailedError,
    TaskLostError,
    error_for_response,
    raise_for_response,
)
from plugins.redfish._wire.http import HttpConnections
from plugins.redfish._wire.retry import READS, before_sending, gave_up, retryable
from plugins.redfish._wire.telemetry import BMC_CALL_SECONDS, BMC_REQUESTS, outcome_of
from plugins.redfish._wire.transport import BmcTransport, deadline_scope

log = logging.getLogger(__name__)

SERVICE_ROOT = "/redfish/v1/"
#: request headers when the caller adds none (the library copies them, never changes them)
_ACCEPT_JSON = {"Accept": "application/json"}
#: sent straight through the transport once logged in with a session (see `_send`)
_DIRECT = frozenset(("GET", "PATCH", "POST"))
#: a path the library's URL join sends as it is: absolute, one leading slash, only characters a
#: path may hold unencoded (no "%": the join normalises escapes; the caller rules out dot segments)
_PLAIN_PATH = re.compile(r"/(?!/)[A-Za-z0-9\-._~!$&'()*+,;=:@/]*")
#: `BMC_REQUESTS` children by (method, status, platform): `labels()` takes a lock and builds a
#: tuple on every call; the label sets are few (see `_telemetry`)
_REQUEST_COUNTERS: dict[tuple[str, str, str], Any] = {}
_CALL_HISTOGRAMS: dict[tuple[str, str], Any] = {}


class BmcClient(BmcLogin):
    """Everything needed to talk to one BMC; shared by all devices behind that BMC.

    Args:
        http: the process's BMC connections.
        settings: this BMC's connection settings.
        tls: the BMC's TLS context (the pool's: a CA bundle, the system store, or no checks).
        marker: the `Session.Context` every login sends (this process's, `session_marker`).
        identity: this process's identity lease: the sessions its holders opened are recorded
            there, and only those are deleted unread (`plugins.redfish._client.sessions`).
    """

    def __init__(
        self,
        http: HttpConnections,
        settings: ConnectionSettings,
        tls: ssl.SSLContext,
        marker: str = "",
        identity: ProcessIdentity | None = None,
    ):
        self.settings = settings
        self.identity = identity
        #: the `Session.Context` of our sessions (see `plugins.redfish._client.sessions`)
        self.marker = marker
        self.transport = BmcTransport(http, settings, tls, login_context=marker)
        self._redfish = AsyncRedfishClient(
            settings.url, settings.username, settings.password, session=self.transport
        )
        super().__init__()
        self._auth: str | None = None
        self._session_counted = False  # counted in devicectl_bmc_sessions_open
        self._login_lock = asyncio.Lock()
        self._closed = False
        #: in-process cache of this BMC's discovery (the device state holds the durable copy)
        self.discovery: Any = None
        #: the device-state discovery JSON `discovery` was parsed from or stored as (by identity)
        self.discovery_section: object = None
        #: ETag policies learned on this BMC, by mechanism (a 412 over an unchanged value: body hash)
        self.etag_quirks: dict[str, str] = {}
        #: our last read-back of each resource, a prior for the next change while still valid
        self.read_backs = ReadBacks(settings.read_back_max_age)
        #: when the last request to this BMC was sent (monotonic): the pool refreshes idle sessions
        self.last_used = time.monotonic()

    @property
    def origin(self) -> str:
        """`https://host:port` of the BMC."""
        return self.settings.origin

    def retune(self, settings: ConnectionSettings) -> None:
        """Take new timeouts and back-offs (same URL, credentials and TLS) without a new login."""
        self.settings = settings
        self.transport.retune(settings)
        self.read_backs.max_age = settings.read_back_max_age

    @property
    def auth_mode(self) -> str | None:
        """The auth mode in use (`session`/`basic`), None before the first login."""
        return self._auth

    # ---- reading ------------------------------------------------------------------------------

    async def get(self, path: str, *, deadline: float) -> Document:
        """GET a resource as JSON, retrying transient failures; where the caller accepts it
        (`priors_from_read_backs`), our still valid read-back of it instead."""
        read_backs = self.read_backs
        read_at = offered(path)
        if read_at is not None:
            kept = read_backs.still(path, read_at, take_parsed(path))
            if kept is not None:
                note_served(path)
                return kept
        ticket = read_backs.ticket(path)
        reply = await self.call("GET", path, deadline=deadline)
        doc = self.document(path, reply)
        read_backs.read(path, ticket, doc, reply.read)
        note_read(path, doc)
        return doc

    async def ping(self, *, deadline: float, attempts: int = 1) -> Document:
        """GET the service root, which needs no authentication (reachability check)."""
        reply = await self.call(
            "GET", SERVICE_ROOT, deadline=deadline, attempts=attempts, authenticated=False
        )
        return self.document(SERVICE_ROOT, reply)

    def document(self, path: str, reply: AsyncRestResponse) -> Document:
        """Parse a reply body into a `Document`; invalid JSON, or none, is a precise `ProtocolError`
        (a reply nested past the bound was refused as it came: `ReplyBoundError`)."""
        text = reply.text
        if not text.strip():
            raise ProtocolError(
                f"{self.origin}: GET {path}: the reply has no body (a JSON document was expected)"
            )
        try:
            body = loads(text)
        except ValueError:
            raise ProtocolError(
                f"{self.origin}: GET {path}: the reply is not valid JSON ({len(reply.read)} bytes, "
                f"starts {text[:40]!r})"
            ) from None
        if not isinstance(body, dict):
            raise ProtocolError(f"{self.origin}: GET {path}: the reply is not a JSON object")
        etag = reply.getheader("ETag") or body.get("@odata.etag")
        return Document(path, body, str(etag) if etag else None)

    async def refresh_session(self, *, deadline: float) -> None:
        """GET our own session: the BMC restarts its inactivity timeout, the connection stays open."""
        if self._auth == "session" and self.session_uri:
            await self.call("GET", self.session_uri, deadline=deadline, attempts=1)

    # ---- writing (`patch`, `post`: refused in a dry run; logins and stale sessions are housekeeping)

    async def patch(
        self, path: str, body: Mapping[str, Any], *, deadline: float, etag: str | None = None
    ) -> AsyncRestResponse:
        """PATCH with `If-Match` when `etag` is given; a 202 is followed to the task's end."""
        refuse_in_dry_run("PATCH", path)
        headers = {"If-Match": etag} if etag else None
        reply = await self.call("PATCH", path, dict(body), deadline=deadline, headers=headers)
        if reply.status == 202:
            await self.wait_task(reply, "PATCH", path, deadline=deadline)
        return reply

    async def post(
        self, path: str, body: Mapping[str, Any] | None = None, *, deadline: float
    ) -> AsyncRestResponse:
        """POST (an action); a 202 is followed to the task's end."""
        refuse_in_dry_run("POST", path)
        reply = await self.call("POST", path, dict(body or {}), deadline=deadline)
        if reply.status == 202:
            await self.wait_task(reply, "POST", path, deadline=deadline)
        return reply

    async def wait_task(
        self, accepted: AsyncRestResponse, method: str, path: str, *, deadline: float
    ) -> None:
        """Follow a `202 Accepted` to the task's end (see `plugins.redfish._client.tasks`).

        The BMC took the write: a poll that fails (refused, lost, unreadable) leaves its outcome
        unknown, never "not written" (`TaskLostError`); a failed task or the deadline say so."""
        try:
            await wait_task(self, accepted, method, path, deadline=deadline)
        except (TaskFailedError, DeadlineExceededError):
            raise
        except RedfishError as exc:
            raise TaskLostError(
                f"{self.origin}: {method} {path}: the BMC accepted the write (202) but its task could "
                f"not be followed ({exc}); whether it applied is unknown"
            ) from exc

    # ---- the request engine -------------------------------------------------------------------

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        deadline: float,
        headers: Mapping[str, str] | None = None,
        attempts: int | None = None,
        authenticated: bool = True,
        allow_404: bool = False,
    ) -> AsyncRestResponse:
        """One logical request; returns a successful reply or raises a typed error.

        Transient failures are retried (see the module docstring) within `attempts` (default
        `max_attempts`) and the deadline. With `allow_404`, a 404 reply is returned, not raised.
        """
        if self._closed:
            raise ConnectionFailedError(f"{self.origin}: the connection was closed", sent=False)
        method = method.upper()
        if method not in READS:
            self.read_backs.writing(path)
        limit = attempts if attempts is not None else self.settings.max_attempts
        attempt = 0
        # NOTE: a plain loop, not tenacity: an `AsyncRetrying` per call leaves ~37 objects in
        # reference cycles, and at fleet scale collecting them cost more CPU than the HTTPS calls.
        while True:
            attempt += 1
            try:
                reply = await self._attempt(method, path, body, headers, deadline, authenticated)
                if not (allow_404 and reply.status == 404):
                    raise_for_response(self.origin, method, path, reply)
                return reply
            except BaseException as exc:
                self.read_backs.clear()  # the BMC may have rebooted, or the write may have landed
                if isinstance(exc, PreconditionFailedError):
                    note_refused(path)
                if not isinstance(exc, RedfishError) or not retryable(exc, method):
                    raise
                wait = self._wait(exc, attempt)
                if attempt >= limit or time.monotonic() + wait >= deadline:
                    raise gave_up(exc, attempt, deadline)  # noqa: B904 (the same exception, annotated)
            await asyncio.sleep(wait)

    async def _attempt(
        self,
        method: str,
        path: str,
        body: Any,
        headers: Mapping[str, str] | None,
        deadline: float,
        authenticated: bool,
    ) -> AsyncRestResponse:
        with deadline_scope(deadline):
            if authenticated and self._auth is None:  # logged in: no coroutines to await per call
                await before_sending(self._ensure_login())
            generation = self.transport.session_generation
            reply = await self._send(method, path, body, headers)
            if (
                reply.status == 401
                and authenticated
                and self._auth == "session"
                and (method not in READS or self.transport.session_generation == generation)
            ):
                # NOTE: AsyncRedfishClient re-logs in on 401 only for GET/HEAD and never resends
                # writes (DMTF/python-redfish-library#189); a 401 means the write was not applied,
                # so log in once more (unless a concurrent request already did) and resend once.
                # A read gets here only when the library did not log in again: it skips requests
                # sent without a token, which it is left with after its own re-login failed.
                await before_sending(self._relogin(generation))
                reply = await self._send(method, path, body, headers)
            return reply

    async def _send(
        self, method: str, path: str, body: Any, headers: Mapping[str, str] | None
    ) -> AsyncRestResponse:
        client = self._redfish
        token = client._session_key
        status = "error"
        started = self.last_used = time.monotonic()
        try:
            if token is not None and method in _DIRECT:
                # NOTE: a request logged in with a session needs only the token: sent through the
                # transport, it skips the library's per-call work (a multidict of headers, a URL
                # join and check, a copy of the reply's headers: ~10% of a call's CPU). A 401 on a
                # GET logs in again as the library does (single flight, by token) and is sent once
                # more; writes' 401s are `_attempt`'s. Inline, not a method: a coroutine less per call.
                target = request_target(client, path)
                sent = {"Accept": "application/json", "OData-Version": "4.0", "X-Auth-Token": token}
                if headers:
                    sent.update(headers)
                reply = await self.transport.send(method, target, sent, body)
                if reply.status == 401 and method == "GET" and await client._refresh_session(token):
                    await self._record_login()  # the library opened a new session: ours, recorded
                    sent["X-Auth-Token"] = client._session_key
                    reply = await self.transport.send(method, target, sent, body)
                status = str(reply.status)
                return reply
            hdrs = {"Accept": "application/json", **headers} if headers else _ACCEPT_JSON
            if method == "GET":
                reply = await client.get(path, headers=hdrs)
            elif method == "PATCH":
                reply = await client.patch(path, body=body, headers=hdrs)
            elif method == "POST":
                reply = await client.post(path, body=body, headers=hdrs)
            elif method == "DELETE":
                reply = await client.delete(path, headers=hdrs)
            elif method == "HEAD":
                reply = await client.head(path, headers=hdrs)
            else:
                raise ValueError(f"unsupported method {method}")
            status = str(reply.status)
            return reply
        except dmtf.RedfishError as exc:  # only the client's own failures reach here
            if _is_login(exc):
                # NOTE: the library's re-login after a 401 drops its token before it POSTs a new
                # session; when that POST is refused (e.g. 503 SessionLimitExceeded) it holds no
                # credentials at all, so forget ours too: the next attempt logs in through `login`,
                # which knows what a full session table means.
                self._forget_login()
            raise self._map_dmtf(exc, method, path) from exc
        finally:
            self._count(method, status, time.monotonic() - started)

    def _count(self, method: str, status: str, seconds: float) -> None:
        """`devicectl_bmc_requests` + 1 and the call's duration; labelled children are looked up
        once per label set."""
        platform = self.settings.platform or getattr(self.discovery, "platform", None) or "undiscovered"
        key = (method, status, platform)
        child = _REQUEST_COUNTERS.get(key)
        if child is None:
            child = _REQUEST_COUNTERS[key] = BMC_REQUESTS.labels(method, status, platform)
        child.inc()
        timing = _CALL_HISTOGRAMS.get((method, status))
        if timing is None:
            timing = _CALL_HISTOGRAMS[(method, status)] = BMC_CALL_SECONDS.labels(method, outcome_of(status))
        timing.observe(seconds)

    # ---- retry policy -------------------------------------------------------------------------

    def _wait(self, exc: RedfishError, attempt: int) -> float:
        """The wait before attempt `attempt + 1` after `exc`."""
        s = self.settings
        if isinstance(exc, BmcBusyError):
            # NOTE: NVIDIA 0x50A means "SMBPBI busy, retry after 60 seconds" (redfish.md §2.2).
            return s.busy_backoff
        if isinstance(exc, RedfishHTTPError) and exc.retry_after is not None:
            return exc.retry_after  # honoured as sent (the deadline bounds it)
        floor = min(s.max_retry_wait, s.retry_backoff * 2 ** (attempt - 1)) / 2
        return floor * (1.0 + random.random())  # jitter: spread retries of many devices

    def _map_dmtf(self, exc: dmtf.RedfishError, method: str, path: str) -> RedfishError:
        if isinstance(exc, dmtf.RedfishHTTPError):
            request = getattr(exc.response, "request", None)
            if request is not None:  # the failing request may be the login's service-root GET
                method, path = request.method, request.path
            return error_for_response(self.origin, method, path, exc.response)
        if isinstance(exc, dmtf.RedfishProtocolError):
            return ProtocolError(f"{self.origin}: {method} {path}: {exc}")
        return ConnectionFailedError(f"{self.origin}: {method} {path}: {exc}", sent=True)


def request_target(client: AsyncRedfishClient, path: str) -> str:
    """What goes on the request line for `path`: the library's rules (same origin, no credentials,
    dot segments resolved, encoded), without building yarl URLs for the plain paths BMCs use."""
    if _PLAIN_PATH.fullmatch(path) is not None and "/." not in path:
        return path  # what the library's URL join makes of it
    return str(client._resolve_url(path).raw_path_qs)


def _is_login(exc: dmtf.RedfishError) -> bool:
    """Whether the library's failure was its own login (a session POST, or a refusal of it)."""
    if isinstance(exc, dmtf.RedfishAuthenticationError | dmtf.RedfishPasswordChangeRequiredError):
        return True
    request = getattr(getattr(exc, "response", None), "request", None)
    return (
        request is not None
        and request.method == "POST"
        and request.path.rstrip("/").endswith("/SessionService/Sessions")
    )
