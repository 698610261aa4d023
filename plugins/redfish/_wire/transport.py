"""The per-BMC HTTP transport: what `AsyncRedfishClient` takes for its session, and what a
logged-in `BmcClient` sends its calls through.

`redfish.aio.AsyncRedfishClient` needs a caller-owned session and only ever calls
`session.request(method, url, **kwargs)` on it. `BmcTransport` stands in for that session over the
BMC's own kept-alive connections (`plugins.redfish._wire.http`) and adds, for every HTTP request to its
BMC (logins, logouts and the client's own 401 re-logins included, and the requests a logged-in
`BmcClient` sends past the library with `send`):

- the per-BMC concurrency limit (`plugins.redfish._wire.slots`, shared by control, metrics and ping);
- the BMC's TLS settings (a CA-bundle context, the system store, or off when `insecure`);
- connect and reply timeouts cut to the current request's deadline (a context variable set by the
  caller, so the client's internal requests are bounded too);
- translation of transport failures into precise typed errors (which the client passes through
  untouched because they are not its `aiohttp` exceptions).
"""

from __future__ import annotations

import contextvars
import json
import ssl
import time
from collections.abc import Callable, Coroutine, Sequence
from json import encoder as json_encoder
from typing import Any, TypeVar

from multidict import CIMultiDict
from redfish.aio.exceptions import RedfishProtocolError
from yarl import URL

from plugins.redfish._config import ConnectionSettings
from plugins.redfish._wire import off_loop
from plugins.redfish._wire.document import loads_scanned, past_bound
from plugins.redfish._wire.errors import (
    ConnectionFailedError,
    DeadlineExceededError,
    ProtocolError,
    RedfishError,
    ReplyBoundError,
    RequestTimeoutError,
    TlsError,
)
from plugins.redfish._wire.http import (
    ConnectFailure,
    ConnectTimeout,
    Disconnected,
    HttpConnections,
    HttpFailure,
    MalformedReply,
    ReplyOverBound,
    ReplyTimeout,
    TlsFailure,
)
from plugins.redfish._wire.http import Reply as HttpReply
from plugins.redfish._wire.redirect import redirect_target
from plugins.redfish._wire.slots import Slots

#: absolute deadline (time.monotonic()) of the request being served in this task
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("redfish_deadline", default=None)

_JSON_TYPE = "application/json"

_R = TypeVar("_R")


