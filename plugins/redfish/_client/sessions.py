"""Redfish sessions an earlier devicectl process left open on a BMC: found by their marker, deleted.

A SIGKILLed process cannot log out, and BMC session tables are small (GB200: 4). A process may die
anywhere, between its login and the first request that could record anything included, so the
session itself says whose it is: every login sends the DMTF `Session.Context`
`devicectl/<client id>/<boot>` (`plugins.redfish._client.session_record`), which the BMC shows on the
session (bmcweb: `handleSessionCollectionPost`, `fillSessionObject`, redfish_sessions.hpp).

The first login of a process to a BMC is followed by a sweep: the session collection is listed
and each member read; a session whose Context names this client id and another boot was opened by
an earlier holder of the lease we hold now, so by a dead process, and is deleted. The identity's
record (written right after each login, before the session is used) lists the sessions its
holders opened and did not delete: those are ours too, unless the session now shows someone
else's Context or account (iDRAC reuses session ids). Nothing else is ever deleted: not a URI a
device state names (a request's state is a caller's word, not proof: it only asks for a sweep),
and not a session without a Context, whatever `exclusive_account` says: behind NAT another live
controller's session shows our account and address too. A BMC that does not keep Context (or
refuses it at login, `plugins.redfish._client.login`) is named in a warning once.

Every URI is checked before a request goes to it (`plugins.redfish._client.uris`): recorded ones, our
own `Location`, the members the BMC lists. A session is exactly one segment under the collection.

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
from typing import Any

from redfish.aio import exceptions as dmtf
from redfish.aio.response import AsyncRestResponse

from plugins.base.schema import clip
from plugins.redfish._client.session_record import SessionRecord, marker_parts, session_marker
from plugins.redfish._client.session_table import Sweep, full_table
from plugins.redfish._client.uris import SESSIONS_PATH, session_member
from plugins.redfish._config import ConnectionSettings
from plugins.redfish._wire.errors import RedfishError, RedfishHTTPError, SessionLimitError, error_for_response
from plugins.redfish._wire.telemetry import SESSION_LIMIT
from plugins.redfish._wire.transport import BmcTransport, deadline_scope

log = logging.getLogger("plugins.redfish._client.client")

__all__ = ["SESSIONS_PATH", "LeftoverSessions", "Sweep", "marker_parts", "session_marker"]

#: session members read per sweep at most (real tables hold 4 to 64)
MAX_SWEPT = 64
#: time a sweep after login may take (its own budget, not a request's)
SWEEP_SECONDS = 30.0
#: waits before a failed sweep after login is tried again (then it is left to the next login)
SWEEP_RETRY_WAITS = (1.0, 5.0, 15.0, 60.0, 300.0)
#: the Basic `Authorization` header of a sweep that runs without a session (its task alone)
_SWEEP_AUTH: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("sweep", default=None)


class LeftoverSessions(SessionRecord):
    """The part of `BmcClient` that finds and deletes sessions earlier processes left behind."""

    settings: ConnectionSettings
    marker: str
    transport: BmcTransport
    _login_lock: asyncio.Lock

    def __init__(self) -> None:
        #: session URIs a device state names that are not ours now: a reason to sweep, not proof
        self._stale: set[str] = set()
        self._recorded = ""
        self._reaped: set[str] = set()
        self._swept = False
        self._sweeping: asyncio.Task[None] | None = None
        self._basic_sweep: asyncio.Task[Sweep | None] | None = None
        #: False once the BMC refused to list its sessions (not asked again by this process)
        self._listable = True
        self._unmarked_warned = False
        self._unproven_warned = False
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
        if (self._swept and not self._stale) or self._sweeping is not None:
            return
        self._sweeping = asyncio.get_running_loop().create_task(self._background_sweep())

    async def _background_sweep(self) -> None:
        # NOTE: a failed sweep (a busy BMC, a timeout under a wave) is tried again: the login that
        # started it may be this process's only one here, and a leftover would stay open
        try:
            for wait in (*SWEEP_RETRY_WAITS, None):
                try:
                    with deadline_scope(time.monotonic() + SWEEP_SECONDS):
                        await self._sweep()
                    return
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
        own_doc = self.transport.login_reply if own else {}
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
            return theirs[0] == mine[0] and theirs[1] != mine[1]
        if context:
            return False  # someone else's marker
        user = doc.get("UserName")
        if user is not None and user != self.settings.username:
            return False  # another account's: a BMC that reuses session ids gave it a recorded URI
        # NOTE: no Context is anyone's: behind NAT another live controller's session shows our
        # account and address too. Only our identity's own record makes it ours.
        return uri in proven

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
