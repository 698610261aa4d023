"""One BMC connection: DMTF's `AsyncRedfishClient` (through its adapter, `_wire.dmtf`) plus login,
retries, ETags, tasks and typed errors.

`BmcClient` is the only code that issues Redfish requests. Its rules:

- one long-lived Redfish session per BMC, created on the first authenticated request and reused;
  the DMTF library is reached only through its adapter (`plugins.redfish._wire.dmtf.DmtfClient`);
  once a session is open, GET, PATCH and POST go through the transport with its token, not through
  the library (`_send`); a 401 on a GET is re-logged-in by the adapter's renewal
  (single flight, by token), a 401 on a write
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

Sessions an earlier devicectl process left open on the BMC are found by their marker and deleted. A
SIGKILLed process cannot log out, and BMC session tables are small (GB200: 4). A process may die
anywhere, between its login and the first request that could record anything included, so the
session itself says whose it is: every login sends the DMTF `Session.Context`
`devicectl/<client id>/<boot>` (`session_marker`, `plugins.redfish._client.session_table`), which the
BMC shows on the session (bmcweb: `handleSessionCollectionPost`, `fillSessionObject`,
redfish_sessions.hpp).

The first login of a process to a BMC is followed by a sweep: the session collection is listed
and each member read; a session whose Context names this client id and another boot was opened by
an earlier holder of the lease we hold now, so by a dead process, and is deleted. The identity's
record (`plugins.base.identity`, written right after each login, before the session is used) lists
the sessions its holders opened and did not delete: those are ours too, unless the session now shows
someone else's Context or account (iDRAC reuses session ids). Nothing else is ever deleted: not a URI
a device state names (a request's state is a caller's word, not proof: it only asks for a sweep),
and not a session without a Context, whatever `exclusive_account` says: behind NAT another live
controller's session shows our account and address too. A BMC that does not keep Context (or
refuses it at login) is named in a warning once.

Every URI is checked before a request goes to it (`plugins.redfish._client.uris`): recorded ones, our
own `Location`, the members the BMC lists. A session is exactly one segment under the collection.

When the login is refused with `SessionLimitExceeded`, the sweep runs first with Basic auth on its
own requests only (the client's auth mode is not switched, so no other request goes out with
Basic) and the login is tried once more; if the table is still full, the error gives the BMC's
count and who holds the sessions (`full_table`). Basic auth replaces the session only when the
device allows it (`basic_fallback`).
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import contextvars
import logging
import random
import ssl
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import tenacity
from redfish.aio import exceptions as dmtf
from redfish.aio.response import AsyncRestResponse

from plugins.base import HostEnvironmentError
from plugins.base.identity import ProcessIdentity
from plugins.base.receipts import refuse_in_dry_run
from plugins.base.schema import clip
from plugins.redfish._client.readbacks import (
    ReadBacks,
    note_read,
    note_refused,
    note_served,
    offered,
    take_parsed,
)
from plugins.redfish._client.session_table import Sweep, full_table, marker_parts
from plugins.redfish._client.tasks import wait_task
from plugins.redfish._client.uris import SESSIONS_PATH, session_member
from plugins.redfish._config import ConnectionSettings
from plugins.redfish._wire import off_loop
from plugins.redfish._wire.dmtf import DmtfClient
from plugins.redfish._wire.document import Document, loads_scanned
from plugins.redfish._wire.errors import (
    READS,
    AccessError,
    BmcBusyError,
    ConnectionFailedError,
    DeadlineExceededError,
    GatewayError,
    PreconditionFailedError,
    ProtocolError,
    RedfishError,
    RedfishHTTPError,
    RequestTimeoutError,
    SessionLimitError,
    TaskFailedError,
    TaskLostError,
    error_for_response,
    raise_for_response,
)
from plugins.redfish._wire.http import HttpConnections
from plugins.redfish._wire.redirect import without_userinfo
from plugins.redfish._wire.retry import before_sending, gave_up, retryable
from plugins.redfish._wire.telemetry import (
    BMC_CALL_SECONDS,
    BMC_REQUESTS,
    SESSION_LIMIT,
    SESSIONS_OPEN,
    outcome_of,
)
from plugins.redfish._wire.transport import BmcTransport, deadline_scope

log = logging.getLogger(__name__)

SERVICE_ROOT = "/redfish/v1/"
#: read from every GET's reply
_ETAG = "ETag"
#: request headers when the caller adds none (the library copies them, never changes them)
_ACCEPT_JSON = {"Accept": "application/json"}
#: the user information of an absolute URI (`//user:password@`)
#: every client of this process (the sessions they use are never a lost login's leftover)
_CLIENTS: weakref.WeakSet[BmcClient] = weakref.WeakSet()
#: sent straight through the transport once logged in with a session (see `_send`)
_DIRECT = frozenset(("GET", "PATCH", "POST"))
#: by (method, status, platform): the `inc` of that `BMC_REQUESTS` child and the `observe` of the
#: `BMC_CALL_SECONDS` child, bound once (`labels()` takes a lock and builds a tuple on every call;
#: the label sets are few, see `_telemetry`)
_METERS: dict[tuple[str, str, str], tuple[Callable[[], None], Callable[[float], None]]] = {}
#: session members read per sweep at most (real tables hold 4 to 64)
MAX_SWEPT = 64
#: time a sweep after login may take (its own budget, not a request's)
SWEEP_SECONDS = 30.0
#: waits before a failed sweep after login is tried again (then it is left to the next login)
SWEEP_RETRY_WAITS = (1.0, 5.0, 15.0, 60.0, 300.0)
#: the Basic `Authorization` header of a sweep that runs without a session (its task alone)
_SWEEP_AUTH: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("sweep", default=None)


class BmcClient:
    """Everything needed to talk to one BMC; shared by all devices behind that BMC.

    Args:
        http: the process's BMC connections.
        settings: this BMC's connection settings.
        tls: the BMC's TLS context (the pool's: a CA bundle, the system store, or no checks).
        marker: the `Session.Context` every login sends (this process's, `session_marker`).
        identity: this process's identity lease: the sessions its holders opened are recorded
            there, and only those are deleted unread (see the module docstring).
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
        #: the `Session.Context` of our sessions (see the module docstring)
        self.marker = marker
        self.transport = BmcTransport(http, settings, tls)
        #: the DMTF library's client, through its one adapter
        self._redfish = DmtfClient(
            settings.url, settings.username, settings.password, self.transport, context=marker
        )
        self._auth: str | None = None
        self._session_counted = False  # counted in devicectl_bmc_sessions_open
        #: our session as written in the identity's record
        self._recorded = ""
        #: the last `Location` checked and its path ('' when not a member): asked on every request
        self._location = ("", "")
        #: session URIs a device state names that are not ours now: a reason to sweep, not proof
        self._stale: set[str] = set()
        self._reaped: set[str] = set()
        self._swept = False
        self._sweeping: asyncio.Task[None] | None = None
        self._basic_sweep: asyncio.Task[Sweep | None] | None = None
        #: False once the BMC refused to list its sessions (not asked again by this process)
        self._listable = True
        self._unmarked_warned = False
        self._unproven_warned = False
        self.sessions_reaped = 0
        self._login_lock = asyncio.Lock()
        #: login POSTs out and unanswered (a session one made is not ours yet)
        self._login_pending = 0
        #: logins whose answer never came (a deadline, a dropped connection): each may have left a
        #: session with our own Context on the BMC, deleted by the next sweep
        self._lost_logins = 0
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
        _CLIENTS.add(self)

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
        # a small body is parsed here, without a coroutine of `read_document`'s
        if len(reply.read) <= off_loop.OFF_LOOP_BYTES:
            doc = self.document(path, reply)
        else:
            doc = await self.read_document(path, reply)
        read_backs.read(path, ticket, doc, reply.read)
        note_read(path, doc)
        return doc

    async def ping(self, *, deadline: float, attempts: int = 1) -> Document:
        """GET the service root, which needs no authentication (reachability check)."""
        reply = await self.call(
            "GET", SERVICE_ROOT, deadline=deadline, attempts=attempts, authenticated=False
        )
        return await self.read_document(SERVICE_ROOT, reply)

    async def read_document(self, path: str, reply: AsyncRestResponse) -> Document:
        """`document`, in a worker thread for a body over `off_loop.OFF_LOOP_BYTES` (a multi-MiB
        collection parses for hundreds of milliseconds: never on the event loop)."""
        if len(reply.read) <= off_loop.OFF_LOOP_BYTES:
            return self.document(path, reply)
        return await off_loop.run(lambda: self.document(path, reply, yielding=True))

    def document(self, path: str, reply: AsyncRestResponse, *, yielding: bool = False) -> Document:
        """Parse a reply body into a `Document`; invalid JSON, or none, is a precise `ProtocolError`
        (a reply nested past the bound was refused as it came: `ReplyBoundError`). `yielding`: as
        `loads` (off the event loop)."""
        text = reply.text
        if not text.strip():
            raise ProtocolError(
                f"{self.origin}: GET {path}: the reply has no body (a JSON document was expected)"
            )
        try:
            # NOTE: every reply, the library's too, came through `BmcTransport.exchange`, which
            # bounds-scanned its bytes once as they came: parsed here, never scanned or re-encoded again
            body = loads_scanned(text, yielding=yielding)
        except ValueError:
            raise ProtocolError(
                f"{self.origin}: GET {path}: the reply is not valid JSON ({len(reply.read)} bytes, "
                f"starts {text[:40]!r})"
            ) from None
        if not isinstance(body, dict):
            raise ProtocolError(f"{self.origin}: GET {path}: the reply is not a JSON object")
        etag = reply.getheader(_ETAG) or body.get("@odata.etag")
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
        try:
            return await self._once(method, path, body, headers, deadline, authenticated, allow_404)
        except RedfishError as exc:
            if not retryable(exc, method):
                raise
            first = exc
        limit = attempts if attempts is not None else self.settings.max_attempts
        return await self._retry(
            first, limit, method, path, body, headers, deadline, authenticated, allow_404
        )

    async def _once(
        self,
        method: str,
        path: str,
        body: Any,
        headers: Mapping[str, str] | None,
        deadline: float,
        authenticated: bool,
        allow_404: bool,
    ) -> AsyncRestResponse:
        """One attempt: the reply, or its typed error (a failed attempt forgets the read-backs).

        A 401 to a session's request is logged in again once and the request sent once more (see
        below); every HTTP request here is bounded by `deadline`."""
        # NOTE: a direct send is given the deadline, and the library's requests (logins, others)
        # read it from `deadline_scope`, entered only around them (a context variable set and reset
        # per call cost more than the rest of this)
        try:
            if authenticated and self._auth is None:  # logged in: no coroutines to await per call
                with deadline_scope(deadline):
                    await before_sending(self._ensure_login())
            generation = self._redfish.logins
            reply = await self._send(method, path, body, headers, deadline)
            if (
                reply.status == 401
                and authenticated
                and self._auth == "session"
                and (method not in READS or self._redfish.logins == generation)
            ):
                # NOTE: a 401 means the write was not applied, so log in once more (unless a
                # concurrent request already did) and resend once (the library itself never resends
                # writes: DMTF/python-redfish-library#189). A read gets here only when `_send` did
                # not log in again: a HEAD or DELETE, or a request sent without a token, which the
                # adapter is left with after its own re-login failed.
                with deadline_scope(deadline):
                    await before_sending(self._relogin(generation))
                reply = await self._send(method, path, body, headers, deadline)
            if not (allow_404 and reply.status == 404):
                raise_for_response(self.origin, method, path, reply)
            return reply
        except BaseException as exc:
            self.read_backs.clear()  # the BMC may have rebooted, or the write may have landed
            if isinstance(exc, PreconditionFailedError):
                note_refused(path)
            raise

    async def _retry(
        self,
        first: RedfishError,
        limit: int,
        method: str,
        path: str,
        body: Any,
        headers: Mapping[str, str] | None,
        deadline: float,
        authenticated: bool,
        allow_404: bool,
    ) -> AsyncRestResponse:
        """The retries after a first attempt failed with `first`, a transient error, under one
        tenacity policy: again while the error is retryable for this method (`retryable`), after
        the wait `_wait` gives (a busy BMC's back-off, the BMC's Retry-After, else exponential with
        jitter), at most `limit` attempts in all and never a wait that ends past the deadline; the
        error that ends it says why (`gave_up`).

        NOTE: built only on this path, never per call: an `AsyncRetrying` leaves ~37 objects in
        reference cycles, and at fleet scale collecting them cost more CPU than the HTTPS calls."""
        wait = self._wait(first, 1)
        if limit <= 1 or time.monotonic() + wait >= deadline:
            raise gave_up(first, 1, deadline)
        await asyncio.sleep(wait)
        stopped, tried = False, 1

        def next_wait(state: tenacity.RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome is not None else None
            return self._wait(exc, state.attempt_number + 1) if isinstance(exc, RedfishError) else 0.0

        def stop(state: tenacity.RetryCallState) -> bool:
            nonlocal stopped, tried
            tried = state.attempt_number + 1  # the first attempt came before the policy
            stopped = tried >= limit or (time.monotonic() + (state.upcoming_sleep or 0.0) >= deadline)
            return stopped

        policy = tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception(lambda e: isinstance(e, RedfishError) and retryable(e, method)),
            wait=next_wait,
            stop=stop,
            reraise=True,
        )
        try:
            async for attempt in policy:
                with attempt:
                    return await self._once(method, path, body, headers, deadline, authenticated, allow_404)
        except RedfishError as exc:
            if stopped:
                raise gave_up(exc, tried, deadline)  # noqa: B904 (the same exception, annotated)
            raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _send(
        self,
        method: str,
        path: str,
        body: Any,
        headers: Mapping[str, str] | None,
        deadline: float | None = None,
    ) -> AsyncRestResponse:
        """One request as the client sends it (`deadline`: None for the enclosing `deadline_scope`'s)."""
        client = self._redfish
        token = client.token
        status = "error"
        started = self.last_used = time.monotonic()
        try:
            if token is not None and method in _DIRECT:
                # NOTE: a request logged in with a session needs only the token: sent through the
                # transport, it skips the library's per-call work (a multidict of headers, a URL
                # join and check, a copy of the reply's headers: ~10% of a call's CPU). A 401 on a
                # GET logs in again (the adapter's `renew`: single flight, by token) and is sent once
                # more; writes' 401s are `_once`'s. Inline, not a method: a coroutine less per call.
                target = client.target(path)
                sent = {"Accept": "application/json", "OData-Version": "4.0", "X-Auth-Token": token}
                if headers:
                    sent.update(headers)
                reply = await self.transport.send(method, target, sent, body, deadline)
                if reply.status == 401 and method == "GET":
                    with deadline_scope(deadline):
                        renewed = await self._renewed(token)
                    if renewed:
                        await self._record_login()  # a new session: ours, recorded
                        sent["X-Auth-Token"] = client.token or ""
                        reply = await self.transport.send(method, target, sent, body, deadline)
                status = str(reply.status)
                return reply
            hdrs = {"Accept": "application/json", **headers} if headers else _ACCEPT_JSON
            with deadline_scope(deadline):
                reply = await client.request(method, path, body, hdrs)
            status = str(reply.status)
            return reply
        except dmtf.RedfishError as exc:  # only the client's own failures reach here
            if _is_login(exc):
                # NOTE: the re-login after a 401 (`renew`) drops the token before it POSTs a new
                # session; when that POST is refused (e.g. 503 SessionLimitExceeded) the adapter holds
                # no credentials at all, so forget ours too: the next attempt logs in through
                # `login`, which knows what a full session table means.
                self._forget_login()
            raise self._map_dmtf(exc, method, path) from exc
        finally:
            self._count(method, status, time.monotonic() - started)

    async def _renewed(self, token: str) -> bool:
        """The login again after a 401 (the adapter's, single flight by token); one whose answer was
        lost may have left a session with our Context, as `_open` counts it."""
        self._login_pending += 1
        try:
            return await self._redfish.renew(token)
        except BaseException as exc:
            if _answer_lost(exc):
                self._lost_logins += 1
            raise
        finally:
            self._login_pending -= 1

    def _count(self, method: str, status: str, seconds: float) -> None:
        """`devicectl_bmc_requests` + 1 and the call's duration; labelled children are looked up
        once per label set."""
        platform = self.settings.platform or getattr(self.discovery, "platform", None) or "undiscovered"
        key = (method, status, platform)
        meters = _METERS.get(key)
        if meters is None:
            meters = _METERS[key] = (
                BMC_REQUESTS.labels(method, status, platform).inc,
                BMC_CALL_SECONDS.labels(method, outcome_of(status)).observe,
            )
        count, observe = meters
        count()
        observe(seconds)

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

    # ---- login: one session per BMC, opened on first use, again after a 401 on a write -----------

    async def _ensure_login(self) -> None:
        if self._auth is not None:
            return
        async with self._login_lock:
            if self._auth is None:
                await self._login(self.settings.auth)

    async def _relogin(self, generation: int) -> None:
        async with self._login_lock:
            if self._redfish.logins == generation:
                log.info("%s: Redfish session rejected (401); logging in again", self.origin)
                await self._login("session")

    async def _login(self, mode: str) -> None:
        s = self.settings
        if not s.username or s.password is None:
            raise HostEnvironmentError(
                f"{self.origin}: no credentials for this BMC; give the device a secret in the inventory"
            )
        try:
            await self._open(mode)
        except BaseException:
            # NOTE: `login()` dropped the adapter's credentials before it tried: a failed login
            # leaves no session, so the next request must log in again (not send without a token).
            self._forget_login()
            raise

    async def _open(self, mode: str) -> None:
        s = self.settings
        try:
            self._login_pending += 1
            try:
                await self._redfish.login(auth=mode)
            except BaseException as exc:
                if mode == "session" and _answer_lost(exc):
                    # NOTE: the BMC may have made the session and its answer never reached us:
                    # a session with this process's own Context that is not the one in use (a
                    # SIGKILL later or not, it would stay open beside ours); the next sweep
                    # deletes it
                    self._lost_logins += 1
                raise
            finally:
                self._login_pending -= 1
        except dmtf.RedfishPasswordChangeRequiredError as exc:
            raise AccessError(
                f"{self.origin}: login refused: the BMC requires a password change for {s.username!r}",
                status=403,
                method="POST",
            ) from exc
        except dmtf.RedfishAuthenticationError as exc:
            raise AccessError(
                f"{self.origin}: login refused for user {s.username!r} (HTTP 401/403): check the "
                "device's secret",
                status=401,
                method="POST",
            ) from exc
        except dmtf.RedfishHTTPError as exc:
            error = self._map_dmtf(exc, "POST", "/redfish/v1/SessionService/Sessions")
            assert isinstance(error, RedfishHTTPError)
            if mode == "session" and self._redfish.context and _refuses_context(error):
                # NOTE: a service that does not read Context may refuse it as unknown (bmcweb's
                # readJson answers 400 PropertyUnknown to any property its handler does not read):
                # log in without it from now on; leftovers are then found as on a BMC that drops it
                self._redfish.context = ""
                log.warning(
                    "%s: the BMC refuses the Redfish Session.Context devicectl sets at login (%s); "
                    "logging in without it",
                    self.origin,
                    clip(str(error), 300),
                )
                await self._open(mode)
                return
            if mode == "session" and error.has_message("SessionLimitExceeded"):
                await self._session_table_full(error)  # raises, or logs in some other way
                self._swept = True
                if self._auth == "session":
                    await self._record_login()
                if self._auth == "session" and not self._session_counted:
                    self._session_counted = True
                    SESSIONS_OPEN.inc()
                return
            raise error from exc
        except dmtf.RedfishError as exc:
            raise self._map_dmtf(exc, "POST", "/redfish/v1/SessionService/Sessions") from exc
        if mode == "session":
            # NOTE: in the identity's record before any request may use it (requests take a
            # session once `_auth` is set)
            await self._record_login()
        self._auth = mode
        self.read_backs.clear()  # a new login: the BMC may have restarted since the last read-backs
        if mode == "session" and not self._session_counted:
            self._session_counted = True
            SESSIONS_OPEN.inc()
        if mode == "session":
            log.debug("%s: Redfish session opened", self.origin)
            self._after_login()

    async def logout(self) -> None:
        """Delete the Redfish session (best effort, bounded by `logout_timeout`) and stop."""
        self._closed = True
        await self._stop_sweeping()
        if self._auth is None:
            return
        try:
            with deadline_scope(time.monotonic() + self.settings.logout_timeout):
                await self._redfish.logout()
            self._note_logout()
        except (dmtf.RedfishError, RedfishError, OSError, TimeoutError) as exc:
            log.warning("%s: could not delete the Redfish session: %s", self.origin, clip(str(exc), 300))
        finally:
            self._forget_login()

    def _forget_login(self) -> None:
        """No credentials are held any more: the next authenticated request logs in."""
        self._auth = None
        self.read_backs.clear()
        if self._session_counted:
            self._session_counted = False
            SESSIONS_OPEN.dec()

    # ---- our session, and the identity's record of the sessions we opened ------------------------

    @property
    def session_uri(self) -> str:
        """The path of our Redfish session ('' without one, or when the BMC's `Location` is not a
        member of its session collection). Never the token."""
        return self._session_path() if self._auth == "session" else ""

    def _session_path(self) -> str:
        """`session_uri` of the session the last login opened (before it is put to use)."""
        location = self._redfish.location
        if location is None:
            return ""
        if location != self._location[0]:
            self._location = (location, session_member(location.rstrip("/"), self.origin) or "")
        return self._location[1]

    async def _record_login(self) -> None:
        """A session was opened: its line is in the identity's record before it is used (a process
        killed from here on leaves a session its successor may delete). The record is written by
        its own thread; this only waits for it."""
        written = self._note_login()
        if written is not None and not written.done():
            await asyncio.wrap_future(written)

    def _note_login(self) -> concurrent.futures.Future[None] | None:
        """Note a new session in the identity's record (the one it replaced, 401, is gone); the
        future of its line, None when nothing is recorded."""
        uri = self._session_path()
        location = self._redfish.location
        if not uri and location is not None:
            # NOTE: the library DELETEs the login's Location at logout: one that is not a member of
            # the session collection is never sent anything (the session expires on the BMC)
            self._redfish.disown_location()
            log.warning(
                "%s: the BMC's login answer puts our Redfish session at %s, outside its session "
                "collection: it is neither recorded nor deleted at logout",
                self.origin,
                clip(without_userinfo(location), 200),  # credentials in it stay out of the log
            )
        if self.identity is None or uri == self._recorded:
            return None
        if self._recorded:
            self.identity.note_deleted(self.origin, self._recorded)
        self._recorded = uri
        return self.identity.note_created(self.origin, uri) if uri else None

    def _note_logout(self) -> None:
        """Our session was deleted at logout."""
        if self.identity is not None and self._recorded:
            self.identity.note_deleted(self.origin, self._recorded)
        self._recorded = ""

    def _inherited(self) -> set[str]:
        """Sessions earlier holders of our identity opened and did not delete: provably ours."""
        if self.identity is None:
            return set()
        mine = {self.session_uri, self._recorded}
        return {u for u in self.identity.inherited(self.origin) if u not in mine and session_member(u)}

    def _forget(self, uri: str) -> None:
        """A recorded session is gone or no longer ours: drop it from the identity's record."""
        if self.identity is not None:
            self.identity.note_deleted(self.origin, uri)

    # ---- sessions earlier processes left open: found by their marker, deleted ------------------

    async def _session_table_full(self, error: RedfishHTTPError) -> None:
        """`SessionLimitExceeded` at login: free earlier processes' sessions, else Basic when allowed.

        NOTE: leaked sessions fill small BMC session tables (iDRAC RAC0218, redfish.md §3). Only
        sessions marked as this controller's (or recorded by it) are deleted; other clients' never.
        """
        task = self._basic_sweep
        if task is None or task.done():
            task = self._basic_sweep = asyncio.get_running_loop().create_task(self._sweep_with_basic_auth())
        # NOTE: shielded, with its own budget: a request whose deadline ends first fails, and the
        # sweep still frees the table for the next one (a crash loop leaves requests little time)
        sweep = await asyncio.shield(task)
        if sweep is not None and sweep.deleted:
            msg = "%s: Redfish session limit reached; deleted %d session(s) earlier processes left open"
            log.info(msg, self.origin, sweep.deleted)
            try:
                await self._redfish.login(auth="session")
            except dmtf.RedfishHTTPError as exc:
                again = self._map_dmtf(exc, "POST", SESSIONS_PATH)
                if not (isinstance(again, RedfishHTTPError) and again.has_message("SessionLimitExceeded")):
                    raise again from exc
                error = again
            else:
                self._auth = "session"
                SESSION_LIMIT.labels("freed").inc()
                return
        if self.settings.basic_fallback:
            SESSION_LIMIT.labels("basic").inc()
            log.warning("%s: Redfish session limit reached; using Basic auth (basic_fallback)", self.origin)
            await self._redfish.login(auth="basic")
            self._auth = "basic"
            return
        SESSION_LIMIT.labels("refused").inc()
        table = self._full_table(sweep)
        raise SessionLimitError(
            f"{self.origin}: {table}; free a session on the BMC, or set `basic_fallback = true` for "
            "this device to use Basic auth",
            status=error.status,
            method="POST",
            path=error.path,
            infos=error.infos,
        )

    def _full_table(self, sweep: Sweep | None) -> str:
        """What the BMC's full session table holds, for the error (its count is its limit)."""
        return full_table(sweep, self.marker, self.settings.username)

    async def _sweep_with_basic_auth(self) -> Sweep | None:
        """The sweep when no session can be opened: Basic auth on its own requests only.

        NOTE: the client's auth mode stays unset (a context variable carries the header to this
        task's requests): requests waiting meanwhile must log in, not go out with Basic auth that
        the device may not allow."""
        s = self.settings
        if not s.username or s.password is None or ":" in s.username:
            return None  # no Basic credentials (RFC 7617 forbids ':' in the user id)
        basic = base64.b64encode(f"{s.username}:{s.password}".encode()).decode("ascii")
        _SWEEP_AUTH.set({"Authorization": f"Basic {basic}"})
        try:
            with deadline_scope(time.monotonic() + SWEEP_SECONDS):
                return await self._sweep()
        except RedfishError as exc:
            self._unreadable(exc)
            return None

    def note_sessions(self, uris: list[str]) -> None:
        """Session URIs a device's state names: a sweep looks at them (never deletes them unproven)."""
        current = self.session_uri
        for uri in uris:
            if uri != current and uri not in self._reaped:
                self._stale.add(uri)

    @property
    def stale_sessions(self) -> list[str]:
        """Recorded sessions not yet deleted."""
        return sorted(self._stale)

    def reap_if_logged_in(self) -> None:
        """Delete recorded leftovers now when a session is already open (else after the next login)."""
        if self._stale and self._auth == "session":
            self._after_login()

    def _after_login(self) -> None:
        """The first session of this process on this BMC: sweep once, in the background.

        NOTE: not within the request's deadline: a crash loop leaves requests little time, and a
        sweep cut short by each of them would let the table fill up (the request goes on meanwhile;
        the BMC's concurrency limit paces both).
        """
        if (self._swept and not self._stale and not self._lost_logins) or self._sweeping is not None:
            return
        self._sweeping = asyncio.get_running_loop().create_task(self._background_sweep())

    async def _background_sweep(self) -> None:
        # NOTE: a failed sweep (a busy BMC, a timeout under a wave) is tried again: the login that
        # started it may be this process's only one here, and a leftover would stay open
        try:
            for wait in (*SWEEP_RETRY_WAITS, None):
                try:
                    lost = self._lost_logins
                    with deadline_scope(time.monotonic() + SWEEP_SECONDS):
                        await self._sweep()
                    # the table was read after those logins were sent: what they left is gone
                    self._lost_logins = max(0, self._lost_logins - lost)
                    if not self._lost_logins or self._auth != "session":
                        return
                    continue  # a login was lost while this sweep ran: look once more
                except RedfishError as exc:
                    self._unreadable(exc, f"; trying again in {wait:g} s" if wait is not None else "")
                if wait is None or self._auth != "session":
                    return
                await asyncio.sleep(wait)
        finally:
            self._sweeping = None

    def _unreadable(self, exc: RedfishError, then: str = "") -> None:
        log.warning(
            "%s: could not read the BMC's Redfish sessions: %s%s", self.origin, clip(str(exc), 300), then
        )

    async def settled(self) -> None:
        """Wait for a sweep in progress to end."""
        task = self._sweeping
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(task)

    async def _stop_sweeping(self) -> None:
        for task in (self._sweeping, self._basic_sweep):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _sweep(self) -> Sweep:
        """List the session table and delete what earlier processes of this client left in it."""
        own = self.session_uri
        listing: dict[str, Any] = {}
        if self._listable:
            try:
                listing = await self._read(SESSIONS_PATH)
            except RedfishHTTPError as exc:
                if exc.status not in (403, 404, 405):
                    raise
                # NOTE: NVIDIA's DPS proxy allows only POST and DELETE on sessions (dps.md §7): only
                # sessions recorded in device state can be found then
                self._listable = False
                log.info(
                    "%s: the BMC (or a proxy in front of it) refuses to list Redfish sessions (HTTP %d); "
                    "only sessions recorded in device state are deleted after a crash",
                    self.origin,
                    exc.status,
                )
        sweep = Sweep()
        doomed: list[str] = []
        proven = self._inherited()
        if self._listable:
            doomed = await self._examine(listing, own, sweep, proven)
        else:
            # NOTE: deleted unread only when our identity's record says we opened it; a URI only a
            # device state names may be anyone's (a request's state is the caller's word)
            doomed = sorted(proven)
            unproven = self._stale - proven - {own}
            if unproven and not self._unproven_warned:
                self._unproven_warned = True
                log.warning(
                    "%s: %d Redfish session URI(s) the device state names are not deleted: the BMC does "
                    "not let them be read, and this process's identity did not open them",
                    self.origin,
                    len(unproven),
                )
        self._reaped |= self._stale
        self._stale.clear()
        self._swept = True
        for uri in doomed:
            self._reaped.add(uri)
            sweep.deleted += await self._delete(uri)
        return sweep

    async def _examine(self, listing: dict[str, Any], own: str, sweep: Sweep, proven: set[str]) -> list[str]:
        """Read each listed session (and our own); the earlier processes' among them."""
        members = listing.get("Members")
        ids = (
            [m.get("@odata.id") for m in members if isinstance(m, dict)] if isinstance(members, list) else []
        )
        listed = [session_member(u.rstrip("/") if isinstance(u, str) else u, self.origin) for u in ids]
        uris = [u for u in listed if u is not None]
        if len(uris) < len(ids):
            log.warning(
                "%s: the BMC lists %d Redfish session(s) outside its session collection; they are not read",
                self.origin,
                len(ids) - len(uris),
            )
        sweep.listed = len(uris)
        for gone in proven - set(uris):
            self._forget(gone)  # no longer listed: deleted or expired
        others = [u for u in uris if u != own][:MAX_SWEPT]
        # our own session as the login's reply showed it (bmcweb answers with the session), else read
        own_doc = self._redfish.login_reply if own else {}
        if own and "ClientOriginIPAddress" not in own_doc and "Context" not in own_doc:
            own_doc = await self._read(own, missing_ok=True)
        docs = await asyncio.gather(*(self._read(u, missing_ok=True) for u in others))
        found = dict(zip(others, docs, strict=True))
        if own and "Context" not in own_doc:
            self._context_not_kept()
        address = own_doc.get("ClientOriginIPAddress") if own else None
        doomed = []
        for uri, doc in found.items():
            if not doc:
                self._forget(uri)
                continue  # gone meanwhile
            if self._leftover(uri, doc, proven):
                doomed.append(uri)
                continue
            if uri in proven:
                self._forget(uri)  # the id is someone else's now
            user, address_, context = (
                str(doc.get(k) or "") for k in ("UserName", "ClientOriginIPAddress", "Context")
            )
            sweep.others[(user, address_, context)] += 1
            sweep.unmarked += not context and user == self.settings.username
        self._unproven(sweep, address)
        return doomed

    def _leftover(self, uri: str, doc: dict[str, Any], proven: set[str]) -> bool:
        """Whether a session (not ours now) is provably one a dead process of our identity left."""
        context = doc.get("Context")
        mine = marker_parts(self.marker)
        theirs = marker_parts(context)
        if theirs is not None and mine is not None:
            # our identity is a lease this process holds: another boot under it has died
            if theirs[0] != mine[0]:
                return False
            return theirs[1] != mine[1] or self._lost_login_session(uri)
        if context:
            return False  # someone else's marker
        user = doc.get("UserName")
        if user is not None and user != self.settings.username:
            return False  # another account's: a BMC that reuses session ids gave it a recorded URI
        # NOTE: no Context is anyone's: behind NAT another live controller's session shows our
        # account and address too. Only our identity's own record makes it ours.
        return uri in proven

    def _lost_login_session(self, uri: str) -> bool:
        """Whether a session with this very process's Context is one a lost login of this client
        left: a login's answer was lost, none is out now, and no client of this process uses it."""
        if not self._lost_logins or self._login_pending:
            return False
        in_use = {c.session_uri for c in _CLIENTS if c.marker == self.marker}
        return uri not in in_use and uri != self._session_path()

    def _unproven(self, sweep: Sweep, address: object) -> None:
        """Say once that sessions of our account without a Context were left alone, and why."""
        if not sweep.unmarked or self._unproven_warned or not self.settings.exclusive_account:
            return
        self._unproven_warned = True
        log.warning(
            "%s: %d Redfish session(s) of account %r carry no Context%s and are not in this process's "
            "record of the sessions it opened: not deleted (exclusive_account cannot prove them ours: "
            "another live controller seen from the same address looks the same); they expire on the "
            "BMC's inactivity timeout",
            self.origin,
            sweep.unmarked,
            self.settings.username,
            f" (our own session's address: {clip(address)})" if address else "",
        )

    def _context_not_kept(self) -> None:
        """Our own session shows no Context: say once what that means for sessions a crash leaves."""
        if self._unmarked_warned or not self.marker:
            return
        self._unmarked_warned = True
        log.warning(
            "%s: the BMC does not keep the Redfish Session.Context devicectl sets on its sessions: a "
            "session a killed devicectl process leaves here is deleted only when this process's "
            "identity record shows it opened it (account %r); any other stays until the BMC expires it",
            self.origin,
            self.settings.username,
        )

    async def _read(self, path: str, *, missing_ok: bool = False) -> dict[str, Any]:
        reply = await self._send("GET", path, None, _SWEEP_AUTH.get())
        if reply.status == 404 and missing_ok:
            return {}
        if reply.status >= 300:
            raise error_for_response(self.origin, "GET", path, reply)
        body = reply.dict
        return body if isinstance(body, dict) else {}

    async def _delete(self, uri: str) -> int:
        """DELETE one leftover session (404: already gone); 1 when it was deleted. Never raises."""
        try:
            reply = await self._send("DELETE", uri, None, _SWEEP_AUTH.get())
        except RedfishError as exc:
            log.warning("%s: could not delete a leftover Redfish session: %s", self.origin, clip(str(exc)))
            return 0
        if reply.status < 300 or reply.status == 404:
            self._forget(uri)
            self.sessions_reaped += reply.status < 300
            log.info("%s: deleted a Redfish session an earlier process left open", self.origin)
            return 1
        log.warning(
            "%s: could not delete a leftover Redfish session: HTTP %d (user %r)",
            self.origin,
            reply.status,
            self.settings.username,
        )
        return 0


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


def _answer_lost(exc: BaseException) -> bool:
    """Whether a login that raised `exc` may have made a session on the BMC (its answer lost)."""
    if isinstance(exc, ConnectionFailedError | RequestTimeoutError | DeadlineExceededError | GatewayError):
        return bool(getattr(exc, "sent", True))  # sent, and no answer of the BMC's came back
    # a cancel or a raw failure mid-request: whether the BMC got it is not known
    return isinstance(exc, asyncio.CancelledError | TimeoutError | OSError)


def _refuses_context(error: RedfishHTTPError) -> bool:
    """Whether a refused login names the `Context` property (unknown, or not accepted)."""
    if error.status != 400:
        return False
    for info in error.infos:
        if "Context" in info.args or any(r.rstrip("/").endswith("/Context") for r in info.related):
            return True
    return False
