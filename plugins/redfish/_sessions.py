"""Redfish sessions an earlier devicectl process left open on a BMC: found by their marker, deleted.

A SIGKILLed process cannot log out, and BMC session tables are small (GB200: 4). A process may die
anywhere, between its login and the first request that could record anything included, so the
session itself says whose it is: every login sends the DMTF `Session.Context`
`devicectl/<client id>/<boot>` (the client id is the controller's instance id, stable across its
restarts; the boot is random per process). The BMC stores it and shows it on the session resource
(bmcweb: `handleSessionCollectionPost` and `fillSessionObject`, redfish-core/lib/redfish_sessions.hpp).

The first login of a process to a BMC is followed by a sweep: the session collection is listed
and each member read; a session whose Context names this client id and another boot is an earlier
process's and is deleted. Session URIs recorded in device state are deleted too, unless the
session now shows someone else's Context or account (iDRAC reuses session ids). A session without
a Context is never taken for ours on a shared account: behind NAT another controller's or tool's
live session looks the same. Only where the device says its account is devicectl's alone
(`exclusive_account`) are sessions of that account without a Context leftovers as well (from our
own session's client address when the BMC shows it). A BMC that does not keep Context (or refuses
it at login, `plugins.redfish._login`) is named in a warning once, with that option.

When the login is refused with `SessionLimitExceeded`, the sweep runs first with Basic auth on its
own requests only (the client's auth mode is not switched, so no other request goes out with
Basic) and the login is tried once more; if the table is still full, the error gives the BMC's
count and who holds the sessions. Basic auth replaces the session only when the device allows it
(`basic_fallback`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from redfish.aio import AsyncRedfishClient
from redfish.aio import exceptions as dmtf
from redfish.aio.response import AsyncRestResponse

from plugins.redfish._config import ConnectionSettings
from plugins.redfish._errors import RedfishError, RedfishHTTPError, SessionLimitError, error_for_response
from plugins.redfish._telemetry import SESSION_LIMIT
from plugins.redfish._transport import BmcTransport, deadline_scope

log = logging.getLogger("plugins.redfish._client")

SESSIONS_PATH = "/redfish/v1/SessionService/Sessions"
MARKER_PREFIX = "devicectl/"
#: session members read per sweep at most (real tables hold 4 to 64)
MAX_SWEPT = 64
#: time a sweep after login may take (its own budget, not a request's)
SWEEP_SECONDS = 30.0
#: the Basic `Authorization` header of a sweep that runs without a session (its task alone)
_SWEEP_AUTH: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("sweep", default=None)


def session_marker(client_id: str, boot: str) -> str:
    """The `Session.Context` of this process's sessions."""
    return f"{MARKER_PREFIX}{client_id}/{boot}"


def marker_parts(context: object) -> tuple[str, str] | None:
    """(client id, boot) of a devicectl marker, None for any other Context."""
    if not isinstance(context, str) or not context.startswith(MARKER_PREFIX):
        return None
    client_id, sep, boot = context[len(MARKER_PREFIX) :].rpartition("/")
    return (client_id, boot) if sep and client_id and boot else None


@dataclass
class Sweep:
    """What one look at a BMC's session table found."""

    #: sessions listed in the collection
    listed: int = 0
    #: earlier processes' sessions deleted (or already gone)
    deleted: int = 0
    #: sessions left alone, by (account, client address, whose Context)
    others: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    #: of those, sessions of our account without a Context (ours only if the account is exclusive)
    unmarked: int = 0

    def holders(self) -> str:
        """Who holds the sessions left alone, in a few words."""
        parts = []
        for (user, address, context), n in self.others.most_common(4):
            who = f"{n} of account {user!r}" + (f" from {address}" if address else "")
            parts.append(who + (f" (Context {context!r})" if context else ""))
        return "; ".join(parts) or ("no one" if not self.listed else "sessions that could not be read")