def _json_encoder() -> Callable[[Any, int], Sequence[str]] | None:
    """`json.dumps`'s own C encoder, made once: `json.dumps` makes one per call, most of the cost
    of encoding a small body. Without the markers of a circular check (a dict shared between
    calls, left holding what a failed call had open): a body that holds itself is still refused
    (`RecursionError` instead of `ValueError`). None where the C encoder is missing."""
    make = getattr(json_encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover (CPython has it)
        return None
    d = json.JSONEncoder()  # `json.dumps`'s settings
    encoder: Callable[[Any, int], Sequence[str]] = make(
        None,
        d.default,
        json_encoder.encode_basestring_ascii,
        None,
        d.key_separator,
        d.item_separator,
        d.sort_keys,
        d.skipkeys,
        d.allow_nan,
    )
    return encoder


_ENCODE = _json_encoder()


def _json_bytes(body: Any) -> bytes:
    """`json.dumps(body).encode()`, byte for byte (see `_json_encoder`)."""
    if _ENCODE is None:  # pragma: no cover
        return json.dumps(body).encode()
    return "".join(_ENCODE(body, 0)).encode()


def _as_sent(method: str, path: str, reply: HttpReply) -> HttpReply:
    return reply


class deadline_scope:  # lower case: used like a function, `with deadline_scope(deadline):`
    """Bound every HTTP request made inside the block (in this task) by `deadline`.

    A class, not `@contextmanager`: a generator-based context manager allocates a generator and a
    wrapper each time. `None`: the enclosing block's deadline stays.
    """

    __slots__ = ("_deadline", "_token")

    def __init__(self, deadline: float | None) -> None:
        self._deadline = deadline
        self._token: contextvars.Token[float | None] | None = None

    def __enter__(self) -> None:
        if self._deadline is not None:
            self._token = _DEADLINE.set(self._deadline)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _DEADLINE.reset(self._token)


class BmcTransport:
    """Session stand-in for one BMC (see the module docstring).

    Attributes:
        requests: HTTP requests sent so far.
        in_flight: requests holding a slot right now.
        max_in_flight: the most requests ever in flight at once (never above `concurrency`).
    """

    def __init__(
        self,
        http: HttpConnections,
        settings: ConnectionSettings,
        tls: ssl.SSLContext,
    ):
        self._origin = http.origin(settings.url, tls, keepalive=settings.keepalive)
        self._settings = settings
        self._slots = Slots(settings.concurrency)
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0

    @property
    def origin(self) -> str:
        """`https://host:port` of the BMC."""
        return self._settings.origin

    @property
    def connections_opened(self) -> int:
        """TCP (and TLS) connections opened to the BMC so far."""
        return self._origin.connections_opened

    @property
    def tls_resumed(self) -> int:
        """Of those, TLS connections that resumed the last one's session (no certificate exchange)."""
        return self._origin.tls_resumed

    def close(self) -> None:
        """Close the BMC's connections (after the client's last request: its logout)."""
        self._origin.close()

    def retune(self, settings: ConnectionSettings) -> None:
        """Take new timeouts (the concurrency limit and TLS are part of the connection's identity)."""
        self._settings = settings

    def request(self, method: str, url: URL | str, **kwargs: Any) -> _LibraryCall:
        """What `AsyncRedfishClient` calls: `aiohttp.ClientSession.request`'s contract (an async
        context manager giving a response), for the keyword arguments the library passes."""
        return _LibraryCall(self, method.upper(), url if isinstance(url, URL) else URL(url), kwargs)

    def send(
        self, method: str, target: str, headers: dict[str, str], body: Any, deadline: float | None = None
    ) -> Coroutine[Any, Any, DirectReply]:
        """One request sent as is (a logged-in client's GET, PATCH or POST, no `AsyncRedfishClient`
        in between) to `target` (path and query, encoded): its reply, read whole, in the shape of
        the library's replies. `deadline`: as `exchange`. (Not a coroutine of its own: the one
        `exchange` runs gives the reply in that shape.)"""
        data = None
        if body is not None:
            data = _json_bytes(body)
            headers["Content-Type"] = _JSON_TYPE
        return self._exchange(method, target, headers, data, deadline, DirectReply)

    async def exchange(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        data: bytes | None,
        deadline: float | None = None,
    ) -> HttpReply:
        """One HTTP request to `target` (path and query, encoded) within this BMC's limits, deadline
        (`deadline`, else the one `deadline_scope` set) and error types; raises `RedfishError`."""
        return await self._exchange(method, target, headers, data, deadline, _as_sent)

    async def _exchange(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        data: bytes | None,
        deadline: float | None,
        shape: Callable[[str, str, HttpReply], _R],
    ) -> _R:
        """`exchange`, its reply given `shape` (`shape(method, path, reply)`)."""
        if deadline is None:
            deadline = _DEADLINE.get()
        path = target.partition("?")[0]
        now = time.monotonic()
        if deadline is not None and deadline <= now:
            raise DeadlineExceededError(
                f"{self.origin}: {method} {path}: the request's deadline passed", sent=False
            )
        if not self._slots.try_take():  # a free slot is taken at once, without a coroutine
            try:
                await self._slots.take(None if deadline is None else deadline - now)
            except TimeoutError:
                raise DeadlineExceededError(
                    f"{self.origin}: {method} {path}: the deadline passed while waiting for a free "
                    f"connection slot (per-BMC limit {self._settings.concurrency})",
                    sent=False,
                ) from None
            now = time.monotonic()
        self.requests += 1
        in_flight = self.in_flight = self.in_flight + 1
        if in_flight > self.max_in_flight:
            self.max_in_flight = in_flight
        s = self._settings
        hops = 0
        try:
            while True:
                if deadline is None:
                    connect, reply_wait = s.connect_timeout, s.read_timeout
                else:
                    remaining = max(0.001, deadline - now)
                    connect, reply_wait = min(s.connect_timeout, remaining), min(s.read_timeout, remaining)
                try:
                    reply = await self._origin.request(
                        method, target, headers, data, connect_timeout=connect, reply_timeout=reply_wait
                    )
                except HttpFailure as exc:
                    raise self._translate(exc, method, path, deadline) from exc
                except ValueError as exc:  # a header we would send holds a line break (a BMC's ETag)
                    raise ProtocolError(f"{self.origin}: {method} {path}: {exc}; not sent") from exc
                if not 300 <= reply.status < 400:  # a 3xx is never the reply (`_wire.redirect`)
                    break
                target = redirect_target(
                    self._origin.base + target,
                    f"{self.origin}: {method} {path}",
                    method,
                    reply.status,
                    reply.header("Location"),
                    hops,
                )
                hops += 1
                now = time.monotonic()
        finally:
            self.in_flight -= 1
            self._slots.release()
        charset = reply.charset
        if charset is not None and not _is_text_encoding(charset):
            where = f"{self.origin}: {method} {path}"
            raise ProtocolError(f"{where}: the reply's charset {charset[:40]!r} is no known text encoding")
        body = reply.body
        if len(body) > off_loop.OFF_LOOP_BYTES:  # a large body's scans run off the event loop
            over = await off_loop.run(lambda: past_bound(body))
        else:
            over = past_bound(body) if body else None
        if over is not None:
            # every reader after this one (the DMTF client's own included) parses it safely
            raise ReplyBoundError(
                f"{self.origin}: {method} {path}: the reply's {over}", bound=over.bound, limit=over.limit
            )
        return shape(method, path, reply)

    def _translate(self, exc: HttpFailure, method: str, path: str, deadline: float | None) -> RedfishError:
        s = self._settings
        where = f"{self.origin}: {method} {path}"
        if isinstance(exc, TlsFailure):
            if exc.verification is not None:
                return TlsError(
                    f"{where}: TLS certificate verification failed ({exc}); "
                    "give the BMC's CA with `ca_bundle`, or set `insecure` for this device"
                )
            return TlsError(f"{where}: TLS handshake failed ({exc})")
        if isinstance(exc, ConnectTimeout | ReplyTimeout):
            if deadline is not None and time.monotonic() >= deadline - 0.005:
                return DeadlineExceededError(
                    f"{where}: the request's deadline passed before the BMC replied", sent=exc.sent
                )
            if isinstance(exc, ConnectTimeout):
                return RequestTimeoutError(
                    f"{where}: no connection within {_secs(s.connect_timeout)}", sent=False
                )
            return RequestTimeoutError(f"{where}: no reply within {_secs(s.read_timeout)}", sent=True)
        if isinstance(exc, ConnectFailure):
            return ConnectionFailedError(f"{where}: cannot connect ({exc})", sent=False)
        if isinstance(exc, Disconnected):
            return ConnectionFailedError(f"{where}: no complete reply: {exc}", sent=True)
        if isinstance(exc, ReplyOverBound):
            return ReplyBoundError(
                f"{where}: reply refused, connection closed ({exc})", bound=exc.bound, limit=exc.limit
            )
        if isinstance(exc, MalformedReply):
            return ConnectionFailedError(f"{where}: unreadable reply, connection closed ({exc})", sent=True)
        return ConnectionFailedError(f"{where}: connection failed ({exc})", sent=exc.sent)


class _LibraryCall:
    """One request from `AsyncRedfishClient` (`async with session.request(...) as response`)."""

    def __init__(self, transport: BmcTransport, method: str, url: URL, kwargs: dict[str, Any]):
        self._t = transport
        self._method = method
        self._url = url
        self._kwargs = kwargs

    async def __aenter__(self) -> _LibraryResponse:
        kwargs = self._kwargs
        url = self._url
        if kwargs.get("params"):
            url = url.update_query(kwargs["params"])
        headers = dict(kwargs.get("headers") or {})
        data: bytes | None = None
        body = kwargs.get("json")
        if body is not None:
            data = json.dumps(body).encode()
            headers.setdefault("Content-Type", _JSON_TYPE)
        elif kwargs.get("data") is not None:
            raw = kwargs["data"]
            data = raw.encode() if isinstance(raw, str) else bytes(raw)
        return _LibraryResponse(await self._t.exchange(self._method, url.raw_path_qs, headers, data))

    async def __aexit__(self, *exc: object) -> None:
        return None


class _LibraryResponse:
    """The part of `aiohttp.ClientResponse` that `AsyncRedfishClient` reads."""

    __slots__ = ("_reply",)

    def __init__(self, reply: HttpReply) -> None:
        self._reply = reply

    @property
    def status(self) -> int:
        return self._reply.status

    @property
    def headers(self) -> CIMultiDict[str]:
        return self._reply.headers

    async def read(self) -> bytes:
        return self._reply.body

    def get_encoding(self) -> str:
        return _known_charset(self._reply.charset) or "utf-8"


class _Request:
    """What a reply says about its request (`method`, `path`: `AsyncRestRequest`'s fields)."""

    __slots__ = ("method", "path")

    def __init__(self, method: str, path: str) -> None:
        self.method = method
        self.path = path


class DirectReply:
    """A reply read whole: what `redfish.aio`'s `AsyncRestResponse` offers, without copying the
    headers or keeping the request's body."""

    __slots__ = ("_method", "_path", "_reply")

    def __init__(self, method: str, path: str, reply: HttpReply) -> None:
        self._method = method
        self._path = path
        self._reply = reply

    @property
    def status(self) -> int:
        return self._reply.status

    @property
    def read(self) -> bytes:
        """The body's bytes (an attribute, as in `AsyncRestResponse`)."""
        return self._reply.body

    @property
    def text(self) -> str:
        """The body decoded (UTF-8 unless the reply names another known charset)."""
        return self._reply.body.decode(_known_charset(self._reply.charset) or "utf-8", "replace")

    @property
    def dict(self) -> Any:
        """The body as JSON ({} when empty)."""
        return self.json()

    def json(self) -> Any:
        """The body as JSON, parsed without a second bounds scan: `exchange` scanned its bytes once
        as the reply came, and refused one past a bound. `RedfishProtocolError` when invalid."""
        if not self._reply.body:
            return {}
        try:
            return loads_scanned(self.text)
        except ValueError as exc:
            raise RedfishProtocolError(f"Service responded with invalid JSON at URI {self._path}") from exc

    @property
    def request(self) -> _Request:
        """The request's method and path."""
        return _Request(self._method, self._path)

    def getheader(self, name: str) -> str | None:
        """One header, case-insensitively."""
        return self._reply.header(name)

    def getheaders(self) -> list[tuple[str, str]]:
        """All headers."""
        return list(self._reply.headers.items())


#: charsets seen to name a text encoding (`_is_text_encoding`), so that each is looked up once
_TEXT_CHARSETS: set[str] = {"utf-8", "UTF-8"}


def _is_text_encoding(charset: str) -> bool:
    """Whether `charset` names a text encoding Python knows (`rot13` is a codec, but not for text)."""
    if charset in _TEXT_CHARSETS:
        return True
    try:
        b"a".decode(charset, "replace")  # an empty input is decoded without looking the codec up
    except (LookupError, ValueError):
        return False
    if len(_TEXT_CHARSETS) < 64:
        _TEXT_CHARSETS.add(charset)
    return True


def _known_charset(charset: str | None) -> str | None:
    """`charset` when it names a text encoding (`exchange` refused any other), else None."""
    return charset if charset and _is_text_encoding(charset) else None


def _secs(value: float) -> str:
    return f"{value:g} s"
