"""One kept-alive connection to a BMC: a request's bytes out, its reply parsed (RFC 9112).

The reply's framing is read by llhttp (Node.js's HTTP parser, fuzzed upstream; through
`httptools`), and held to the rules in `plugins.redfish._wire.http` and docs/redfish.md ("Framing").
What can go wrong is an `HttpFailure` (`plugins.redfish._wire.http_failures`) that says whether the
request may have reached the BMC.
"""

from __future__ import annotations

import asyncio
import ssl
import zlib

import httptools
from multidict import CIMultiDict

from plugins.redfish._wire import off_loop
from plugins.redfish._wire.document import whole_json
from plugins.redfish._wire.http_failures import (
    Disconnected,
    HttpFailure,
    MalformedReply,
    ReplyOverBound,
    ReplyTimeout,
)
from plugins.redfish._wire.inflate import InflateOverBound, Inflater

#: a reply head (interim replies included) larger than this is not a BMC talking
_MAX_HEAD = 64 * 1024
#: fields in one head (a BMC sends a dozen or two)
MAX_HEAD_FIELDS = 256
#: interim (1xx) replies taken before the final one; a BMC sends at most a `100 Continue`
_MAX_INTERIM = 8
#: a chunked body's trailer fields, and their bytes (nothing a BMC call reads is sent there)
MAX_TRAILER_FIELDS = 32
MAX_TRAILER_BYTES = 8 * 1024
#: the largest body read by default, after any content coding is undone (Redfish replies are KiB;
#: the largest collections a few MiB); `max_document_bytes` in the plugin's config sets it
DEFAULT_MAX_BODY = 8 << 20
_CODINGS = frozenset(("gzip", "x-gzip", "deflate"))


class Reply:
    """A reply read whole: `status`, `headers` (case-insensitive), `body` (bytes, decoded from any
    content coding).

    The head's fields are kept as llhttp gave them; `headers` decodes them into a multidict on
    first use, and `header` reads one field without it: a BMC call reads two or three fields of a
    reply's dozen, and decoding every field into a multidict was most of the reply's parse.
    """

    __slots__ = ("_charset", "_content_type", "_etag", "_fields", "_headers", "body", "pending", "status")

    def __init__(
        self,
        status: int,
        fields: list[tuple[bytes, bytes]],
        body: bytes,
        pending: DeferredInflate | None = None,
        content_type: bytes | None = None,
        etag: bytes | None = None,
    ) -> None:
        """`content_type`, `etag`: the first `Content-Type` and `ETag` fields' values as sent, found
        with the framing fields (every reply's charset is asked for, and every GET's ETag)."""
        self.status = status
        self._fields = fields
        self._content_type = content_type
        self._etag = etag
        self._headers: CIMultiDict[str] | None = None
        self.body = body
        #: a compressed body still to inflate (off the event loop: `finish_off_loop`)
        self.pending = pending
        self._charset: str | bool | None = False  # False: not read yet (the transport and the text ask)

    @property
    def headers(self) -> CIMultiDict[str]:
        """Every field of the head, in order (names case-insensitive, values stripped)."""
        headers = self._headers
        if headers is None:
            headers = self._headers = CIMultiDict(
                [(name.decode("latin-1"), value.decode("latin-1").strip()) for name, value in self._fields]
            )
        return headers

    def header(self, name: str) -> str | None:
        """The first field named `name` (case-insensitively), as `headers.get(name)` gives it."""
        headers = self._headers
        if headers is not None:
            return headers.get(name)
        if name == "ETag":  # as every GET's reader spells it
            etag = self._etag
            return None if etag is None else etag.decode("latin-1").strip()
        return _first_field(self._fields, name)

    async def finish_off_loop(self) -> None:
        """Inflate the rest of a large compressed body in a worker thread (`off_loop`); raises
        `ReplyOverBound` or `MalformedReply` as inflating it inline would have."""
        pending, self.pending = self.pending, None
        if pending is not None:
            self.body = await off_loop.run(pending.inflate)

    @property
    def charset(self) -> str | None:
        """The `charset` parameter of `Content-Type`, if any."""
        charset = self._charset
        if charset is False:
            content_type = self._content_type
            charset = self._charset = _charset(
                None if content_type is None else content_type.decode("latin-1").strip()
            )
        return charset  # type: ignore[return-value]