class LeftoverSessions:
    """The part of `BmcClient` that finds and deletes sessions earlier processes left behind."""

    settings: ConnectionSettings
    marker: str
    transport: BmcTransport
    _redfish: AsyncRedfishClient
    _auth: str | None
    _login_lock: asyncio.Lock

    def __init__(self) -> None:
        #: session URIs from device state that are not ours: an older release's record, to delete
        self._stale: set[str] = set()
        self._reaped: set[str] = set()
        self._swept = False
        self._sweeping: asyncio.Task[None] | None = None
        self._basic_sweep: asyncio.Task[Sweep | None] | None = None
        #: False once the BMC refused to list its sessions (not asked again by this process)
        self._listable = True
        self._unmarked_warned = False
        self.sessions_reaped = 0

    @property
    def origin(self) -> str:
        return self.settings.origin

    async def _send(self, method: str, path: str, body: Any, headers: Any) -> AsyncRestResponse:
        raise NotImplementedError

    def _map_dmtf(self, exc: dmtf.RedfishError, method: str, path: str) -> RedfishError:
        raise NotImplementedError

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
            log.info(
                "%s: Redfish session limit reached; deleted %d session(s) earlier devicectl "
                "processes left open",
                self.origin,
                sweep.deleted,
            )
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
        if sweep is None:
            return "the BMC's Redfish session table is full (SessionLimitExceeded; its sessions unreadable)"
        mine = f"this controller's (Context {self.marker.rpartition('/')[0]}/…)"
        if sweep.deleted:
            ours = (
                f"{sweep.deleted} of them earlier processes of {mine} were deleted and the table "
                "filled up again before the next login"
            )
        else:
            ours = f"none of them {mine}"
        table = (
            f"the BMC's Redfish session table is full: {sweep.listed} of {sweep.listed} sessions open "
            f"(its limit: it refused one more with SessionLimitExceeded), {ours}; held by {sweep.holders()}"
        )
        if sweep.unmarked and not self.settings.exclusive_account:
            table += (
                f"; {sweep.unmarked} of account {self.settings.username!r} carry no Context (an earlier "
                "devicectl's on a BMC that does not keep it?): set `exclusive_account = true` if the "
                "account is devicectl's alone"
            )
        return table

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
            log.warning("%s: could not read the BMC's Redfish sessions: %s", self.origin, exc)
            return None

    @property
    def session_uri(self) -> str:
        """The path of our Redfish session ('' without one). Never the token."""
        if self._auth != "session":
            return ""
        # NOTE: AsyncRedfishClient keeps the session's Location only in a private attribute; read
        # defensively (an absent attribute just means nothing is recorded)
        location = getattr(self._redfish, "_session_location", None)
        return urlsplit(location).path.rstrip("/") if isinstance(location, str) else ""

    def note_sessions(self, uris: list[str]) -> None:
        """Session URIs recorded in a device's state: any that is not ours now is a leftover."""
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
        if (self._swept and not self._stale) or self._sweeping is not None:
            return
        self._sweeping = asyncio.get_running_loop().create_task(self._background_sweep())

    async def _background_sweep(self) -> None:
        try:
            with deadline_scope(time.monotonic() + SWEEP_SECONDS):
                await self._sweep()
        except RedfishError as exc:
            log.warning("%s: could not read the BMC's Redfish sessions: %s", self.origin, exc)
        finally:
            self._sweeping = None

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
        if self._listable:
            doomed = await self._examine(listing, own, sweep)
        else:
            doomed = [u for u in self._stale if u != own]  # recorded in device state: ours
        self._reaped |= self._stale
        self._stale.clear()
        self._swept = True
        for uri in doomed:
            self._reaped.add(uri)
            sweep.deleted += await self._delete(uri)
        return sweep

    async def _examine(self, listing: dict[str, Any], own: str, sweep: Sweep) -> list[str]:
        """Read each listed session (and our own); the earlier processes' among them."""
        members = listing.get("Members")
        ids = (
            [m.get("@odata.id") for m in members if isinstance(m, dict)] if isinstance(members, list) else []
        )
        uris = [urlsplit(u).path.rstrip("/") for u in ids if isinstance(u, str)]
        sweep.listed = len(uris)
        others = [u for u in uris if u != own][:MAX_SWEPT]
        # our own session as the login's reply showed it (bmcweb answers with the session), else read
        own_doc = self.transport.login_reply if own else {}
        if own and "ClientOriginIPAddress" not in own_doc and "Context" not in own_doc:
            own_doc = await self._read(own, missing_ok=True)
        docs = await asyncio.gather(*(self._read(u, missing_ok=True) for u in others))
        found = dict(zip(others, docs, strict=True))
        if own and "Context" not in own_doc:
            self._context_not_kept()
        # where our own session shows the address the BMC sees us from, only that address's
        address = own_doc.get("ClientOriginIPAddress") if own else None
        doomed = []
        for uri, doc in found.items():
            if not doc:
                continue  # gone meanwhile
            if self._leftover(uri, doc, address):
                doomed.append(uri)
                continue
            user, address_, context = (
                str(doc.get(k) or "") for k in ("UserName", "ClientOriginIPAddress", "Context")
            )
            sweep.others[(user, address_, context)] += 1
            sweep.unmarked += not context and user == self.settings.username
        return doomed

    def _leftover(self, uri: str, doc: dict[str, Any], address: object) -> bool:
        """Whether a session (not ours now) is one an earlier process of this client left."""
        context = doc.get("Context")
        mine = marker_parts(self.marker)
        theirs = marker_parts(context)
        if theirs is not None and mine is not None:
            return theirs[0] == mine[0] and theirs[1] != mine[1]
        if context:
            return False  # someone else's marker
        user = doc.get("UserName")
        if user is not None and user != self.settings.username:
            return False  # another account's: a BMC that reuses session ids gave it a recorded URI
        if uri in self._stale:
            return True  # recorded in device state by this controller
        # NOTE: no Context on a shared account is anyone's: behind NAT another controller's live
        # session shows our account and address too. Only an account that is devicectl's alone
        # makes it ours.
        if not self.settings.exclusive_account or user is None:
            return False
        return not address or doc.get("ClientOriginIPAddress") == address

    def _context_not_kept(self) -> None:
        """Our own session shows no Context: say once what that means for sessions a crash leaves."""
        if self._unmarked_warned or not self.marker:
            return
        self._unmarked_warned = True
        if self.settings.exclusive_account:
            log.info(
                "%s: the BMC does not keep the Redfish Session.Context devicectl sets; sessions of "
                "account %r without one are taken for earlier devicectl processes' (exclusive_account)",
                self.origin,
                self.settings.username,
            )
            return
        log.warning(
            "%s: the BMC does not keep the Redfish Session.Context devicectl sets on its sessions: a "
            "session a killed devicectl process leaves here cannot be told from other clients' and stays "
            "until the BMC expires it; set `exclusive_account = true` for this device if account %r is "
            "used by devicectl alone",
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
            log.warning("%s: could not delete a leftover Redfish session: %s", self.origin, exc)
            return 0
        if reply.status < 300 or reply.status == 404:
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
