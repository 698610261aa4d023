"""A gzip or deflate body undone as it arrives (RFC 9110 content coding), linear in its bytes and
within bounds: the bytes it inflates to, and the gzip members it holds."""

from __future__ import annotations

import zlib

#: gzip members in one body (RFC 1952 allows a series; a server sends one)
MAX_GZIP_MEMBERS = 16


class InflateOverBound(Exception):
    """A body past a bound while inflating: `bound` names it, `limit` is its value."""

    def __init__(self, bound: str, limit: int, what: str) -> None:
        super().__init__(what)
        self.bound = bound
        self.limit = limit
        self.what = what


class Inflater:
    """A gzip or deflate body undone as it arrives, linear in its bytes and bounded: at most `limit`
    bytes out (a small bomb expands no further), at most `MAX_GZIP_MEMBERS` gzip members (each a
    new stream), and a stream cut short, or bytes after its end that are not another gzip member,
    are errors (`zlib.error`, `InflateOverBound`)."""

    __slots__ = ("_fed", "_held", "_limit", "_members", "_out", "_probe", "_stream", "paused")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._out = 0
        self._members = 1
        self._stream = zlib.decompressobj(47)  # gzip or zlib, told by its header
        #: what the first stream took before it gave any output: if its header turns out to be
        #: neither gzip's nor zlib's, the body is read again as raw deflate (as some servers send)
        self._probe: bytearray | None = bytearray()
        self._held = b""  # bytes after a stream's end, too few to tell whether a member follows
        self._fed = False
        #: the compressed bytes a `feed` with a budget left unread once its output reached the
        #: budget (None: it read all it was given); fed again later (off the event loop)
        self.paused: bytes | None = None

    @property
    def out(self) -> int:
        """The bytes inflated so far."""
        return self._out

    @property
    def complete(self) -> bool:
        """Whether the body so far ends exactly at the end of its last stream."""
        return self._stream.eof and not self._held

    def feed(self, data: bytes, budget: int | None = None) -> list[bytes]:
        """The decoded bytes of `data` (the body's next bytes on the wire). With a `budget`, at
        most about that many: the compressed bytes not read then are left in `paused`."""
        out: list[bytes] = []
        produced = 0
        self.paused = None
        self._fed = self._fed or bool(data)
        if self._held:
            data, self._held = self._held + data, b""
        while data:
            stream = self._stream
            if stream.eof:  # RFC 1952: members follow members
                if len(data) < 2:
                    self._held = data
                    break
                if not data.startswith(b"\x1f\x8b"):
                    raise zlib.error("bytes after the end of the compressed stream")
                self._members += 1
                if self._members > MAX_GZIP_MEMBERS:
                    raise InflateOverBound(
                        "gzip members", MAX_GZIP_MEMBERS, f"over {MAX_GZIP_MEMBERS} gzip members in one body"
                    )
                stream = self._stream = zlib.decompressobj(31)
            cap = self._limit + 1 - self._out
            if budget is not None:
                cap = min(cap, max(1, budget - produced))
            try:
                piece = stream.decompress(data, cap)
            except zlib.error:
                probe = self._probe
                if probe is None:
                    raise
                self._probe = None
                stream = self._stream = zlib.decompressobj(-15)
                try:
                    piece = stream.decompress(bytes(probe) + data, self._limit + 1 - self._out)
                except zlib.error:
                    raise zlib.error("neither gzip, zlib nor raw deflate") from None
            self._out += len(piece)
            if self._out > self._limit:
                raise InflateOverBound(
                    "max_document_bytes", self._limit, f"decoded body over {self._limit} bytes"
                )
            if self._probe is not None:
                if piece or len(self._probe) > 4096 or stream.eof:
                    self._probe = None
                else:
                    self._probe += data
            if piece:
                out.append(piece)
            produced += len(piece)
            if budget is not None and produced >= budget and not stream.eof:
                self.paused = stream.unconsumed_tail  # the rest of `data`, not read yet
                break
            # below the limit, the stream took all of `data`: what is left is past its end
            data = stream.unused_data if stream.eof else b""
        return out

    def drain(self) -> list[bytes]:
        """Output a stream still holds after a `feed` that stopped at its budget."""
        stream = self._stream
        if stream.eof or self._held:
            return []
        piece = stream.decompress(b"", self._limit + 1 - self._out)
        self._out += len(piece)
        if self._out > self._limit:
            raise InflateOverBound(
                "max_document_bytes", self._limit, f"decoded body over {self._limit} bytes"
            )
        return [piece] if piece else []

    def finish(self) -> None:
        """The body ended: raise `zlib.error` unless it ended exactly at its last stream's end."""
        if self._held:
            raise zlib.error("bytes after the end of the compressed stream")
        if self._fed and not self._stream.eof:  # an empty body (204, say) is no stream at all
            raise zlib.error("the compressed stream is cut short")
