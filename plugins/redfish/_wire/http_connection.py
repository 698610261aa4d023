"""One kept-alive connection to a BMC: a request's bytes out, its reply parsed (RFC 9112).

The reply's framing is read by llhttp (Node.js's HTTP parser, fuzzed upstream; through
`httptools`), and held to the rules in `plugins.redfish._wire.http` and docs/redfish.md ("Framing").
What can go wrong is an `HttpFailure` that says whether the request may have reached the BMC.
"""

from __future__ import annotations

import asyncio
import ssl
import zlib

import httptools
from multidict import CIMultiDict

#: a reply head (interim replies included) larger than this is not a BMC talking
_MAX_HEAD = 64 * 1024
#: interim (1xx) replies taken before the final one; a BMC sends at most a `100 Continue`
_MAX_INTERIM = 8
#: the largest reply read (Redfish replies are KiB; the largest collections a few MiB)
MAX_REPLY = 32 << 20
_CODINGS = frozenset(("gzip", "x-gzip", "deflate"))


class HttpFailure(Exception):
    """A request that got no complete reply. `sent`: whether it may have reached the BMC."""

    sent = True


class ConnectFailure(HttpFailure):
    """No connection (refused, unreachable, name unknown). `os_error`: the cause."""

    sent = False

    def __init__(self, message: str, os_error: OSError | None = None) -> None:
        super().__init__(message)
        self.os_error = os_error


class ConnectTimeout(HttpFailure):
    """No connection (TCP and TLS) within the connect timeout."""

    sent = False


class TlsFailure(HttpFailure):
    """The TLS handshake failed. `verification`: the certificate's rejection, when that was why."""

    sent = False

    def __init__(self, message: str, verification: ssl.SSLCertVerificationError | None = None) -> None:
        super().__init__(message)
        self.verification = verification


class ReplyTimeout(HttpFailure):
    """The request was sent and no complete reply came within the reply timeout."""


class Disconnected(HttpFailure):
    """The connection ended before the reply was complete as framed (the request may have landed)."""


class MalformedReply(HttpFailure):
    """The bytes that came back are not an HTTP/1.x reply this client reads (the request may have
    landed)."""


