"""A lean HTTP/1.1 client for BMCs: kept-alive connections per BMC, TLS, one reply timer per BMC.

Why not `aiohttp`'s client: a BMC call is a small JSON request and a small JSON reply on a
connection that is kept open, and at fleet scale the client's own per-call machinery (a request
and a response object with their tracing, cookie, redirect and timer plumbing, a connector lookup,
several futures) cost more controller CPU than everything else the call does; `bench.client_only`
measures it. What a BMC needs is small and fixed:

- requests: `Host`, the caller's headers, a JSON body with its `Content-Length`; never chunked,
  never `Expect: 100-continue`;
- replies: read by llhttp (`httptools`) and held to RFC 9112 strictly (docs/redfish.md, "Framing"):
  a few interim 1xx replies skipped; a body framed by `Content-Length`, by chunked transfer coding,
  or by the connection's orderly close (then the connection is not reused); none after HEAD, 204
  and 304; gzip or deflate content coding undone as it arrives; anything else a typed failure;
  every reply within bounds (body bytes once decoded, gzip members, head and trailer fields,
  framing bytes), each a typed failure naming its bound (`ReplyOverBound`);
- connections: one request at a time each, reused while the BMC keeps them open and closed after
  `keepalive_timeout` idle; a request whose caller gives up (deadline, cancellation) closes its
  connection, since its reply may still arrive on it;
- timeouts: the connect timeout bounds the TCP connect and TLS handshake, the reply timeout the
  wait for the whole reply (Redfish replies are a few KiB, so "between reads" and "whole reply"
  differ by nothing a caller could use);
- TLS sessions: each origin keeps the session of its last connection (taken once its first reply
  was read, when TLS 1.3's tickets have come) and offers it on the next one, so a reconnect skips
  the certificate exchange and its verification (`plugins.redfish._wire.tls_sessions`); one
  session per origin, never offered to another, dropped when a connection to it fails TLS; a
  connect that fails while offering one is tried again without it, and after `RESUME_GIVE_UP` such
  refusals in a row the BMC is offered none again (`Origin._open_offering`).

One connection and its reply parsing: `plugins.redfish._wire.http_connection`. Failures are
`HttpFailure`s that say whether the request may have reached the BMC; the transport
(`plugins.redfish._wire.transport`) turns them into the plugin's typed errors.
"""

from __future__ import annotations

import asyncio
import logging
import math
import ssl
import time
import weakref
from urllib.parse import urlsplit

from plugins.redfish._wire import tls_sessions
from plugins.redfish._wire.http_connection import DEFAULT_MAX_BODY, Connection, Reply
from plugins.redfish._wire.http_failures import (
    ConnectFailure,
    ConnectTimeout,
    Disconnected,
    HttpFailure,
    MalformedReply,
    ReplyOverBound,
    ReplyTimeout,
    TlsFailure,
)
from plugins.redfish._wire.telemetry import TLS_HANDSHAKES

log = logging.getLogger(__name__)

#: the handshake counter's two series, bound once (a connect is hot at first contact)
#: connects in a row that fail offering a session, each then working without one, after which an
#: origin offers no session again (one alone may have been the network)
RESUME_GIVE_UP = 2
_FULL_HANDSHAKES = TLS_HANDSHAKES.labels(resumed="false")
_RESUMED_HANDSHAKES = TLS_HANDSHAKES.labels(resumed="true")

__all__ = [
    "RESUME_GIVE_UP",
    "ConnectFailure",
    "ConnectTimeout",
    "Disconnected",
    "HttpConnections",
    "HttpFailure",
    "MalformedReply",
    "Origin",
    "Reply",
    "ReplyOverBound",
    "ReplyTimeout",
    "TlsFailure",
]


