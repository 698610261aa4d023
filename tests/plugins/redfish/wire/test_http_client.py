"""`plugins.redfish._wire.http` against real sockets: reply framings, kept-alive connections, failures, TLS.

Most tests run a raw asyncio server that answers each request with exact bytes, so every framing the
client claims to read (Content-Length, chunked, close-delimited, interim 1xx, content codings, no-body
replies) is fed to it as a BMC would send it, split or whole. The server counts connections and signals
each request and each closed connection, so the tests wait on events instead of sleeping. One test
talks to Python's own `http.server` as an independent implementation.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import shutil
import socket
import ssl
import struct
import subprocess
import threading
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from bench.ports import free_port as _free_port
from bmcsim import TlsFiles, ensure_tls_files
from plugins.redfish._config import ConnectionSettings
from plugins.redfish._wire.errors import ConnectionFailedError, ProtocolError, RequestTimeoutError
from plugins.redfish._wire.http import (
    ConnectFailure,
    Disconnected,
    HttpConnections,
    MalformedReply,
    Origin,
    Reply,
    ReplyOverBound,
    ReplyTimeout,
    TlsFailure,
)
from plugins.redfish._wire.transport import BmcTransport

#: generous bounds: a test that fails waits this long at most, one that passes never does
_WAIT = 2.0
_TIMEOUTS = {"connect_timeout": _WAIT, "reply_timeout": _WAIT}


@dataclass
class Answer:
    """What the server does with one request: write `parts` in order (pausing between them so they
    arrive as separate reads), then close the connection if `close`. `hold`: never answer."""

    parts: Sequence[bytes] = ()
    close: bool = False
    hold: bool = False


def answer(*parts: bytes, close: bool = False) -> Answer:
    return Answer(parts, close=close)


@dataclass
class RawServer:
    """An HTTP/1.1 server of scripted replies on 127.0.0.1: each request, on whatever connection, gets
    the next `Answer`. Records the request heads and signals requests and closed connections."""

    answers: list[Answer]
    port: int = 0
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    #: one event per connection, set when it ended (closed by the client, or by an `Answer`'s close)
    closed: list[asyncio.Event] = field(default_factory=list)
    request_seen: asyncio.Event = field(default_factory=asyncio.Event)
    #: parts of `Answer`s written so far (a part written after the client closed does not count)
    parts_written: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        closed = asyncio.Event()
        self.closed.append(closed)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                self.requests.append(head + body)
                self.request_seen.set()
                step = self.answers.pop(0)
                if step.hold:
                    await reader.read()  # until the client gives up on it
                    break
                for i, part in enumerate(step.parts):
                    if i:
                        await asyncio.sleep(0.005)  # separate TCP segments, separate reads
                    if writer.is_closing():
                        break
                    writer.write(part)
                    await writer.drain()
                    self.parts_written += 1
                if step.close:
                    writer.close()
                    await reader.read()
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            closed.set()
            writer.close()

    async def wait_closed(self, index: int) -> None:
        """Until the client has closed connection `index` (0-based)."""
        await asyncio.wait_for(self.closed[index].wait(), _WAIT)


Serve = Callable[..., Awaitable[RawServer]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Factory: `await serve(answer, ...)` starts a `RawServer` (closed after the test)."""
    servers: list[asyncio.Server] = []
    raws: list[RawServer] = []

    async def start(*answers: Answer, ssl_context: ssl.SSLContext | None = None) -> RawServer:
        raw = RawServer(list(answers))
        server = await asyncio.start_server(raw.handle, "127.0.0.1", 0, ssl=ssl_context)
        raw.port = server.sockets[0].getsockname()[1]
        servers.append(server)
        raws.append(raw)
        return raw

    yield start
    for raw in raws:  # connections a test left open (held replies)
        for writer in raw.writers:
            writer.close()
    for server in servers:
        server.close()
        await server.wait_closed()


def origin_for(server: RawServer, *, keepalive_timeout: float = 30.0, keepalive: bool = True) -> Origin:
    return Origin("127.0.0.1", server.port, None, keepalive_timeout, keepalive=keepalive)


async def get(origin: Origin, target: str = "/redfish/v1", method: str = "GET") -> Reply:
    return await origin.request(method, target, {"Accept": "application/json"}, None, **_TIMEOUTS)