class Reply:
    """A reply read whole: `status`, `headers` (case-insensitive), `body` (bytes, decoded from any
    content coding)."""

    __slots__ = ("_charset", "body", "headers", "status")

    def __init__(self, status: int, headers: CIMultiDict[str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self._charset: str | bool | None = False  # False: not read yet (the transport and the text ask)

    @property
    def charset(self) -> str | None:
        """The `charset` parameter of `Content-Type`, if any."""
        charset = self._charset
        if charset is False:
            charset = self._charset = _charset(self.headers.get("Content-Type"))
        return charset  # type: ignore[return-value]


class Connection(asyncio.Protocol):
    """One connection to a BMC, carrying one request at a time.

    The parser's callbacks (`on_*`) build the reply; `data_received` turns whatever the parser or
    a callback refuses into a `MalformedReply` for the request, and never raises.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self.alive = True
        self.idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[Reply] | None = None
        self._head_only = False
        # the reply being read
        self._received = 0  # bytes since the request was sent
        self._interims = 0
        self._fields: list[tuple[bytes, bytes]] = []  # the head's fields as llhttp gives them
        self._headers: CIMultiDict[str] | None = None  # set once the final reply's head is read
        self._status = 0
        self._body: list[bytes] = []
        self._size = 0
        self._until_close = False  # the body is framed by the connection's end
        self._keep = True

    # ---- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if waiter is None:  # nothing asked: a BMC talking out of turn; never reuse this one
            self.close()
            return
        self._received += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if waiter.done():  # bytes past a reply already delivered
                self._keep = False
                return
            cause = exc.__context__
            self._fail(
                cause if isinstance(cause, HttpFailure) else MalformedReply(f"malformed reply ({exc})")
            )
            return
        if not waiter.done():
            if self._headers is None:
                if self._received > _MAX_HEAD:  # a head without end, or a flood of interim replies
                    self._fail(MalformedReply(f"reply head over {_MAX_HEAD // 1024} KiB"))
            elif self._received > MAX_REPLY + _MAX_HEAD:  # e.g. trailer fields without end
                self._fail(MalformedReply(f"reply over {MAX_REPLY} bytes"))
        elif self._head_only:
            # llhttp cannot be told a reply answers HEAD (it would wait for the announced body):
            # the next reply starts on a parser of its own
            self._parser = httptools.HttpResponseParser(self)

    def eof_received(self) -> bool:
        waiter = self._waiter
        if waiter is not None and not waiter.done() and self._headers is not None and self._until_close:
            if _orderly_end(self.transport):
                self._finish()
            else:
                self._fail(
                    Disconnected(
                        "the connection ended without TLS close_notify: "
                        f"the reply's body, framed by its close, may be cut short ({self._size} bytes read)"
                    )
                )
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.alive = False
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._headers is None:
            what = "before its reply" if self._received == 0 else "in its reply's head"
        else:
            what = f"in its reply's body ({self._size} bytes read)"
        reason = f" ({exc})" if exc else ""
        self._waiter = None
        waiter.set_exception(Disconnected(f"the connection ended {what}{reason}"))

    # ---- requests -----------------------------------------------------------------------------

    def send(self, request: bytes, head_only: bool) -> asyncio.Future[Reply]:
        """Write one request; the future completes with its reply."""
        assert self.transport is not None and self._waiter is None
        waiter = self._loop.create_future()
        self._waiter = waiter
        self._head_only = head_only
        self._headers = None
        self._received = self._interims = 0
        self.transport.write(request)
        return waiter

    def time_out(self, message: str) -> None:
        """The reply took too long: fail the request and drop the connection."""
        self._fail(ReplyTimeout(message))

    def close(self) -> None:
        self.alive = False
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Drop the connection at once (its reply, if one is still coming, is nobody's)."""
        self.alive = False
        if self.transport is not None:
            self.transport.abort()

    @property
    def reusable(self) -> bool:
        return self.alive and self._keep and self._waiter is None

    def _fail(self, exc: HttpFailure) -> None:
        waiter = self._waiter
        self._waiter = None
        self.abort()
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _finish(self) -> None:
        headers = self._headers
        assert headers is not None
        body = b"".join(self._body) if len(self._body) != 1 else self._body[0]
        self._body = []
        coding = headers.get("Content-Encoding")
        if coding is not None and body:
            coding = coding.strip().lower()
            if coding in _CODINGS:
                try:
                    body = _decoded(body)
                except zlib.error as exc:
                    self._fail(MalformedReply(f"undecodable {coding} body ({exc})"))
                    return
            elif coding != "identity":
                self._fail(MalformedReply(f"unsupported content coding {coding[:40]!r}"))
                return
        waiter = self._waiter
        self._waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_result(Reply(self._status, headers, body))

    # ---- the parser's callbacks (llhttp) ------------------------------------------------------

    def on_message_begin(self) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():  # bytes past the reply: the stream is not trustworthy
            raise MalformedReply("bytes past the end of the reply")
        self._fields = []

    def on_header(self, name: bytes, value: bytes) -> None:
        # decoded at the head's end, all at once (a call per field is this parse's largest cost);
        # a chunked body's trailer fields come here too, after the head: nothing a BMC call reads
        self._fields.append((name, value))

    def on_headers_complete(self) -> None:
        parser = self._parser
        status = parser.get_status_code()
        if not 100 <= status <= 599:  # llhttp takes any three digits
            raise MalformedReply(f"status {status:03d} is not an HTTP status")
        if status < 200:
            if status == 101:  # llhttp would stop here for the new protocol
                raise MalformedReply("101 Switching Protocols to a request that asked for none")
            self._interims += 1
            if self._interims > _MAX_INTERIM:
                raise MalformedReply(f"over {_MAX_INTERIM} interim (1xx) replies")
            return  # llhttp reads a 1xx as a reply without a body, and goes on to the next
        raw = self._fields
        if self._received > _MAX_HEAD and sum(len(n) + len(v) for n, v in raw) > _MAX_HEAD:
            raise MalformedReply(f"reply head over {_MAX_HEAD // 1024} KiB")
        fields: CIMultiDict[str] = CIMultiDict(
            [(name.decode("latin-1"), value.decode("latin-1").strip()) for name, value in raw]
        )
        self._status = status
        self._body = []
        self._size = 0
        self._until_close = False
        self._keep = parser.should_keep_alive()
        coding = fields.get("Transfer-Encoding")
        if coding is not None and (
            coding.lower() != "chunked" or len(fields.getall("Transfer-Encoding")) > 1
        ):
            # llhttp would read any other coding as a body framed by the close, still encoded
            codings = ", ".join(fields.getall("Transfer-Encoding"))
            raise MalformedReply(f"unsupported transfer coding {codings[:40]!r}")
        length = fields.get("Content-Length")  # llhttp refuses a second one, and a bad one
        if length is not None and int(length) > MAX_REPLY:
            raise MalformedReply(f"Content-Length {length} over {MAX_REPLY} bytes")
        self._headers = fields
        if self._head_only:
            self._finish()
        elif coding is None and length is None and status not in (204, 304):
            self._until_close = True
            self._keep = False

    def on_body(self, body: bytes) -> None:
        if self._head_only:
            raise MalformedReply("a body after the head of a reply to HEAD")
        self._size += len(body)
        if self._size > MAX_REPLY:
            raise MalformedReply(f"reply over {MAX_REPLY} bytes")
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self._headers is not None and not self._head_only:
            self._finish()


#: `Content-Type` values seen -> their charset (a BMC sends one or two, on every reply)
_CHARSET_OF: dict[str, str | None] = {}


def _charset(content_type: str | None) -> str | None:
    if not content_type or ";" not in content_type:  # e.g. `application/json`
        return None
    if content_type in _CHARSET_OF:
        return _CHARSET_OF[content_type]
    charset = None
    for param in content_type.split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            charset = value.strip().strip('"') or None
            break
    if len(_CHARSET_OF) < 64:
        _CHARSET_OF[content_type] = charset
    return charset


def _orderly_end(transport: asyncio.BaseTransport | None) -> bool:
    """Whether the peer's end of the stream is its orderly close, not a cut: always over TCP; over
    TLS only after its close_notify. CPython's SSL protocol calls `eof_received` for close_notify
    before it has read the TCP FIN, and for a bare FIN after (its `_eof_received`: FIN seen). Where
    that cannot be told, the end is taken as a cut (a close-delimited body over TLS is refused)."""
    ssl_protocol = getattr(transport, "_ssl_protocol", None)
    if ssl_protocol is None:
        return transport is not None and transport.get_extra_info("sslcontext") is None
    fin_seen = getattr(ssl_protocol, "_eof_received", None)
    return fin_seen is False


def _decoded(body: bytes) -> bytes:
    """A gzip or deflate body decoded whole, within `MAX_REPLY` (a small bomb expands no further):
    a stream cut short, or bytes after its end that are not another gzip member, are errors."""
    out = b""
    rest = body
    while rest:
        if rest is not body and not rest.startswith(b"\x1f\x8b"):  # RFC 1952: members follow members
            raise zlib.error("bytes after the end of the compressed stream")
        inflater = zlib.decompressobj(47)  # gzip or zlib, told by its header
        try:
            piece = inflater.decompress(rest, MAX_REPLY + 1 - len(out))
        except zlib.error:
            if rest is not body:
                raise
            inflater = zlib.decompressobj(-15)  # raw deflate, as some send
            try:
                piece = inflater.decompress(rest, MAX_REPLY + 1)
            except zlib.error:
                raise zlib.error("neither gzip, zlib nor raw deflate") from None
        out += piece
        if len(out) > MAX_REPLY:
            raise zlib.error(f"decoded body over {MAX_REPLY} bytes")
        if not inflater.eof:
            raise zlib.error("the compressed stream is cut short")
        rest = inflater.unused_data
    return out
