"""Redfish sessions a crashed devicectl process left open on a BMC, found by URI and deleted.

A SIGKILLed process cannot log out, and BMC session tables are small (GB200: 4). The device state
records the URI of the session in use (never the token); the next process deletes every recorded
URI that is not its own session after its first login, or, when that login is refused with
`SessionLimitExceeded`, before trying once more. Only recorded sessions are ever deleted: another
tool's sessions on the same account are left alone. Basic auth replaces the session only when the
device allows it (`basic_fallback`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import urlsplit

from redfish.aio import AsyncRedfishClient
from redfish.aio import exceptions as dmtf
from redfish.aio.response import AsyncRestResponse

from plugins.redfish._config import ConnectionSettings
from plugins.redfish._errors import RedfishError, RedfishHTTPError, SessionLimitError
from plugins.redfish._transport import deadline_scope

log = logging.getLogger("plugins.redfish._client")


class LeftoverSessions:
    """The part of `BmcClient` that finds and deletes sessions a previous process left behind."""

    settings: ConnectionSettings
    _redfish: AsyncRedfishClient
    _auth: str | None
    _login_lock: asyncio.Lock

    def __init__(self) -> None:
        #: session URIs from device state that are not ours: a crashed process's, to delete
        self._stale: set[str] = set()
        self._reaped: set[str] = set()
        self.sessions_reaped = 0

    @property
    def origin(self) -> str:
        return self.settings.origin

    async def _send(self, method: str, path: str, body: Any, headers: Any) -> AsyncRestResponse:
        raise NotImplementedError

    def _map_dmtf(self, exc: dmtf.RedfishError, method: str, path: str) -> RedfishError:
        raise NotImplementedError

    async def _session_table_full(self, error: RedfishHTTPError) -> None:
        """`SessionLimitExceeded` at login: free our own leftovers, else Basic only when allowed.

        NOTE: leaked sessions fill small BMC session tables (iDRAC RAC0218, redfish.md §3). The only
        sessions deleted are those recorded in device state as opened by this controller (a crashed
        process's); other clients' sessions on the same account are never touched.
        """
        if self._stale:
            log.info(
                "%s: Redfish session limit reached; deleting %d session(s) a previous devicectl "
                "process left open",
                self.origin,
                len(self._stale),
            )
            await self._redfish.login(auth="basic")  # a DELETE needs some authentication
            self._auth = "basic"
            try:
                await self._reap_stale()
            finally:
                self._auth = None
            try:
                await self._redfish.login(auth="session")
            except dmtf.RedfishHTTPError as exc:
                again = self._map_dmtf(exc, "POST", "/redfish/v1/SessionService/Sessions")
                if not (isinstance(again, RedfishHTTPError) and again.has_message("SessionLimitExceeded")):
                    raise again from exc
                error = again
            else:
                self._auth = "session"
                return
        if self.settings.basic_fallback:
            log.warning("%s: Redfish session limit reached; using Basic auth (basic_fallback)", self.origin)
            await self._redfish.login(auth="basic")
            self._auth = "basic"
            return
        raise SessionLimitError(
            f"{self.origin}: the BMC's Redfish session table is full (SessionLimitExceeded) and none of "
            "its sessions is one this controller left behind; free a session on the BMC, or set "
            "`basic_fallback = true` for this device to use Basic auth",
            status=error.status,
            method="POST",
            path=error.path,
            infos=error.infos,
        )

    @property
    def session_uri(self) -> str:
        """The path of our Redfish session ('' without one). Never the token."""
        if self._auth != "session":
            return ""
        # NOTE: AsyncRedfishClient keeps the session's Location only in a private attribute; read
        # defensively (an absent attribute just means nothing is recorded, as before this feature)
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

    async def reap_if_logged_in(self, deadline: float) -> None:
        """Delete leftover sessions now when a session is already open (else at the next login)."""
        if self._stale and self._auth == "session":
            with deadline_scope(deadline):
                async with self._login_lock:
                    await self._reap_stale()

    async def _reap_stale(self) -> None:
        """DELETE every recorded leftover session (404: already gone). Best effort, never raises."""
        s = self.settings
        while self._stale:
            uri = self._stale.pop()
            self._reaped.add(uri)
            try:
                reply = await self._send("DELETE", uri, None, None)
            except RedfishError as exc:
                log.warning("%s: could not delete a leftover Redfish session: %s", self.origin, exc)
                continue
            if reply.status < 300 or reply.status == 404:
                self.sessions_reaped += reply.status < 300
                log.info("%s: deleted a Redfish session a previous process left open", self.origin)
            else:
                log.warning(
                    "%s: could not delete a leftover Redfish session: HTTP %d (user %r)",
                    self.origin,
                    reply.status,
                    s.username,
                )