def ok(body: bytes = b"{}", *extra: str) -> bytes:
    """A complete Content-Length reply."""
    head = "".join(f"{h}\r\n" for h in extra)
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode() + body


# ---- framings ---------------------------------------------------------------------------------


async def test_content_length_reply_split_across_writes_and_kept_alive(serve: Serve) -> None:
    body = b'{"Id": "1", "Name": "System"}'
    whole = ok(body, "Content-Type: application/json; charset=utf-8")
    cut = whole.index(b"\r\n\r\n") + 2  # between the two CRLFs that end the head
    server = await serve(
        answer(whole[:7], whole[7:cut], whole[cut : cut + 5], whole[cut + 5 :]), answer(ok())
    )
    origin = origin_for(server)

    reply = await get(origin)
    assert (reply.status, reply.body, reply.charset) == (200, body, "utf-8")
    assert (await get(origin)).body == b"{}"
    assert server.connections == origin.connections_opened == 1
    origin.close()


async def test_empty_content_length_body(serve: Serve) -> None:
    server = await serve(answer(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"), answer(ok()))
    origin = origin_for(server)

    assert (await get(origin)).body == b""
    assert (await get(origin)).body == b"{}"  # the empty body did not eat the next reply
    assert origin.connections_opened == 1
    origin.close()


async def test_chunked_body_with_extensions_and_trailers(serve: Serve) -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunks = b'4;x=y\r\n{"a"\r\n6\r\n: 1, "\r\n7;name="v"\r\nb": 22}\r\n'
    # the last chunk and its trailers arrive in pieces: the reply ends only at the blank line
    server = await serve(
        answer(head + chunks[:9], chunks[9:], b"0;end=1\r\nExpires: never\r\n", b"X-Trailer: 1\r\n", b"\r\n"),
        answer(head + b"2\r\nok\r\n0\r\n\r\n"),
    )
    origin = origin_for(server)

    assert (await get(origin)).body == b'{"a": 1, "b": 22}'
    assert (await get(origin)).body == b"ok"  # the trailers were consumed, not read as a reply
    assert origin.connections_opened == 1
    origin.close()


async def test_bytes_past_a_chunked_reply_stop_its_connection_being_reused(serve: Serve) -> None:
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"
    server = await serve(answer(chunked + b"HTTP/1.1 200 OK\r\n"), answer(chunked))
    origin = origin_for(server)

    assert (await get(origin)).body == b"ok"
    assert (await get(origin)).body == b"ok"
    assert origin.connections_opened == 2  # the stray bytes could have been read as the next reply
    origin.close()


async def test_body_ended_by_close_is_read_and_its_connection_not_reused(serve: Serve) -> None:
    server = await serve(answer(b'HTTP/1.1 200 OK\r\n\r\n{"half": ', b"1}", close=True), answer(ok()))
    origin = origin_for(server)

    assert (await get(origin)).body == b'{"half": 1}'
    assert (await get(origin)).body == b"{}"
    assert server.connections == origin.connections_opened == 2


async def test_interim_100_continue_is_skipped(serve: Serve) -> None:
    server = await serve(
        answer(b"HTTP/1.1 100 Continue\r\n\r\n", ok(b"done")),
        answer(b"HTTP/1.1 100 Continue\r\nX-Note: 1\r\n\r\n" + ok(b"again")),  # both in one read
    )
    origin = origin_for(server)

    reply = await get(origin)
    assert (reply.status, reply.body) == (200, b"done")
    assert (await get(origin)).body == b"again"
    assert origin.connections_opened == 1
    origin.close()


def _raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-15)
    return packer.compress(data) + packer.flush()


@pytest.mark.parametrize(
    ("coding", "pack"),
    [("gzip", gzip.compress), ("deflate", zlib.compress), ("deflate", _raw_deflate)],
    ids=["gzip", "deflate-zlib", "deflate-raw"],
)
async def test_content_coding_is_undone(serve: Serve, coding: str, pack: Callable[[bytes], bytes]) -> None:
    body = json.dumps({"Members": [{"@odata.id": f"/redfish/v1/Chassis/{i}"} for i in range(50)]}).encode()
    packed = pack(body)
    assert packed != body
    server = await serve(answer(ok(packed, f"Content-Encoding: {coding}")))
    origin = origin_for(server)

    assert (await get(origin)).body == body
    origin.close()


async def test_undecodable_coding_is_a_malformed_reply(serve: Serve) -> None:
    server = await serve(answer(ok(b"not gzip at all", "Content-Encoding: gzip")))
    origin = origin_for(server)

    with pytest.raises(MalformedReply, match="undecodable gzip"):
        await get(origin)
    await server.wait_closed(0)


@pytest.mark.parametrize(
    ("method", "reply"),
    [
        ("HEAD", b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nContent-Type: application/json\r\n\r\n"),
        ("GET", b"HTTP/1.1 204 No Content\r\n\r\n"),
        ("GET", b'HTTP/1.1 304 Not Modified\r\nETag: "7"\r\nContent-Length: 1234\r\n\r\n'),
    ],
    ids=["HEAD", "204", "304"],
)
async def test_replies_without_a_body(serve: Serve, method: str, reply: bytes) -> None:
    server = await serve(answer(reply), answer(ok(b"next")))
    origin = origin_for(server)

    # a client that waited for the announced 1234 bytes would time out here
    first = await origin.request(method, "/redfish/v1", {}, None, connect_timeout=_WAIT, reply_timeout=_WAIT)
    assert first.body == b""
    assert (await get(origin)).body == b"next"  # and the connection is still in step
    assert origin.connections_opened == 1
    origin.close()


async def test_connection_close_header_is_honoured(serve: Serve) -> None:
    # the server keeps its side open: only the client can have closed it
    server = await serve(answer(ok(b"bye", "Connection: close")), answer(ok()))
    origin = origin_for(server)

    assert (await get(origin)).body == b"bye"
    await server.wait_closed(0)
    await get(origin)
    assert server.connections == origin.connections_opened == 2
    origin.close()


async def test_http_10_reply_without_keep_alive_is_not_reused(serve: Serve) -> None:
    server = await serve(
        answer(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"),
        answer(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nka"),
        answer(ok()),
    )
    origin = origin_for(server)

    assert (await get(origin)).body == b"ok"
    await server.wait_closed(0)
    assert (await get(origin)).body == b"ka"  # HTTP/1.0 asking for keep-alive: kept
    await get(origin)
    assert server.connections == origin.connections_opened == 2
    origin.close()


async def test_one_field_is_read_as_the_multidict_reads_it_without_building_it(serve: Serve) -> None:
    head = (
        "HTTP/1.1 200 OK\r\n"
        'etag:  "v1" \r\n'
        "X-Repeat: first\r\n"
        "CONTENT-TYPE: application/json;charset=ISO-8859-1\r\n"
        "x-repeat: second\r\n"
        'ETag: "v2"\r\n'
        "Content-Length: 12\r\n"
        "\r\n"
    )
    server = await serve(answer(head.encode() + b'{"Id": "1"} '))
    origin = origin_for(server)

    reply = await get(origin)
    names = ["ETag", "etag", "X-REPEAT", "content-type", "Content-Length", "Location", "Gehäuse", ""]
    read = {name: reply.header(name) for name in names}
    assert reply.charset == "ISO-8859-1"
    assert read == {name: reply.headers.get(name) for name in names}  # built only now
    assert read["ETag"] == '"v1"' and read["X-REPEAT"] == "first" and read["Location"] is None
    assert reply.headers.getall("x-repeat") == ["first", "second"]
    assert reply.header("etag") == '"v1"'  # once built, read from the multidict
    origin.close()


# ---- kept-alive connections -------------------------------------------------------------------


async def test_sequential_requests_share_one_connection(serve: Serve) -> None:
    server = await serve(answer(ok(b"1")), answer(ok(b"2")))
    origin = origin_for(server)

    assert [(await get(origin)).body for _ in range(2)] == [b"1", b"2"]
    assert server.connections == origin.connections_opened == 1
    assert server.requests[1].startswith(b"GET /redfish/v1 HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"Connection: close" not in server.requests[1]
    origin.close()


async def test_idle_connection_is_closed_after_keepalive_timeout(serve: Serve) -> None:
    server = await serve(answer(ok()), answer(ok()))
    origin = origin_for(server, keepalive_timeout=0.05)

    await get(origin)
    await server.wait_closed(0)  # the idle sweep closed it, without any request to prompt it
    await get(origin)
    assert server.connections == origin.connections_opened == 2
    origin.close()


async def test_expired_idle_connection_is_not_taken(serve: Serve) -> None:
    server = await serve(answer(ok()), answer(ok()))
    origin = origin_for(server, keepalive_timeout=0.05)

    await get(origin)
    # past the timeout by the clock, before the sweep had its turn on the loop (time.sleep blocks it)
    time.sleep(0.06)  # noqa: ASYNC251 (blocking the loop is the point)
    await get(origin)
    assert origin.connections_opened == 2
    origin.close()


async def test_keepalive_off_sends_connection_close(serve: Serve) -> None:
    server = await serve(answer(ok()), answer(ok()))
    origin = origin_for(server, keepalive=False)

    await get(origin)
    assert b"\r\nConnection: close\r\n" in server.requests[0]
    await server.wait_closed(0)  # the server kept it open; the client closed it
    await get(origin)
    assert server.connections == origin.connections_opened == 2


# ---- failures ---------------------------------------------------------------------------------


async def test_refused_connection_is_a_connect_failure_not_sent() -> None:
    # a bound socket that does not listen: its port refuses, and no other test can take it meanwhile
    with socket.socket() as idle:
        idle.bind(("127.0.0.1", 0))
        origin = Origin("127.0.0.1", idle.getsockname()[1], None, 30.0)
        with pytest.raises(ConnectFailure) as caught:
            await get(origin)
    assert caught.value.sent is False
    assert isinstance(caught.value.os_error, ConnectionRefusedError)
    assert origin.connections_opened == 0


async def test_silent_server_is_a_reply_timeout_and_the_connection_dropped(serve: Serve) -> None:
    server = await serve(Answer(hold=True))
    origin = origin_for(server)

    started = time.monotonic()
    with pytest.raises(ReplyTimeout, match=r"no reply within 0\.1 s") as caught:
        await origin.request("GET", "/", {}, None, connect_timeout=_WAIT, reply_timeout=0.1)
    assert 0.1 <= time.monotonic() - started < 1.0
    assert caught.value.sent is True
    await server.wait_closed(0)


async def test_each_request_keeps_its_own_reply_timeout_under_one_timer_per_bmc(serve: Serve) -> None:
    """Requests in flight on one BMC share one timer, armed for the earliest reply deadline: a
    later request with a shorter timeout still times out on time, the earlier one on its own,
    and one answered meanwhile is not touched."""
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    server = await serve(Answer(hold=True), Answer(hold=True), answer(ok), answer(ok))
    origin = origin_for(server)

    async def timed(reply_timeout: float) -> float:
        started = time.monotonic()
        with pytest.raises(ReplyTimeout, match=f"no reply within {reply_timeout:g} s"):
            await origin.request("GET", "/", {}, None, connect_timeout=_WAIT, reply_timeout=reply_timeout)
        return time.monotonic() - started

    slow = asyncio.create_task(timed(0.8))
    await asyncio.wait_for(server.request_seen.wait(), _WAIT)
    server.request_seen.clear()
    fast = asyncio.create_task(timed(0.1))
    await asyncio.wait_for(server.request_seen.wait(), _WAIT)
    answered = await origin.request("GET", "/", {}, None, connect_timeout=_WAIT, reply_timeout=0.3)
    assert answered.status == 200
    assert 0.1 <= await fast < 0.6
    assert 0.8 <= await slow < 2.0
    await asyncio.sleep(0.4)  # past the answered request's own deadline: its connection lives on
    assert origin.connections_opened == 3
    again = await origin.request("GET", "/", {}, None, connect_timeout=_WAIT, reply_timeout=_WAIT)
    assert again.status == 200
    assert origin.connections_opened == 3, "the answered request's connection was reused"


@pytest.mark.parametrize(
    "parts",
    [
        (b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"partial":',),
        (b"HTTP/1.1 200 OK\r\nContent-Le",),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",),
        (),
    ],
    ids=["in-body", "in-head", "between-chunks", "before-reply"],
)
async def test_close_mid_reply_is_disconnected(serve: Serve, parts: tuple[bytes, ...]) -> None:
    server = await serve(Answer(parts, close=True))
    origin = origin_for(server)

    with pytest.raises(Disconnected) as caught:
        await get(origin)
    assert caught.value.sent is True


async def _partial_close_delimited_reply(server: RawServer, origin: Origin) -> asyncio.Task[Reply]:
    """A request whose reply head (no Content-Length: framed by the close) and part of its body
    have been read by the client; the server holds the rest."""
    task = asyncio.create_task(get(origin))
    await asyncio.wait_for(server.request_seen.wait(), _WAIT)
    server.writers[0].write(b'HTTP/1.1 200 OK\r\n\r\n{"cut": ')
    # wait until the client has parsed the head: the only way to know the bytes reached it
    async with asyncio.timeout(_WAIT):
        while not any(conn._headers is not None for conn in origin._busy):  # noqa: ASYNC110 (no event to wait on)
            await asyncio.sleep(0.001)
    return task


async def test_reset_cuts_a_close_delimited_body_short(serve: Serve) -> None:
    # a body framed by the close is complete at an orderly close only; a reset means it was cut
    server = await serve(Answer(hold=True))
    origin = origin_for(server)
    task = await _partial_close_delimited_reply(server, origin)

    transport = server.writers[0].transport
    transport.get_extra_info("socket").setsockopt(
        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
    )
    transport.abort()  # closed with linger 0: a TCP reset
    with pytest.raises(Disconnected):
        await asyncio.wait_for(task, _WAIT)


async def test_origin_close_fails_a_close_delimited_reply_in_progress(serve: Serve) -> None:
    server = await serve(Answer(hold=True))
    origin = origin_for(server)
    task = await _partial_close_delimited_reply(server, origin)

    origin.close()  # the caller gets `Disconnected`, not the half a body read so far
    with pytest.raises(Disconnected):
        await asyncio.wait_for(task, _WAIT)


@pytest.mark.parametrize(
    "reply",
    [
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
        b"HTTP/2 200\r\n\r\n",
        b"HTTP/1.1 OK 200\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
        # what int() would accept but RFC 9112 does not: signs, prefixes, digit separators
        b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1_0\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\nok\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\nok\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokXY0\r\n\r\n",
    ],
    ids=[
        "not-http",
        "http2",
        "status-not-a-number",
        "bad-header",
        "signed-length",
        "length-with-separator",
        "negative-chunk",
        "prefixed-chunk",
        "chunk-without-crlf",
    ],
)
async def test_garbage_is_a_malformed_reply_and_the_connection_dropped(serve: Serve, reply: bytes) -> None:
    server = await serve(answer(reply))
    origin = origin_for(server)

    with pytest.raises(MalformedReply):
        await get(origin)
    await server.wait_closed(0)


async def test_header_with_a_line_break_is_refused_before_sending(serve: Serve) -> None:
    server = await serve(answer(ok()), answer(ok(b"third")))
    origin = origin_for(server)
    await get(origin)

    with pytest.raises(ValueError, match=r"header 'If-Match' holds a line break"):
        await origin.request(
            "PATCH",
            "/x",
            {"If-Match": 'W/"1"\r\nX-Injected: 1'},
            b"{}",
            connect_timeout=_WAIT,
            reply_timeout=_WAIT,
        )
    # a lone CR or LF, in a value or a name, after fields that are fine
    for fields in (
        {"Accept": "application/json", "If-Match": 'W/"1"\rX'},
        {"Accept": "application/json", "If-Match": 'W/"1"\nX'},
        {"Accept": "application/json", "X-Bad\r\nName": "1"},
    ):
        bad = next(name for name in fields if name != "Accept")
        with pytest.raises(ValueError, match=re.escape(f"header {bad!r} holds a line break")):
            await origin.request("GET", "/x", fields, None, connect_timeout=_WAIT, reply_timeout=_WAIT)
    # the kept connection carries the next request as its second: nothing was written in between
    assert (await get(origin, "/third")).body == b"third"
    assert [r.split(b"\r\n", 1)[0] for r in server.requests] == [
        b"GET /redfish/v1 HTTP/1.1",
        b"GET /third HTTP/1.1",
    ]
    assert not any(b"X-Injected" in r for r in server.requests)
    assert origin.connections_opened == 1
    origin.close()


async def test_cancelled_caller_closes_its_connection(serve: Serve) -> None:
    server = await serve(Answer(hold=True), answer(ok(b"fresh")))
    origin = origin_for(server)
    task = asyncio.create_task(get(origin))
    await asyncio.wait_for(server.request_seen.wait(), _WAIT)

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await server.wait_closed(0)  # a late reply could otherwise be read as the next request's
    assert (await get(origin)).body == b"fresh"
    assert server.connections == origin.connections_opened == 2
    origin.close()


# ---- TLS --------------------------------------------------------------------------------------


def _unchecked() -> ssl.SSLContext:
    """What an `insecure` device connects with: no certificate or host name check."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return ensure_tls_files(tmp_path_factory.mktemp("http-client-tls"))


async def test_tls_with_the_ca_works_and_system_store_rejects(serve: Serve, tls_files: TlsFiles) -> None:
    server = await serve(
        answer(ok(b"secure")), answer(ok(b"insecure")), ssl_context=tls_files.server_context()
    )
    http = HttpConnections(30.0)
    url = f"https://127.0.0.1:{server.port}"

    assert (await get(http.origin(url, tls_files.client_context()))).body == b"secure"

    with pytest.raises(TlsFailure) as caught:
        await get(http.origin(url, ssl.create_default_context()))  # the system store: no test CA
    assert caught.value.sent is False
    assert isinstance(caught.value.verification, ssl.SSLCertVerificationError)
    assert "certificate" in str(caught.value)

    assert (await get(http.origin(url, _unchecked()))).body == b"insecure"
    await http.close()


async def test_tls_body_ended_by_close(serve: Serve, tls_files: TlsFiles) -> None:
    # over TLS the BMC's close comes as close_notify, then the TCP close: still an orderly end
    server = await serve(
        answer(b"HTTP/1.1 200 OK\r\n\r\n", b'{"tls": 1}', close=True), ssl_context=tls_files.server_context()
    )
    origin = Origin("127.0.0.1", server.port, tls_files.client_context(), 30.0)

    assert (await get(origin)).body == b'{"tls": 1}'
    assert origin.connections_opened == 1


# ---- an independent server --------------------------------------------------------------------


class _JsonHandler(BaseHTTPRequestHandler):
    """A tiny Redfish-like resource: GET reads it, PATCH merges into it (HTTP/1.0: one request per
    connection)."""

    resource: dict[str, Any] = {}
    connections = 0

    def setup(self) -> None:
        type(self).connections += 1
        super().setup()

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._reply(200, {"@odata.id": self.path, **self.resource})

    def do_PATCH(self) -> None:
        patch = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.resource.update(patch)
        self._reply(200, {"@odata.id": self.path, **self.resource})

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def json_server() -> Iterator[tuple[ThreadingHTTPServer, type[_JsonHandler]]]:
    handler = type("Handler", (_JsonHandler,), {"resource": {"PowerLimitWatts": 700}, "connections": 0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield server, handler
    server.shutdown()
    server.server_close()
    thread.join()


async def test_http_server_json_get_and_patch(
    json_server: tuple[ThreadingHTTPServer, type[_JsonHandler]],
) -> None:
    server, handler = json_server
    origin = Origin("127.0.0.1", server.server_address[1], None, 30.0)
    path = "/redfish/v1/Chassis/1/EnvironmentMetrics"

    first = await get(origin, path)
    assert first.status == 200 and first.headers["Content-Type"] == "application/json"
    assert json.loads(first.body) == {"@odata.id": path, "PowerLimitWatts": 700}

    body = json.dumps({"PowerLimitWatts": 650}).encode()
    headers = {"Content-Type": "application/json"}
    patched = await origin.request("PATCH", path, headers, body, connect_timeout=_WAIT, reply_timeout=_WAIT)
    assert json.loads(patched.body) == {"@odata.id": path, "PowerLimitWatts": 650}
    assert json.loads((await get(origin, path)).body)["PowerLimitWatts"] == 650

    # HTTP/1.0 replies close their connection: one per request
    assert origin.connections_opened == handler.connections == 3


# ---- through the transport ---------------------------------------------------------------------


def _transport(url: str, **settings: Any) -> BmcTransport:
    return BmcTransport(HttpConnections(300.0), ConnectionSettings(url=url, **settings), _unchecked())


async def test_transport_maps_refused_and_silent_bmcs(serve: Serve) -> None:
    with socket.socket() as idle:
        idle.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{idle.getsockname()[1]}"
        with pytest.raises(ConnectionFailedError, match="cannot connect") as refused:
            await _transport(url).exchange("GET", "/redfish/v1", {}, None)
    assert refused.value.sent is False

    server = await serve(Answer(hold=True))
    url = f"http://127.0.0.1:{server.port}"
    transport = _transport(url, read_timeout=0.1)
    with pytest.raises(RequestTimeoutError, match=r"no reply within 0\.1 s") as silent:
        await transport.exchange("GET", "/redfish/v1", {}, None)
    assert silent.value.sent is True
    await server.wait_closed(0)
    transport.close()


async def test_transport_refuses_a_header_with_a_line_break_as_a_protocol_error(serve: Serve) -> None:
    server = await serve()
    url = f"http://127.0.0.1:{server.port}"
    transport = _transport(url)
    with pytest.raises(
        ProtocolError, match=r"PATCH /redfish/v1/x: header 'If-Match' holds a line break; not sent"
    ):
        await transport.exchange("PATCH", "/redfish/v1/x", {"If-Match": '"a"\r\nX: 1'}, b"{}")
    assert transport.in_flight == 0  # the slot was given back
    transport.close()


# ---- size bound -------------------------------------------------------------------------------

#: 1 MB of zeros, gzip'd to about 1 KiB
_BOMB = gzip.compress(bytes(1_000_000))


@pytest.mark.parametrize(
    "parts",
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n",),  # refused from the head alone
        (b"HTTP/1.1 200 OK\r\n\r\n", b"x" * 3000),  # a body that ends only with the connection
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"400\r\n" + b"x" * 1024 + b"\r\n",
            b"400\r\n" + b"x" * 1024 + b"\r\n",
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(_BOMB), _BOMB),
    ],
    ids=["content-length", "close-delimited", "chunked", "gzip-bomb"],
)
async def test_a_reply_over_the_size_bound_is_refused_and_its_connection_dropped(
    serve: Serve, parts: tuple[bytes, ...]
) -> None:
    server = await serve(answer(*parts))
    # the default bound is 8 MiB (`max_document_bytes`); a bomb's decoded bytes count against it
    origin = Origin("127.0.0.1", server.port, None, 30.0, max_body=2000)

    with pytest.raises(
        ReplyOverBound, match=r"over 2000 bytes \(bound max_document_bytes = 2000\)"
    ) as caught:
        await get(origin)
    assert (caught.value.bound, caught.value.limit, caught.value.sent) == ("max_document_bytes", 2000, True)
    await server.wait_closed(0)


# ---- a server that is not Python: OpenSSL's own ---------------------------------------------


def _cert_args(tls: TlsFiles) -> list[str]:
    return ["-cert", str(tls.cert), "-key", str(tls.key)]


@pytest.fixture
def openssl_www(tls_files: TlsFiles, tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """`openssl s_server -WWW` (OpenSSL's TLS stack and its HTTP/1.0 file server, written in C)
    serving `tmp_path/www` with the test CA's certificate: (port, document root)."""
    tool = shutil.which("openssl")
    if tool is None:
        pytest.skip("openssl not installed (Debian: apt-get install openssl)")
    root = tmp_path / "www"
    root.mkdir()
    port = _free_port()
    server = subprocess.Popen(
        [tool, "s_server", "-quiet", "-WWW", "-accept", f"127.0.0.1:{port}", *_cert_args(tls_files)],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + _WAIT
        while True:  # until it listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("openssl s_server did not start") from None
                time.sleep(0.05)
        yield port, root
    finally:
        server.kill()
        server.wait()


async def test_openssl_s_server_over_tls(openssl_www: tuple[int, Path], tls_files: TlsFiles) -> None:
    port, root = openssl_www
    (root / "redfish").mkdir()
    service_root = {"@odata.id": "/redfish/v1", "Id": "RootService", "RedfishVersion": "1.17.0"}
    (root / "redfish" / "v1.json").write_text(json.dumps(service_root))
    http = HttpConnections(30.0)
    origin = http.origin(f"https://127.0.0.1:{port}", tls_files.client_context())

    # HTTP/1.0, no Content-Length: the body ends with OpenSSL's close_notify and TCP close
    for expected_connections in (1, 2):
        reply = await get(origin, "/redfish/v1.json")
        assert reply.status == 200 and json.loads(reply.body) == service_root
        assert origin.connections_opened == expected_connections  # HTTP/1.0: never reused

    with pytest.raises(TlsFailure) as caught:  # OpenSSL's certificate, our system trust store
        await get(http.origin(f"https://127.0.0.1:{port}", ssl.create_default_context()), "/redfish/v1.json")
    assert caught.value.verification is not None
    await http.close()