#: field names asked for -> their lower-case bytes (a BMC call asks for the same two or three)
_FIELD_KEYS: dict[str, bytes] = {}


def _first_field(fields: list[tuple[bytes, bytes]], name: str) -> str | None:
    """The value of the first of `fields` named `name` (case-insensitively), decoded and stripped.

    Field names are tokens (llhttp refuses any other byte in one), so ASCII case folding of the
    bytes matches the multidict's."""
    key = _FIELD_KEYS.get(name)
    if key is None:
        try:
            key = name.lower().encode("ascii")
        except UnicodeEncodeError:
            return None  # no token: no field has this name
        if len(_FIELD_KEYS) < 64:
            _FIELD_KEYS[name] = key
    size = len(key)
    for field, value in fields:
        if len(field) == size and field.lower() == key:
            return value.decode("latin-1").strip()
    return None


class DeferredInflate:
    """A compressed body whose output passed `off_loop.OFF_LOOP_BYTES`: what was inflated inline,
    the rest still compressed, and the inflater (its bounds hold as they do inline)."""

    __slots__ = ("coding", "cut", "inflated", "inflater", "rest")

    def __init__(
        self, inflater: Inflater, inflated: list[bytes], rest: list[bytes], coding: str, cut: bool
    ) -> None:
        self.inflater = inflater
        self.inflated = inflated
        self.rest = rest
        self.coding = coding
        self.cut = cut

    def inflate(self) -> bytes:
        out = self.inflated
        try:
            for piece in self.rest:
                out.extend(self.inflater.feed(piece))
            out.extend(self.inflater.drain())
        except InflateOverBound as exc:
            raise ReplyOverBound(exc.bound, exc.limit, exc.what) from None
        except zlib.error as exc:
            raise MalformedReply(f"undecodable {self.coding} body ({exc})") from None
        try:
            self.inflater.finish()
        except zlib.error as exc:
            if not self.cut:
                raise MalformedReply(f"undecodable {self.coding} body ({exc})") from None
            return b""  # an error status's body cut short: dropped, as inline
        return b"".join(out)


