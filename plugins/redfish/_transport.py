"""The per-BMC view of the process-wide `aiohttp.ClientSession` that `AsyncRedfishClient` talks through.

`redfish.aio.AsyncRedfishClient` needs a caller-owned session and only ever calls
`session.request(method, url, **kwargs)` on it. `BmcTransport` stands in for that session: it
forwards to the one shared `aiohttp.ClientSession` and adds, for every HTTP request to its BMC
(logins, logouts and the client's own 401 re-logins included, and the requests a logged-in
`BmcClient` sends past the library with `send`):

- the per-BMC concurrency limit (an `asyncio.Semaphore`, shared by control, metrics and ping);
- the process's `Session.Context` on every login (how a restarted process finds its leftovers);
- the BMC's TLS settings (`ssl=`: a CA-bundle context, the system store, or off when `insecure`);
- connect and read timeouts cut to the current request's deadline (a context variable set by the
  caller, so the client's internal requests are bounded too);
- translation of transport failures into precise typed errors (which the client passes through
  untouched because they are not `aiohttp` exceptions).
"""

from __future__ import annotations

import asyncio
import codecs
import contextvars
import json
import ssl
import time
from types import TracebackType
from typing import Any

import aiohttp
from multidict import CIMultiDictProxy
from redfish.aio.exceptions import RedfishProtocolError
from yarl import URL

from plugins.redfish._config import ConnectionSettings
from plugins.redfish._errors import (
    ConnectionFailedError,
    DeadlineExceededError,
    RedfishError,
    RequestTimeoutError,
    TlsError,
)

#: absolute deadline (time.monotonic()) of the request being served in this task
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("redfish_deadline", default=None)

SslParam = ssl.SSLContext | bool


class deadline_scope:  # lower case: used like a function, `with deadline_scope(deadline):`
    """Bound every HTTP request made inside the block (in this task) by `deadline`.

    A class, not `@contextmanager`: entered once per HTTP request, and a generator-based context
    manager allocates a generator and a wrapper each time.
    """

    __slots__ = ("_deadline", "_token")

    def __init__(self, deadline: float) -> None:
        self._deadline = deadline

    def __enter__(self) -> None:
        self._token = _DEADLINE.set(self._deadline)

    def __exit__(self, *exc: object) -> None:
        _DEADLINE.reset(self._token)


