"""The one seam under DMTF's `redfish.aio`: `DmtfClient` holds the library's `AsyncRedfishClient`
and uses only its public interface (its constructor, `login`, `logout`, `get`, `head`, `post`,
`patch`, `delete`, `AsyncRestResponse` and the exception classes). No other module under
`plugins/` constructs the library's client or knows how it keeps its credentials.

What the library does here: every request `BmcClient` does not send straight through the transport
(logins' service-root GET and session POST, DELETEs, HEADs, Basic-auth requests, unauthenticated
pings, the logout), with its headers, its URL rules (same origin, no credentials, dot segments
resolved) and its reply objects; Basic auth (`login(auth="basic")`); the logout of a session
(`logout()` DELETEs the session it was given at construction).

What the adapter does itself, because the library has no public way for it:

- the session login. The library's `login()` keeps the token and the session's `Location` to
  itself (no public getter), and a logged-in `BmcClient` sends its GETs, PATCHes and POSTs with the
  token straight through the transport (`send`, ~10% of a call's CPU less). So the login is the
  library's own two requests made through its public API from a client holding no credentials
  (`GET` the service root for `Links.Sessions`, `POST` the credentials there); the token
  (`X-Auth-Token`) and `Location` are read from the public reply, kept here (`token`, `location`),
  and handed to a new library client through its public constructor (`session_key`,
  `session_location`), which then sends them and DELETEs the session at `logout()`;
- the re-login after a 401 (`renew`, single flight by token): the library renews a session only
  for a client it logged in itself; the clients built here hold no username, so the library never
  re-logs in behind our back and `token` is always the one in use;
- the request line of a direct call (`target`): the library's URL rules (the base URL joined with
  the path, the same origin, no credentials) without yarl for the plain paths BMCs use.

Importing `redfish.aio` runs the package's `redfish/__init__`, which loads the library's synchronous
client (`requests`, `urllib3`): a serving controller pays ~0.1 s once at start and a few MB of
memory it never uses (figures in docs/redfish.md). The library offers no public way around it;
the cost is accepted.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import warnings
from collections.abc import Mapping
from typing import Any

from redfish.aio import AsyncRedfishClient, AsyncRestRequest, AsyncRestResponse
from redfish.aio.exceptions import (
    RedfishAuthenticationError,
    RedfishError,
    RedfishHTTPError,
    RedfishInvalidTargetError,
    RedfishPasswordChangeRequiredError,
    RedfishProtocolError,
)
from yarl import URL

__all__ = ["DmtfClient", "request_target"]

SERVICE_ROOT = "/redfish/v1/"
#: where sessions are made when the service root does not say (DSP0266)
SESSIONS_PATH = "/redfish/v1/SessionService/Sessions"
#: a path the library's URL join sends as it is: absolute, one leading slash, only characters a
#: path may hold unencoded (no "%": the join normalises escapes; dot segments are ruled out apart)
_PLAIN_PATH = re.compile(r"/(?!/)[A-Za-z0-9\-._~!$&'()*+,;=:@/]*")
#: plain paths seen lately: a fleet's BMCs are asked for the same few paths again and again, and a set
#: lookup costs a tenth of the match (emptied when full, so a path seen once long ago costs nothing)
_PLAIN_SEEN: set[str] = set()
_PLAIN_SEEN_MAX = 4096


class DmtfClient:
    """One BMC's `AsyncRedfishClient`, logged in by session or Basic auth (see the module docstring).

    Args:
        url: the BMC's base URL (`https://host:port`).
        username, password: the BMC account.
        transport: what the library sends through (`plugins.redfish._wire.transport.BmcTransport`:
            `aiohttp.ClientSession.request`'s contract).
        context: the `Session.Context` sent with every session login ('' for none).
    """

    def __init__(
        self, url: str, username: str | None, password: str | None, transport: Any, context: str = ""
    ):
        self._url = url
        self._username = username
        self._password = password
        self._transport = transport
        #: the `Session.Context` of our logins (set to '' when the BMC refuses it)
        self.context = context
        self._base = URL(url).with_path("/")
        #: the library client requests go through: no credentials until a login
        self._client = self._anonymous()
        self._lock = asyncio.Lock()
        #: our session's token (None without a session); never logged, never stored
        self.token: str | None = None
        #: our session's `Location` as the BMC gave it (None without one, or once disowned)
        self.location: str | None = None
        #: session logins that succeeded so far (a write's 401 logs in again only if none came since)
        self.logins = 0
        #: the last session login's reply body (the session as the BMC shows it; no token)
        self.login_reply: dict[str, Any] = {}

    def _anonymous(self) -> AsyncRedfishClient:
        return AsyncRedfishClient(self._url, session=self._transport)

    # ---- logging in and out -------------------------------------------------------------------

    async def login(self, auth: str) -> None:
        """Log in by `auth`: `session` or `basic`; a login held before is logged out first (the library's
        own rule). Raises the library's exceptions (`RedfishAuthenticationError` for 401/403,
        `RedfishPasswordChangeRequiredError`, `RedfishHTTPError`, `RedfishProtocolError`)."""
        if auth not in ("session", "basic"):
            raise ValueError(f"unsupported Redfish authentication {auth!r}")
        async with self._lock:
            await self._logout_locked()
            if auth == "basic":
                client = AsyncRedfishClient(
                    self._url, self._username, self._password, session=self._transport
                )
                await client.login(auth="basic")
                self._client = client
                return
            await self._open_session()

    async def renew(self, expired: str) -> bool:
        """Log in again after `expired` (our token) met a 401, unless a concurrent caller already
        did (single flight, by token); whether a token is held now. The rejected session is not
        deleted (the BMC no longer knows it)."""
        async with self._lock:
            if self.token != expired:
                return self.token is not None
            self._drop()
            await self._open_session()
            return True

    async def logout(self) -> None:
        """DELETE our session (the library's `logout()`; a 401 or 404 means it is gone already)."""
        async with self._lock:
            await self._logout_locked()

    def disown_location(self) -> None:
        """Never DELETE our session's `Location` (one outside the session collection): the session
        is kept by its token alone and expires on the BMC."""
        if self.token is not None and self.location is not None:
            self.location = None
            self._client = AsyncRedfishClient(self._url, session=self._transport, session_key=self.token)

    async def _logout_locked(self) -> None:
        client = self._client
        self._drop()
        await client.logout()  # DELETEs the session it was built with, if any; raises on a refusal

    def _drop(self) -> None:
        self.token = self.location = None
        self._client = self._anonymous()

    async def _open_session(self) -> None:
        """POST the credentials to the session collection the service root names (the library's
        own login, through its public API); keep the token and `Location` the reply gives."""
        anonymous = self._client
        root = await anonymous.get(SERVICE_ROOT)
        target = SESSIONS_PATH
        if root.status == 401:
            warnings.warn(
                "the Redfish service answers 401 for its service root (it must not); logging in at "
                f"{SESSIONS_PATH}",
                stacklevel=2,
            )
        else:
            _raise_for_login(root)
            body = root.dict
            if not isinstance(body, dict):
                raise RedfishProtocolError(f"Redfish resource at {SERVICE_ROOT} is not a JSON object")
            named = _path(body, "Links", "Sessions", "@odata.id")
            if isinstance(named, str) and named.strip():
                target = named
        credentials = {"UserName": self._username, "Password": self._password}
        if self.context:
            credentials["Context"] = self.context  # on the POST itself, wherever the root names it
        reply = await anonymous.post(target, body=credentials)
        reply = _without_body(reply)  # the credentials stay out of the reply's request record
        changing = _password_change(reply)
        if not 200 <= reply.status < 300:
            _raise_for_login(reply)
        token = reply.getheader("X-Auth-Token")
        location = reply.getheader("Location")
        try:
            answer = reply.dict
        except RedfishProtocolError:
            answer = None  # some services answer a login with no JSON: only its headers count
        session = answer if isinstance(answer, dict) else {}
        if not isinstance(location, str) or not location.strip():
            location = session.get("@odata.id")
        if not (isinstance(token, str) and token.strip() and isinstance(location, str) and location.strip()):
            raise RedfishProtocolError("Redfish session response is missing authentication data")
        try:
            request_target(self._base, location)
            owned: str | None = location
        except RedfishInvalidTargetError:
            # NOTE: a `Location` at another origin (or holding credentials) is never sent anything:
            # the session is kept by its token (`BmcClient` disowns it and says so); raising here
            # would leave this session open and log in again, one more session per attempt
            owned = None
        self._client = AsyncRedfishClient(
            self._url, session=self._transport, session_key=token, session_location=owned
        )
        self.token, self.location = token, location
        self.logins += 1
        self.login_reply = session
        if changing is not None:
            # NOTE: the session is ours and of no use until the password is changed: DELETEd now
            # (best effort; a refusal leaves it to expire), not held as the library would hold it
            with contextlib.suppress(RedfishError):
                await self._logout_locked()
            raise RedfishPasswordChangeRequiredError(changing or None)

    # ---- requests -----------------------------------------------------------------------------

    async def request(
        self, method: str, path: str, body: Any, headers: Mapping[str, str]
    ) -> AsyncRestResponse:
        """One request through the library, with our current credentials."""
        client = self._client
        if method == "GET":
            return await client.get(path, headers=headers)
        if method == "PATCH":
            return await client.patch(path, body=body, headers=headers)
        if method == "POST":
            return await client.post(path, body=body, headers=headers)
        if method == "DELETE":
            return await client.delete(path, headers=headers)
        if method == "HEAD":
            return await client.head(path, headers=headers)
        raise ValueError(f"unsupported method {method}")

    def target(self, path: str) -> str:
        """What goes on the request line for `path` (see `request_target`)."""
        if path in _PLAIN_SEEN:
            return path
        if _PLAIN_PATH.fullmatch(path) is not None and "/." not in path:
            if len(_PLAIN_SEEN) >= _PLAIN_SEEN_MAX:
                _PLAIN_SEEN.clear()
            _PLAIN_SEEN.add(path)
            return path  # the plain paths BMCs use, without a second call per request
        return request_target(self._base, path)


def request_target(base: URL, path: str) -> str:
    """The request line for `path` under `base` (`https://host:port/`): the library's URL rules (the
    path joined to the base, dot segments resolved, encoded; the same origin and no credentials, else
    `RedfishInvalidTargetError`), without building yarl URLs for the plain paths BMCs use."""
    if _PLAIN_PATH.fullmatch(path) is not None and "/." not in path:
        return path  # what the join makes of it
    try:
        url = base.join(URL(path))
        if url.user is not None or url.password is not None:
            raise RedfishInvalidTargetError("Target cannot contain credentials")
        if (url.scheme, url.host, url.port) != (base.scheme, base.host, base.port):
            raise RedfishInvalidTargetError("Target must use the configured Redfish origin")
    except (TypeError, ValueError) as exc:
        raise RedfishInvalidTargetError("Invalid Redfish target") from exc
    return str(url.raw_path_qs)


def _raise_for_login(reply: AsyncRestResponse) -> None:
    """A login step's refusal as the library's exceptions say it."""
    changing = _password_change(reply)
    if changing is not None:
        raise RedfishPasswordChangeRequiredError(changing or None)
    if reply.status in (401, 403):
        raise RedfishAuthenticationError("Redfish service rejected authentication")
    if not 200 <= reply.status < 300:
        raise RedfishHTTPError(reply)


def _without_body(reply: AsyncRestResponse) -> AsyncRestResponse:
    request = AsyncRestRequest(path=reply.request.path, method=reply.request.method)
    return AsyncRestResponse(request, reply.status, reply.getheaders(), reply.read)


def _password_change(reply: AsyncRestResponse) -> str | None:
    """The URI the BMC names when it requires a password change first ('' when it names none),
    None when it does not (DSP0266: the `Base` registry's `PasswordChangeRequired` message)."""
    try:
        body = reply.dict
    except RedfishProtocolError:
        return None
    if not isinstance(body, dict):
        return None
    holders = [body] + ([body["error"]] if isinstance(body.get("error"), dict) else [])
    for holder in holders:
        infos = holder.get("@Message.ExtendedInfo")
        for info in infos if isinstance(infos, list) else ():
            if isinstance(info, dict) and _is_password_change(info.get("MessageId")):
                args = info.get("MessageArgs")
                first = args[0] if isinstance(args, list) and args else None
                return first if isinstance(first, str) else ""
    if any(_is_password_change(holder.get("code")) for holder in holders):
        return ""
    return None


def _is_password_change(message_id: object) -> bool:
    return (
        isinstance(message_id, str)
        and message_id.startswith("Base.")
        and message_id.endswith(".PasswordChangeRequired")
    )


def _path(value: Any, *keys: str) -> Any:
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value