class Origin:
    """Kept-alive connections to one BMC (`host`, `port`, TLS or not), and the TLS session its next
    connection offers. An origin's host, port and TLS context never change: a BMC whose URL,
    credentials or TLS settings change gets a new `Origin` (`BmcPool`), without the old session.

    Args:
        ssl_context: the TLS context, or None for plain HTTP (connections made with it can offer
            a session from now on: `tls_sessions.enable_resumption`).
        keepalive_timeout: seconds an idle connection is kept before it is closed.
        max_body: the most bytes of a reply's body, once any content coding is undone.
    """

    def __init__(
        self,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None,
        keepalive_timeout: float,
        *,
        keepalive: bool = True,
        max_body: int = DEFAULT_MAX_BODY,
    ) -> None:
        self.host = host
        self.max_body = max_body
        self.port = port
        self._ssl = ssl_context
        self.keepalive_timeout = keepalive_timeout
        self.keepalive = keepalive
        authority = f"[{host}]" if ":" in host else host
        default_port = 443 if ssl_context is not None else 80
        host_header = authority if port == default_port else f"{authority}:{port}"
        #: what follows every request's target, and ends every head (built once, not per request)
        self._fixed = f" HTTP/1.1\r\nHost: {host_header}\r\nUser-Agent: devicectl"
        self._end = "\r\n" if keepalive else "Connection: close\r\n\r\n"
        #: `scheme://host:port`, the port always given: what a redirect's `Location` is resolved against
        self.base = f"{'https' if ssl_context is not None else 'http'}://{authority}:{port}"
        self._idle: list[Connection] = []
        #: connections carrying a request -> (its reply deadline in loop time, its reply timeout)
        self._busy: dict[Connection, tuple[float, float]] = {}
        #: one timer for the earliest reply deadline of `_busy`, not one per request: a timer
        #: handle made and cancelled per BMC call showed in a fan-out's profile
        self._watch: asyncio.TimerHandle | None = None
        #: when `_watch` comes due (loop time; inf without one): read per request, kept as a float
        self._watch_due = math.inf
        self._sweep: asyncio.TimerHandle | None = None
        #: connections opened so far
        self.connections_opened = 0
        #: of those, TLS connections that resumed the origin's kept session (no certificate exchange)
        self.tls_resumed = 0
        #: the TLS session of the last connection, offered on the next (see `tls_sessions`)
        self.tls_session: ssl.SSLSession | None = None
        self._resume = ssl_context is not None and tls_sessions.enable_resumption(ssl_context)
        #: connects in a row that failed offering a session where one without it then worked
        self._offers_refused = 0

    async def request(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        body: bytes | None,
        *,
        connect_timeout: float,
        reply_timeout: float,
    ) -> Reply:
        """Send one request, return its whole reply; raises `HttpFailure`."""
        request = self._encode(method, target, headers, body)
        conn = self._idle_connection() or await self._connect(connect_timeout)
        loop = asyncio.get_running_loop()
        due = loop.time() + reply_timeout
        self._busy[conn] = (due, reply_timeout)
        if self._watch_due > due:
            if self._watch is not None:
                self._watch.cancel()
            self._watch = loop.call_at(due, self._time_out_replies)
            self._watch_due = due
        try:
            reply = await conn.send(request, method == "HEAD")
        except BaseException:
            conn.abort()  # cancelled, timed out or broken: its reply, if any, is nobody's
            raise
        finally:
            self._busy.pop(conn, None)
        if conn.unread_tls is not None:  # this connection's first reply: its session is complete
            self._keep_session(conn.unread_tls)
            conn.unread_tls = None
        if self.keepalive and conn.reusable:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
            if self._sweep is None:
                self._sweep = loop.call_later(self.keepalive_timeout, self._close_expired)
        else:
            conn.close()
        if reply.pending is not None:  # a large compressed body: inflated off the event loop
            await reply.finish_off_loop()
        return reply

    def close(self) -> None:
        """Close every connection, idle or carrying a request (whose caller then gets `Disconnected`)."""
        for timer in (self._sweep, self._watch):
            if timer is not None:
                timer.cancel()
        self._sweep = self._watch = None
        self._watch_due = math.inf
        self.tls_session = None
        for conn in [*self._idle, *self._busy]:
            conn.abort()
        self._idle.clear()

    def _encode(self, method: str, target: str, headers: dict[str, str], body: bytes | None) -> bytes:
        lines = [f"{method} {target}{self._fixed}"]
        for name, value in headers.items():
            if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
                # e.g. an ETag from a BMC's JSON: never a header break
                raise ValueError(f"header {name!r} holds a line break")
            lines.append(f"{name}: {value}")
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        lines.append(self._end)
        head = "\r\n".join(lines).encode("latin-1")
        return head + body if body else head

    def _idle_connection(self) -> Connection | None:
        idle = self._idle
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to have been closed
            if conn.alive and time.monotonic() - conn.idle_since < self.keepalive_timeout:
                return conn
            conn.close()
        return None

    async def _connect(self, timeout: float) -> Connection:
        offer = self.tls_session
        if offer is not None and not tls_sessions.still_valid(offer):
            offer = self.tls_session = None
        try:
            async with asyncio.timeout(timeout):
                if offer is None:
                    transport, conn = await self._open(None)
                else:
                    transport, conn = await self._open_offering(offer)
        except TimeoutError:
            raise ConnectTimeout(f"no connection within {timeout:g} s") from None
        except ssl.SSLCertVerificationError as exc:
            self.tls_session = None
            raise TlsFailure(_ssl_reason(exc), verification=exc) from exc
        except ssl.SSLError as exc:
            self.tls_session = None
            raise TlsFailure(_ssl_reason(exc)) from exc
        except OSError as exc:
            raise ConnectFailure(exc.strerror or str(exc) or type(exc).__name__, exc) from exc
        self.connections_opened += 1
        if self._ssl is not None:
            tls: ssl.SSLObject | None = transport.get_extra_info("ssl_object")
            if tls is not None:
                if tls.session_reused:
                    self.tls_resumed += 1
                    self._offers_refused = 0
                    _RESUMED_HANDSHAKES.inc()
                else:
                    _FULL_HANDSHAKES.inc()
                    if offer is not None and self.tls_session is offer:
                        self.tls_session = None  # refused: this connection's session replaces it
                if self._resume and self.tls_session is None:
                    conn.unread_tls = tls
        return conn

    async def _open(self, offer: ssl.SSLSession | None) -> tuple[asyncio.BaseTransport, Connection]:
        loop = asyncio.get_running_loop()
        with tls_sessions.offering(offer):
            return await loop.create_connection(
                lambda: Connection(loop, self.max_body),
                self.host,
                self.port,
                ssl=self._ssl,
                server_hostname=self.host if self._ssl is not None else None,
            )

    async def _open_offering(self, offer: ssl.SSLSession) -> tuple[asyncio.BaseTransport, Connection]:
        """Connect offering the kept session; if that fails (other than a certificate the BMC's full
        handshake presented and the checks refused), connect once more without it. A BMC whose TLS
        stack ends the handshake (an alert, a reset) when it is offered a session would otherwise
        fail every reconnect; when the second try works `RESUME_GIVE_UP` times in a row, this
        origin offers no session again. Once only, it may have been the network (a reset while the
        BMC was busy): the session of the connection that worked is offered next time, and a
        connection that resumes clears the count."""
        try:
            return await self._open(offer)
        except ssl.SSLCertVerificationError:
            raise
        except OSError as exc:  # ssl.SSLError included
            self.tls_session = None
            first = exc
        opened = await self._open(None)
        self._offers_refused += 1
        reason = _ssl_reason(first) if isinstance(first, ssl.SSLError) else type(first).__name__
        if self._offers_refused < RESUME_GIVE_UP:
            log.info(
                "%s: a TLS connection offering the last session failed (%s) and one without it "
                "worked; its session is offered on the next connection",
                self.base,
                reason,
            )
            return opened
        self._resume = False
        log.warning(
            "%s: TLS connections offering the last session failed %d times in a row (%s) and ones "
            "without it worked: TLS sessions are not resumed with this BMC from now on",
            self.base,
            self._offers_refused,
            reason,
        )
        return opened

    def _keep_session(self, tls: ssl.SSLObject) -> None:
        """Keep the session of a connection whose first reply was read, to offer on the next:
        only while the origin keeps none (or only an expired one). NOTE: reading a session is
        not cheap (CPython copies it through its DER encoding, peer certificate included: about
        0.1 ms, as much as a TLS 1.3 resumption saves), so it is read once per origin and
        session lifetime, not from every connection: at first contact a BMC's two connections
        read one."""
        if self.tls_session is not None and tls_sessions.still_valid(self.tls_session):
            return
        session = tls_sessions.resumable_session(tls)
        if session is not None:
            self.tls_session = session

    def _time_out_replies(self) -> None:
        """The earliest reply deadline came: fail the requests past theirs, wait for the next."""
        loop = asyncio.get_running_loop()
        now, earliest = loop.time(), None
        for conn, (due, timeout) in list(self._busy.items()):
            if due <= now:
                del self._busy[conn]
                conn.time_out(f"no reply within {timeout:g} s")
            elif earliest is None or due < earliest:
                earliest = due
        if earliest is None:
            self._watch, self._watch_due = None, math.inf
        else:
            self._watch, self._watch_due = loop.call_at(earliest, self._time_out_replies), earliest

    def _close_expired(self) -> None:
        self._sweep = None
        now = time.monotonic()
        kept: list[Connection] = []
        for conn in self._idle:
            if conn.alive and now - conn.idle_since < self.keepalive_timeout:
                kept.append(conn)
            else:
                conn.close()
        self._idle = kept
        if kept:
            wait = max(0.01, kept[0].idle_since + self.keepalive_timeout - now)
            self._sweep = asyncio.get_running_loop().call_later(wait, self._close_expired)