class BmcTransport:
    """Session stand-in for one BMC (see the module docstring).

    Attributes:
        requests: HTTP requests sent so far.
        in_flight: requests holding a slot right now.
        max_in_flight: the most requests ever in flight at once (never above `concurrency`).
        session_generation: bumped on every successful Redfish session login (single-flight
            re-login uses it to tell whether someone else already logged in again).
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        settings: ConnectionSettings,
        ssl_param: SslParam,
        *,
        login_context: str = "",
    ):
        self._session = session
        #: `Session.Context` added to every login POST (the client library sends only the credentials)
        self.login_context = login_context
        #: the body of the last successful login's reply (the session as the BMC shows it; no token)
        self.login_reply: dict[str, Any] = {}
        self._settings = settings
        self._ssl = ssl_param
        self._slots = asyncio.Semaphore(settings.concurrency)
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.session_generation = 0

    @property
    def origin(self) -> str:
        """`https://host:port` of the BMC."""
        return self._settings.origin

    def retune(self, settings: ConnectionSettings) -> None:
        """Take new timeouts (the concurrency limit and TLS are part of the connection's identity)."""
        self._settings = settings

    def request(self, method: str, url: URL | str, **kwargs: Any) -> _Call:
        """Same contract as `aiohttp.ClientSession.request` (an async context manager)."""
        return _Call(self, method, url if isinstance(url, URL) else URL(url), kwargs)

    async def send(self, method: str, url: URL, headers: dict[str, str], body: Any) -> DirectReply:
        """One request sent as is (a logged-in client's GET, PATCH or POST, no `AsyncRedfishClient`
        in between): its reply, read whole, in the shape of the library's replies."""
        kwargs: dict[str, Any] = {"allow_redirects": False, "headers": headers}
        if body is not None:
            kwargs["json"] = body
        async with _Call(self, method, url, kwargs) as response:
            read = await response.read()  # already read by `_Call`: the cached bytes
            return DirectReply(method, url.path, response.status, response.headers, read, response.charset)

    def timeout_for(self, deadline: float | None) -> aiohttp.ClientTimeout:
        """Connect and read timeouts, never past the deadline."""
        s = self._settings
        if deadline is None:
            return aiohttp.ClientTimeout(
                total=s.connect_timeout + s.read_timeout,
                sock_connect=s.connect_timeout,
                sock_read=s.read_timeout,
            )
        remaining = max(0.001, deadline - time.monotonic())
        return aiohttp.ClientTimeout(
            total=remaining,
            sock_connect=min(s.connect_timeout, remaining),
            sock_read=min(s.read_timeout, remaining),
        )

    def _acquired(self) -> None:
        self.requests += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _released(self) -> None:
        self.in_flight -= 1
        self._slots.release()

    def _translate(self, exc: BaseException, method: str, path: str, deadline: float | None) -> RedfishError:
        s = self._settings
        where = f"{self.origin}: {method} {path}"
        if isinstance(exc, aiohttp.ClientConnectorCertificateError):
            return TlsError(
                f"{where}: TLS certificate verification failed ({exc.certificate_error}); "
                "give the BMC's CA with `ca_bundle`, or set `insecure` for this device"
            )
        if isinstance(exc, aiohttp.ClientSSLError):
            return TlsError(f"{where}: TLS handshake failed ({_reason(exc)})")
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            return RequestTimeoutError(
                f"{where}: no connection within {_secs(s.connect_timeout)}", sent=False
            )
        if isinstance(exc, aiohttp.ClientConnectorError):
            return ConnectionFailedError(f"{where}: cannot connect ({_reason(exc)})", sent=False)
        if isinstance(exc, aiohttp.SocketTimeoutError):
            return RequestTimeoutError(f"{where}: no reply within {_secs(s.read_timeout)}", sent=True)
        if isinstance(exc, TimeoutError):
            if deadline is not None and time.monotonic() >= deadline - 0.005:
                return DeadlineExceededError(f"{where}: the request's deadline passed before the BMC replied")
            return RequestTimeoutError(f"{where}: timed out waiting for the BMC", sent=True)
        if isinstance(exc, aiohttp.ServerDisconnectedError):
            return ConnectionFailedError(f"{where}: the BMC closed the connection without a reply", sent=True)
        if isinstance(exc, aiohttp.ClientError):
            return ConnectionFailedError(f"{where}: connection failed ({_reason(exc)})", sent=True)
        return ConnectionFailedError(f"{where}: {_reason(exc)}", sent=True)


class _Call:
    """One request through the transport: slot, TLS, timeouts, body read, error translation."""

    def __init__(self, transport: BmcTransport, method: str, url: URL, kwargs: dict[str, Any]):
        self._t = transport
        self._method = method.upper()
        self._url = url
        self._kwargs = kwargs
        self._cm: Any = None
        self._holding = False

    async def __aenter__(self) -> aiohttp.ClientResponse:
        t = self._t
        deadline = _DEADLINE.get()
        path = self._url.path
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DeadlineExceededError(
                    f"{t.origin}: {self._method} {path}: the request's deadline passed", sent=False
                )
            if t._slots.locked():
                # NOTE: a timer only when the slot wait can block: an `asyncio.timeout` per call
                # (a handle on the loop's timer heap) cost ~2% of the CPU of a fan-out.
                try:
                    async with asyncio.timeout(remaining):
                        await t._slots.acquire()
                except TimeoutError:
                    raise DeadlineExceededError(
                        f"{t.origin}: {self._method} {path}: the deadline passed while waiting for a "
                        f"free connection slot (per-BMC limit {t._settings.concurrency})",
                        sent=False,
                    ) from None
            else:
                await t._slots.acquire()  # a free slot: taken at once
        else:
            await t._slots.acquire()
        t._acquired()
        self._holding = True
        kwargs = self._kwargs  # built by `request()` for this call alone
        login = self._method == "POST" and path.rstrip("/").endswith("/SessionService/Sessions")
        body = kwargs.get("json")
        if login and t.login_context and isinstance(body, dict) and "UserName" in body:
            kwargs["json"] = {**body, "Context": t.login_context}
        kwargs["timeout"] = t.timeout_for(deadline)
        kwargs["ssl"] = t._ssl
        if not t._settings.keepalive:
            headers = dict(kwargs.get("headers") or {})
            headers["Connection"] = "close"
            kwargs["headers"] = headers
        try:
            self._cm = t._session.request(self._method, self._url, **kwargs)
            response: aiohttp.ClientResponse = await self._cm.__aenter__()
            try:
                await response.read()  # cached by aiohttp; read here so read errors are ours
            except BaseException as exc:
                await self._cm.__aexit__(type(exc), exc, exc.__traceback__)
                raise
        except (aiohttp.ClientError, TimeoutError, OSError, ssl.SSLError) as exc:
            self._release()
            raise t._translate(exc, self._method, path, deadline) from exc
        except BaseException:
            self._release()
            raise
        if login and 200 <= response.status < 300:
            t.session_generation += 1
            t.login_reply = await _json_object(response)
        return response

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self._cm is not None:
                await self._cm.__aexit__(exc_type, exc, tb)
        finally:
            self._release()

    def _release(self) -> None:
        if self._holding:
            self._holding = False
            self._t._released()


class _Request:
    """What a reply says about its request (`method`, `path`: `AsyncRestRequest`'s fields)."""

    __slots__ = ("method", "path")

    def __init__(self, method: str, path: str) -> None:
        self.method = method
        self.path = path


class DirectReply:
    """A reply read whole: what `redfish.aio`'s `AsyncRestResponse` offers, without copying the
    headers into a new multidict or keeping the request's body."""

    __slots__ = ("_charset", "_headers", "_method", "_path", "read", "status")

    def __init__(
        self,
        method: str,
        path: str,
        status: int,
        headers: CIMultiDictProxy[str],
        read: bytes,
        charset: str | None,
    ) -> None:
        self._method = method
        self._path = path
        self.status = status
        self._headers = headers
        self.read = read
        self._charset = charset

    @property
    def text(self) -> str:
        """The body decoded (UTF-8 unless the reply names another known charset)."""
        charset = self._charset
        if charset:
            try:
                codecs.lookup(charset)
            except LookupError:
                charset = None
        return self.read.decode(charset or "utf-8", "replace")

    @property
    def dict(self) -> Any:
        """The body as JSON ({} when empty)."""
        if not self.read:
            return {}
        try:
            return json.loads(self.text)
        except ValueError as exc:
            raise RedfishProtocolError(f"Service responded with invalid JSON at URI {self._path}") from exc

    @property
    def request(self) -> _Request:
        """The request's method and path."""
        return _Request(self._method, self._path)

    def getheader(self, name: str) -> str | None:
        """One header, case-insensitively."""
        return self._headers.get(name)

    def getheaders(self) -> list[tuple[str, str]]:
        """All headers."""
        return list(self._headers.items())


async def _json_object(response: aiohttp.ClientResponse) -> dict[str, Any]:
    """A reply's JSON object body, {} when it has none (some services answer a login with 204)."""
    try:
        body = await response.json(content_type=None)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _reason(exc: BaseException) -> str:
    if isinstance(exc, aiohttp.ClientConnectorError) and exc.os_error is not None:
        err = exc.os_error
        return err.strerror or str(err) or type(err).__name__
    text = str(exc).strip()
    return text or type(exc).__name__


def _secs(value: float) -> str:
    return f"{value:g} s"
