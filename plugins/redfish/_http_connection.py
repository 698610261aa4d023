"""One kept-alive connection to a BMC: a request's bytes out, its reply parsed (RFC 9112).

The framing rules and why this client exists: `plugins.redfish._http`. What can go wrong is an
`HttpFailure` that says whether the request may have reached the BMC.
"""

from __future__ import annotations

import asyncio
import ssl
import zlib

from multidict import CIMultiDict

#: a reply head larger than this is not a BMC talking
_MAX_HEAD = 64 * 1024
#: statuses whose replies have no body (RFC 9112 §6.3)
_NO_BODY = frozenset((204, 304))
_HEX_DIGITS = b"0123456789abcdefABCDEF"
#: the largest reply read (Redfish replies are KiB; the largest collections a few MiB)
MAX_REPLY = 32 << 20


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
    """The BMC closed the connection before its reply was complete."""


class MalformedReply(HttpFailure):
    """The bytes that came back are not an HTTP/1.x reply this client can read."""


class Reply:
    """A reply read whole: `status`, `headers` (case-insensitive), `body` (bytes, decoded from any
    content coding)."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: CIMultiDict[str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def charset(self) -> str | None:
        """The `charset` parameter of `Content-Type`, if any."""
        content_type = self.headers.get("Content-Type")
        if not content_type or ";" not in content_type:  # most replies: `application/json`
            return None
        for param in content_type.split(";")[1:]:
            name, _, value = param.partition("=")
            if name.strip().lower() == "charset":
                return value.strip().strip('"') or None
        return None


class Connection(asyncio.Protocol):
    """One connection to a BMC, carrying one request at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self.alive = True
        self.idle_since = 0.0
        self._buffer = bytearray()
        self._waiter: asyncio.Future[Reply] | None = None
        self._head_only = False
        # the reply being read: head parsed?, status, headers, body framing
        self._status = 0
        self._headers: CIMultiDict[str] | None = None
        self._length = -1  # bytes of body expected; -1: chunked; -2: until the connection closes
        self._chunks = bytearray()
        self._keep = True

    # ---- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:  # nothing asked: a BMC talking out of turn; never reuse this one
            self.close()
            return
        self._buffer += data
        if len(self._buffer) + len(self._chunks) > MAX_REPLY:  # a BMC streaming without end
            self._fail(MalformedReply(f"reply over {MAX_REPLY} bytes"))
            return
        try:
            self._parse()
        except MalformedReply as exc:
            self._fail(exc)

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        closed_here = not self.alive  # close() or abort() on this side: whatever was coming is cut
        self.alive = False
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._headers is not None and self._length == -2 and exc is None and not closed_here:
            self._finish(bytes(self._buffer))  # a body framed by the BMC's orderly close: complete now
            return
        reason = f" ({exc})" if exc else ""
        waiter.set_exception(Disconnected(f"the BMC closed the connection without a complete reply{reason}"))
        self._waiter = None

    # ---- requests -----------------------------------------------------------------------------

    def send(self, request: bytes, head_only: bool) -> asyncio.Future[Reply]:
        """Write one request; the future completes with its reply."""
        assert self.transport is not None and self._waiter is None
        waiter = self._loop.create_future()
        self._waiter = waiter
        self._head_only = head_only
        self._headers = None
        self._buffer.clear()
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

    def _finish(self, body: bytes) -> None:
        headers = self._headers
        assert headers is not None
        coding = headers.get("Content-Encoding", "").strip().lower()
        if coding in ("gzip", "deflate", "x-gzip") and body:
            try:
                body = _decoded(body)
            except zlib.error as exc:
                self._fail(MalformedReply(f"undecodable {coding} body ({exc})"))
                return
        waiter = self._waiter
        self._waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_result(Reply(self._status, headers, body))

    # ---- parsing ------------------------------------------------------------------------------

    def _parse(self) -> None:
        buf = self._buffer
        while self._headers is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > _MAX_HEAD:
                    raise MalformedReply("reply head over 64 KiB")
                return
            head = bytes(buf[:end]).decode("latin-1")
            del buf[: end + 4]
            if self._read_head(head):
                break
        if self._length >= 0:
            if len(buf) >= self._length:
                body = bytes(buf[: self._length])
                extra = len(buf) > self._length
                buf.clear()
                if extra:
                    self._keep = False  # bytes past the reply: the stream is not trustworthy
                self._finish(body)
        elif self._length == -1:
            self._parse_chunks()
        # -2: the body ends when the connection does (connection_lost)

    def _read_head(self, head: str) -> bool:
        """Take one reply head; False for an interim (1xx) reply, which is skipped."""
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise MalformedReply(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        status = int(parts[1])
        if status < 200:
            return False
        headers: CIMultiDict[str] = CIMultiDict()
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise MalformedReply(f"malformed header line: {line[:80]!r}")
            headers.add(name, value.strip())
        self._status = status
        self._headers = headers
        connection = headers.get("Connection", "").lower()
        self._keep = "close" not in connection and (parts[0] != "HTTP/1.0" or "keep-alive" in connection)
        if self._head_only or status in _NO_BODY:
            self._length = 0
        elif "chunked" in headers.get("Transfer-Encoding", "").lower():
            self._length = -1
            self._chunks.clear()
        elif "Content-Length" in headers:
            length = headers["Content-Length"]
            if not (length.isascii() and length.isdigit()):  # int() would take "+1", "1_0", " -1"
                raise MalformedReply(f"bad Content-Length {length[:20]!r}")
            self._length = int(length)
            if self._length > MAX_REPLY:
                raise MalformedReply(f"Content-Length {self._length} over {MAX_REPLY} bytes")
        else:
            self._length = -2
            self._keep = False
        return True

    def _parse_chunks(self) -> None:
        buf = self._buffer
        while True:
            line_end = buf.find(b"\r\n")
            if line_end < 0:
                return
            size_text = bytes(buf[:line_end]).split(b";", 1)[0].strip()
            if not size_text or size_text.strip(_HEX_DIGITS):  # int() would take "-1", "0x1", "1_0"
                raise MalformedReply(f"bad chunk size {size_text[:20]!r}")
            size = int(size_text, 16)
            if size == 0:
                end = buf.find(b"\r\n\r\n", line_end)  # the size line's CRLF, trailers, CRLF
                if end < 0:
                    return  # the trailers (or the final CRLF) are still coming
                if len(buf) > end + 4:
                    self._keep = False  # bytes past the reply: the stream is not trustworthy
                buf.clear()
                body = bytes(self._chunks)
                self._chunks.clear()
                self._finish(body)
                return
            start = line_end + 2
            if len(buf) < start + size + 2:
                return
            if buf[start + size : start + size + 2] != b"\r\n":
                raise MalformedReply("chunk data not followed by CRLF")
            self._chunks += buf[start : start + size]
            del buf[: start + size + 2]


def _decoded(body: bytes) -> bytes:
    """A gzip or deflate body decoded, within `MAX_REPLY` (a small bomb expands no further)."""
    for wbits in (47, -15):  # 47: gzip or zlib, told by its header; -15: raw deflate, as some send
        inflater = zlib.decompressobj(wbits)
        try:
            out = inflater.decompress(body, MAX_REPLY + 1)
        except zlib.error:
            continue
        if len(out) > MAX_REPLY:
            raise zlib.error(f"decoded body over {MAX_REPLY} bytes")
        return out
    raise zlib.error("neither gzip, zlib nor raw deflate")
