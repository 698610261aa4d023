"""Whose a Redfish session is: the `Session.Context` marker our logins send, and the record of
the sessions this process's identity opened (`plugins.base.identity`), written right after each
login, before the session is used. Only these prove a session ours (`plugins.redfish._client.sessions`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging

from redfish.aio import AsyncRedfishClient

from plugins.base.identity import ProcessIdentity
from plugins.base.schema import clip
from plugins.redfish._client.uris import session_member

log = logging.getLogger("plugins.redfish._client.client")

MARKER_PREFIX = "devicectl/"


def session_marker(client_id: str, boot: str) -> str:
    """The `Session.Context` of this process's sessions."""
    return f"{MARKER_PREFIX}{client_id}/{boot}"


def marker_parts(context: object) -> tuple[str, str] | None:
    """(client id, boot) of a devicectl marker, None for any other Context."""
    if not isinstance(context, str) or not context.startswith(MARKER_PREFIX):
        return None
    client_id, sep, boot = context[len(MARKER_PREFIX) :].rpartition("/")
    return (client_id, boot) if sep and client_id and boot else None


class SessionRecord:
    """The part of `BmcClient` that keeps the identity's record of our sessions on one BMC."""

    identity: ProcessIdentity | None
    _redfish: AsyncRedfishClient
    _auth: str | None
    #: our session as written in the identity's record
    _recorded: str
    #: the last `Location` checked and its path ('' when not a member): asked on every request
    _location: tuple[str, str] = ("", "")

    @property
    def origin(self) -> str:
        raise NotImplementedError

    @property
    def session_uri(self) -> str:
        """The path of our Redfish session ('' without one, or when the BMC's `Location` is not a
        member of its session collection). Never the token."""
        return self._session_path() if self._auth == "session" else ""

    def _session_path(self) -> str:
        """`session_uri` of the session the last login opened (before it is put to use)."""
        # NOTE: AsyncRedfishClient keeps the session's Location only in a private attribute; read
        # defensively (an absent attribute just means nothing is recorded)
        location = getattr(self._redfish, "_session_location", None)
        if not isinstance(location, str):
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
        location = getattr(self._redfish, "_session_location", None)
        if not uri and isinstance(location, str):
            # NOTE: the library DELETEs the login's Location at logout: one that is not a member of
            # the session collection is never sent anything (the session expires on the BMC)
            self._redfish._session_location = None
            log.warning(
                "%s: the BMC's login answer puts our Redfish session at %s, outside its session "
                "collection: it is neither recorded nor deleted at logout",
                self.origin,
                clip(location, 200),
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