def _ssl_reason(exc: ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_message:
        return f"{exc.verify_message}"
    return exc.reason or str(exc) or type(exc).__name__


class HttpConnections:
    """Every BMC's `Origin` in this process, so that they can be closed together.

    Args:
        keepalive_timeout: seconds an idle connection is kept before it is closed.
        max_body: the most bytes of a reply's body, once any content coding is undone (the
            plugin's `max_document_bytes`).
    """

    def __init__(self, keepalive_timeout: float, max_body: int = DEFAULT_MAX_BODY) -> None:
        self.keepalive_timeout = keepalive_timeout
        self.max_body = max_body
        self._origins: weakref.WeakSet[Origin] = weakref.WeakSet()  # a retired BMC client's go with it
        self.closed = False

    def origin(self, url: str, tls: ssl.SSLContext, *, keepalive: bool = True) -> Origin:
        """A new `Origin` for `https://host:port` with the TLS context `tls` (the pool's, see
        `BmcPool._tls_for`), or for `http://host:port` (`tls` unused)."""
        parts = urlsplit(url)
        secure = parts.scheme == "https"
        port = parts.port or (443 if secure else 80)
        origin = Origin(
            parts.hostname or "",
            port,
            tls if secure else None,
            self.keepalive_timeout,
            keepalive=keepalive,
            max_body=self.max_body,
        )
        self._origins.add(origin)
        return origin

    async def close(self) -> None:
        """Close every connection of every origin."""
        self.closed = True
        for origin in list(self._origins):
            origin.close()
        self._origins.clear()
        await asyncio.sleep(0)  # let the transports' connection_lost callbacks run