class Connection(asyncio.Protocol):
    """One connection to a BMC, carrying one request at a time.

    The parser's callbacks (`on_*`) build the reply; `data_received` turns whatever the parser or
    a callback refuses into a `MalformedReply` for the request, and never raises. Every reply is
    read within bounds (docs/redfish.md, "Framing"): `max_body` bytes of body once any content
    coding is undone (inflated as it arrives, never more than that held), the head's fields, the
    trailer's fields and bytes, gzip members, and the bytes of chunk framing around the body.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, max_body: int = DEFAULT_MAX_BODY) -> None:
        self._loop = loop
        self._max_body = max_body
        self.transport: asyncio.Transport | None = None
        self.alive = True
        self.idle_since = 0.0
        #: the TLS object of a connection whose session its origin has not read yet (until its
        #: first reply, after which a TLS 1.3 server's session tickets have arrived)
        self.unread_tls: ssl.SSLObject | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[Reply] | None = None
        self._head_only = False
        # the reply being read
        self._received = 0  # bytes since the request was sent
        self._interims = 0
        self._fields: list[tuple[bytes, bytes]] = []  # the head's fields as llhttp gives them
        #: the final reply's fields, set once its head is read
        self._headers: list[tuple[bytes, bytes]] | None = None
        self._status = 0
        self._body: list[bytes] = []
        self._size = 0  # the body's bytes on the wire (before any content coding is undone)
        self._head_end = 0  # `_received` when the head was complete
        self._chunks = 0
        self._trailers = 0
        self._trailer_bytes = 0
        self._inflater: Inflater | None = None
        #: a compressed body's bytes left once its output passed `off_loop.OFF_LOOP_BYTES`
        self._deferred: list[bytes] | None = None
        self._coding = ""  # the content coding, lower case ("" for none or identity)
        self._content_type: bytes | None = None  # the first `Content-Type` field's value
        self._etag: bytes | None = None  # the first `ETag` field's value
        self._until_close = False  # the body is framed by the connection's end
        self._keep = True

    # ---- asyncio.Protocol ---------------------------------------------------------------------

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
                    self._fail(
                        ReplyOverBound("head bytes", _MAX_HEAD, f"reply head over {_MAX_HEAD // 1024} KiB")
                    )
            else:
                # past the head, every byte is the body's or its framing's: chunk-size lines (their
                # extensions too, which llhttp skips unseen) and trailer fields, each bounded
                framing = self._received - self._head_end - self._size
                allowed = 64 * self._chunks + MAX_TRAILER_BYTES + 1024
                if framing > allowed:
                    self._fail(
                        ReplyOverBound(
                            "framing bytes",
                            allowed,
                            f"{framing} bytes of chunk framing and trailer around {self._size} of body",
                        )
                    )
        elif self._head_only:
            # llhttp cannot be told a reply answers HEAD (it would wait for the announced body):
            # the next reply starts on a parser of its own
            self._parser = httptools.HttpResponseParser(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def eof_received(self) -> bool:
        waiter = self._waiter
        if waiter is not None and not waiter.done() and self._headers is not None and self._until_close:
            if _orderly_end(self.transport):
                self._finish()
            elif self._status >= 400:
                # its head is complete, and the status is the answer; a body cut short is dropped
                self._finish(cut=True)
            elif self._whole_without_close():
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
        self._body = []
        self._inflater = None
        self._deferred = None
        self.abort()
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _whole_without_close(self) -> bool:
        """Whether a body framed by a close that came without TLS close_notify proves itself whole:
        a compressed stream that reached its own end, or one complete JSON object or array (its
        closing bracket is its end; a number or a literal is not proof)."""
        if self._inflater is not None:
            return self._inflater.complete
        if self._coding:  # a coding this client does not undo: nothing proves it whole
            return False
        return whole_json(b"".join(self._body))

    def _finish(self, *, cut: bool = False) -> None:
        """The reply is complete: its future gets it. `cut`: the body may be short (an error status
        read from its complete head): a compressed one that did not reach its end is dropped."""
        headers = self._headers
        assert headers is not None
        inflater = self._inflater
        deferred, self._deferred = self._deferred, None
        if inflater is not None and deferred is not None:
            self._inflater = None
            pending = DeferredInflate(inflater, self._body, deferred, self._coding, cut)
            self._body = []
            waiter = self._waiter
            self._waiter = None
            if waiter is not None and not waiter.done():
                reply = Reply(self._status, headers, b"", pending, self._content_type, self._etag)
                waiter.set_result(reply)
            return
        if inflater is not None:
            self._inflater = None
            try:
                inflater.finish()
            except zlib.error as exc:
                if not cut:
                    self._fail(MalformedReply(f"undecodable {self._coding} body ({exc})"))
                    return
                self._body = []
        body = b"".join(self._body) if len(self._body) != 1 else self._body[0]
        self._body = []
        waiter = self._waiter
        self._waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_result(Reply(self._status, headers, body, None, self._content_type, self._etag))

    # ---- the parser's callbacks (llhttp) ------------------------------------------------------

    def on_message_begin(self) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():  # bytes past the reply: the stream is not trustworthy
            raise MalformedReply("bytes past the end of the reply")
        self._fields = []

    def on_header(self, name: bytes, value: bytes) -> None:
        # decoded at the head's end, all at once (a call per field is this parse's largest cost)
        if self._headers is None:
            fields = self._fields
            fields.append((name, value))
            if len(fields) > MAX_HEAD_FIELDS:
                raise ReplyOverBound(
                    "head fields", MAX_HEAD_FIELDS, f"over {MAX_HEAD_FIELDS} fields in the head"
                )
            return
        # a chunked body's trailer field: nothing a BMC call reads is sent there; counted, not kept
        self._trailers += 1
        self._trailer_bytes += len(name) + len(value)
        if self._trailers > MAX_TRAILER_FIELDS:
            raise ReplyOverBound(
                "trailer fields", MAX_TRAILER_FIELDS, f"over {MAX_TRAILER_FIELDS} trailer fields"
            )
        if self._trailer_bytes > MAX_TRAILER_BYTES:
            raise ReplyOverBound(
                "trailer bytes", MAX_TRAILER_BYTES, f"over {MAX_TRAILER_BYTES} bytes of trailer"
            )

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
                raise ReplyOverBound(
                    "interim replies", _MAX_INTERIM, f"over {_MAX_INTERIM} interim (1xx) replies"
                )
            return  # llhttp reads a 1xx as a reply without a body, and goes on to the next
        raw = self._fields
        if self._received > _MAX_HEAD and sum(len(n) + len(v) for n, v in raw) > _MAX_HEAD:
            raise ReplyOverBound("head bytes", _MAX_HEAD, f"reply head over {_MAX_HEAD // 1024} KiB")
        # the framing fields, read from the fields as llhttp gave them (all of them are decoded
        # only when a caller asks: `Reply.headers`); each as the multidict's first of that name
        coding = length = content_coding = content_type = etag = None
        codings = 0
        for name, value in raw:
            size = len(name)
            if size == 17:
                if name.lower() == b"transfer-encoding":
                    codings += 1
                    if coding is None:
                        coding = value.decode("latin-1").strip()
            elif size == 14:
                if length is None and name.lower() == b"content-length":
                    length = value.decode("latin-1").strip()
            elif size == 16:
                if content_coding is None and name.lower() == b"content-encoding":
                    content_coding = value.decode("latin-1").strip()
            elif size == 12:
                if content_type is None and name.lower() == b"content-type":
                    content_type = value
            elif size == 4:
                if etag is None and name.lower() == b"etag":
                    etag = value
        self._fields = []
        self._status = status
        self._body = []
        self._size = 0
        self._head_end = self._received
        self._chunks = self._trailers = self._trailer_bytes = 0
        self._inflater = None
        self._deferred = None
        self._until_close = False
        self._keep = parser.should_keep_alive()
        if coding is not None and (coding.lower() != "chunked" or codings > 1):
            # llhttp would read any other coding as a body framed by the close, still encoded
            codings_sent = ", ".join(Reply(status, raw, b"").headers.getall("Transfer-Encoding"))
            raise MalformedReply(f"unsupported transfer coding {codings_sent[:40]!r}")
        # llhttp refuses a second Content-Length, and a bad one
        if length is not None and int(length) > self._max_body:
            raise ReplyOverBound(
                "max_document_bytes", self._max_body, f"Content-Length {length} over {self._max_body} bytes"
            )
        if content_coding is None:  # nearly every reply
            self._coding = ""
        else:
            content_coding = content_coding.lower()
            self._coding = "" if content_coding == "identity" else content_coding
        self._headers = raw
        self._content_type = content_type
        self._etag = etag
        if self._head_only:
            self._finish()
            return
        if self._coding in _CODINGS:
            self._inflater = Inflater(self._max_body)
        if coding is None and length is None and status not in (204, 304):
            self._until_close = True
            self._keep = False

    def on_chunk_header(self) -> None:
        self._chunks += 1

    def on_body(self, body: bytes) -> None:
        if self._head_only:
            raise MalformedReply("a body after the head of a reply to HEAD")
        self._size += len(body)
        inflater = self._inflater
        if inflater is not None:
            if self._size > self._max_body:  # a compressed body is never larger than the bound either
                raise ReplyOverBound(
                    "max_document_bytes", self._max_body, f"reply over {self._max_body} bytes"
                )
            if self._deferred is not None:
                self._deferred.append(body)
                return
            # NOTE: inflated inline up to `off_loop.OFF_LOOP_BYTES` of output (its member and
            # size bounds refuse a bomb as it arrives); what is left may inflate to megabytes, so
            # it is inflated in a worker thread once the reply is whole. A body framed by the
            # close is inflated as it comes (its stream's end proves its end).
            budget = None if self._until_close else max(1, off_loop.OFF_LOOP_BYTES - inflater.out)
            try:
                pieces = inflater.feed(body, budget)
            except InflateOverBound as exc:
                raise ReplyOverBound(exc.bound, exc.limit, exc.what) from None
            except zlib.error as exc:
                raise MalformedReply(f"undecodable {self._coding} body ({exc})") from None
            self._body.extend(pieces)
            if inflater.paused is not None:
                self._deferred = [inflater.paused]
            return
        if self._coding:
            raise MalformedReply(f"unsupported content coding {self._coding[:40]!r}")
        if self._size > self._max_body:
            raise ReplyOverBound("max_document_bytes", self._max_body, f"reply over {self._max_body} bytes")
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
