"""Redfish sessions of one simulated BMC: a small table with a limit and an inactivity timeout."""

from __future__ import annotations

import base64
import binascii
import secrets
import time
from dataclasses import dataclass, field

from bmcsim._account_store import AccountStore


@dataclass(slots=True)
class Session:
    """One Redfish session. The token is a secret: never log it."""

    id: str
    token: str = field(repr=False)
    username: str
    created: float
    last_used: float
    #: the client's `Context` string from the login POST (None when it sent none)
    context: str | None = None
    #: the address the login came from (`ClientOriginIPAddress`)
    client: str = ""


class SessionStore:
    """Sessions keyed by token, with the BMC's accounts, limit and inactivity timeout.

    Real BMCs keep few sessions (GB200: 4 client connections; Supermicro 16), so `limit` defaults to 4
    and a full table answers `SessionLimitExceeded`. `timeout` is seconds of inactivity, refreshed by
    every authenticated request, as DSP0266 requires.
    """

    def __init__(self, username: str, password: str, *, limit: int = 4, timeout: float = 1800.0) -> None:
        #: the BMC's accounts; the configured user is the Administrator account "1"
        self.accounts = AccountStore(username, password)
        self.username = username
        self.limit = limit
        self.timeout = timeout
        self._by_token: dict[str, Session] = {}
        #: bumped on every change, for the collection's ETag
        self.revision = 0

    def credentials_ok(self, username: object, password: object) -> bool:
        """Whether a user name and password are an enabled account's (constant-time compare)."""
        return self.accounts.check(username, password) is not None

    def basic_user(self, header: str) -> str | None:
        """The account name an `Authorization: Basic ...` header value proves, or None."""
        try:
            decoded = base64.b64decode(header.split(" ", 1)[1], validate=True).decode()
        except (IndexError, ValueError, binascii.Error, UnicodeDecodeError):
            return None
        user, sep, password = decoded.partition(":")
        return user if sep and self.credentials_ok(user, password) else None

    def basic_ok(self, header: str) -> bool:
        """Check an `Authorization: Basic ...` header value."""
        return self.basic_user(header) is not None

    def purge_expired(self, now: float | None = None) -> int:
        """Drop sessions idle longer than `timeout`; returns how many were dropped."""
        now = time.monotonic() if now is None else now
        stale = [tok for tok, s in self._by_token.items() if now - s.last_used > self.timeout]
        for tok in stale:
            del self._by_token[tok]
        if stale:
            self.revision += 1
        return len(stale)

    def is_full(self) -> bool:
        """Whether a new login would exceed the limit."""
        return len(self._by_token) >= self.limit

    def create(self, username: str | None = None, *, context: str | None = None, client: str = "") -> Session:
        """Open a session for an account (default: the BMC's user); the caller checks the limit first."""
        now = time.monotonic()
        session = Session(
            # unguessable ids: a session URI must not let one client find another's session
            id=secrets.token_hex(6),
            token=secrets.token_urlsafe(24),
            username=username or self.username,
            created=now,
            last_used=now,
            context=context,
            client=client,
        )
        self._by_token[session.token] = session
        self.revision += 1
        return session

    def touch(self, token: str) -> Session | None:
        """The live session for `token`, refreshed; None when unknown or expired."""
        session = self._by_token.get(token)
        if session is None:
            return None
        now = time.monotonic()
        if now - session.last_used > self.timeout:
            del self._by_token[token]
            self.revision += 1
            return None
        session.last_used = now
        return session

    def id_of(self, token: str) -> str | None:
        """The id of the session `token` belongs to (expired or not), without refreshing it."""
        session = self._by_token.get(token)
        return None if session is None else session.id

    def by_id(self, session_id: str) -> Session | None:
        """Look a session up by its resource id."""
        for session in self._by_token.values():
            if session.id == session_id:
                return session
        return None

    def delete(self, session_id: str) -> bool:
        """Log a session out; False when it does not exist."""
        session = self.by_id(session_id)
        if session is None:
            return False
        del self._by_token[session.token]
        self.revision += 1
        return True

    def expire_all(self) -> int:
        """Forget every session at once (so clients meet 401 and must log in again)."""
        count = len(self._by_token)
        self._by_token.clear()
        self.revision += 1
        return count

    def ids(self) -> list[str]:
        """Ids of the live sessions, oldest first."""
        return [s.id for s in self._by_token.values()]

    def __len__(self) -> int:
        return len(self._by_token)
