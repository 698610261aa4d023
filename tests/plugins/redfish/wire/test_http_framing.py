"""`plugins.redfish._wire.http` against replies a hostile or broken peer sends: each must fail as a typed
`HttpFailure` (never a short 200, never an exception out of `data_received`) and close its connection.

The servers are `test_http_client`'s scripted raw asyncio servers (over real TLS with the test CA
where the case is about TLS); docs/redfish.md ("Framing") states the rules these tests hold.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import socket
import time
import zlib

import pytest

from bmcsim import TlsFiles
from plugins.redfish._capping.outcome import may_have_landed
from plugins.redfish._config import ConnectionSettings
from plugins.redfish._wire.errors import ConnectionFailedError, ProtocolError
from plugins.redfish._wire.http import (
    Disconnected,
    HttpConnections,
    MalformedReply,
    Origin,
    ReplyOverBound,
    ReplyTimeout,
)
from plugins.redfish._wire.transport import BmcTransport
from tests.plugins.redfish.wire.test_http_client import (
    _WAIT,
    Answer,
    RawServer,
    Serve,
    _transport,
    answer,
    get,
    ok,
    origin_for,
    serve,
    tls_files,
)

__all__ = ["serve", "tls_files"]  # fixtures, imported to be used here


# ---- a body not ended as framed -----------------------------------------------------------------


async def _bare_fin_after(server: RawServer, data: bytes) -> None:
    """Write `data` on the server's first connection, then end its TCP stream with a FIN and no TLS
    close_notify (what a BMC that crashes, or a middlebox that cuts, does)."""
    await asyncio.wait_for(server.request_seen.wait(), _WAIT)
    writer = server.writers[0]
    writer.write(data)
    await writer.drain()
    await asyncio.sleep(0.05)  # the TLS records leave before the FIN
    writer.transport.get_extra_info("socket").shutdown(socket.SHUT_WR)


@pytest.mark.parametrize("body", [b'{"SetPoint": 50', b""], ids=["half-a-body", "no-body"])
async def test_tls_body_framed_by_close_cut_by_a_bare_fin_is_disconnected(
    serve: Serve, tls_files: TlsFiles, body: bytes
) -> None:
    server = await serve(Answer(hold=True), ssl_context=tls_files.server_context())
    origin = Origin("127.0.0.1", server.port, tls_files.client_context(), 30.0)
    task = asyncio.create_task(get(origin))
    await _bare_fin_after(server, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + body)

    with pytest.raises(Disconnected, match="without TLS close_notify") as caught:
        await asyncio.wait_for(task, _WAIT)
    assert caught.value.sent is True  # a write may have landed


_GZIP_DOC = gzip.compress(b'{"PowerLimit": {"LimitInWatts": 500}}')


@pytest.mark.parametrize(
    ("reply", "status", "body"),
    [
        (b"HTTP/1.0 404 Not Found\r\n\r\n", 404, b""),  # Python's http.server: no length, no body
        (
            b"HTTP/1.1 503 Service Unavailable\r\n\r\n" + b'{"error": {"code": "Base.1.8',
            503,
            b'{"error": {"code": "Base.1.8',
        ),
        (b"HTTP/1.1 500 Internal Server Error\r\nContent-Encoding: gzip\r\n\r\n" + _GZIP_DOC[:-6], 500, b""),
        (
            b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + b' {"Id": "1"}\n',
            200,
            b' {"Id": "1"}\n',
        ),
        (b"HTTP/1.0 200 OK\r\n\r\n[1, 2]", 200, b"[1, 2]"),
        (
            b"HTTP/1.0 200 OK\r\nContent-Encoding: gzip\r\n\r\n" + _GZIP_DOC,
            200,
            b'{"PowerLimit": {"LimitInWatts": 500}}',
        ),
    ],
    ids=[
        "404-no-body",
        "503-cut-body",
        "500-cut-gzip",
        "one-json-object",
        "one-json-array",
        "gzip-at-its-end",
    ],
)
async def test_tls_close_framed_reply_that_proves_itself_whole_survives_a_bare_fin(
    serve: Serve, tls_files: TlsFiles, reply: bytes, status: int, body: bytes
) -> None:
    # an error status is the answer (its head is complete); a body whose own end shows is whole
    server = await serve(Answer(hold=True), ssl_context=tls_files.server_context())
    origin = Origin("127.0.0.1", server.port, tls_files.client_context(), 30.0)
    task = asyncio.create_task(get(origin))
    await _bare_fin_after(server, reply)

    got = await asyncio.wait_for(task, _WAIT)
    assert (got.status, got.body) == (status, body)
    assert origin.connections_opened == 1
    origin.close()


@pytest.mark.parametrize(
    "body",
    [
        b"500",  # a number cut short still parses
        b'{"SetPoint": 50}{"SetPoint": 5',  # one document, then the start of another
        b'{"SetPoint": 50} x',
        b'"text"',
        _GZIP_DOC[:-3],
        _GZIP_DOC + b"\x1f",  # the start of what may be a second member
    ],
    ids=["number", "two-documents", "trailing-bytes", "string", "gzip-cut", "gzip-then-a-byte"],
)
async def test_tls_close_framed_200_that_proves_nothing_is_disconnected(
    serve: Serve, tls_files: TlsFiles, body: bytes
) -> None:
    coding = b"Content-Encoding: gzip\r\n" if body.startswith(b"\x1f\x8b") else b""
    server = await serve(Answer(hold=True), ssl_context=tls_files.server_context())
    origin = Origin("127.0.0.1", server.port, tls_files.client_context(), 30.0)
    task = asyncio.create_task(get(origin))
    await _bare_fin_after(server, b"HTTP/1.0 200 OK\r\n" + coding + b"\r\n" + body)

    with pytest.raises(Disconnected, match="without TLS close_notify"):
        await asyncio.wait_for(task, _WAIT)


async def test_tls_bare_fin_through_the_transport_is_a_failure_that_may_have_landed(
    serve: Serve, tls_files: TlsFiles
) -> None:
    server = await serve(Answer(hold=True), ssl_context=tls_files.server_context())
    transport = BmcTransport(
        HttpConnections(30.0),
        ConnectionSettings(url=f"https://127.0.0.1:{server.port}"),
        tls_files.client_context(),
    )
    task = asyncio.create_task(transport.exchange("PATCH", "/redfish/v1/Chassis/1", {}, b'{"SetPoint": 50}'))
    await _bare_fin_after(server, b"HTTP/1.1 200 OK\r\n\r\n{")

    with pytest.raises(ConnectionFailedError, match=r"no complete reply.*close_notify") as caught:
        await asyncio.wait_for(task, _WAIT)
    assert caught.value.sent is True
    transport.close()


async def test_plain_tcp_content_length_body_cut_by_fin_is_disconnected(serve: Serve) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n"
    server = await serve(answer(head, b'{"SetPoint": 50', close=True))
    origin = origin_for(server)

    with pytest.raises(Disconnected, match=r"in its reply's body \(15 bytes read\)"):
        await get(origin)


def _gzip_reply(body: bytes) -> bytes:
    return ok(body, "Content-Encoding: gzip", "Content-Type: application/json")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (gzip.compress(b'{"SetPoint": 500}')[:12], "cut short"),
        (gzip.compress(b'{"SetPoint": 500}')[:-4], "cut short"),
        (gzip.compress(b'{"SetPoint": 500}') + b"garbage after it", "after the end"),
        (zlib.compress(b'{"SetPoint": 500}') + b"\x00", "after the end"),
    ],
    ids=["gzip-header-only", "gzip-without-trailer", "gzip-then-garbage", "zlib-then-garbage"],
)
async def test_compressed_body_not_decoded_whole_is_malformed(serve: Serve, body: bytes, reason: str) -> None:
    server = await serve(answer(_gzip_reply(body)))
    origin = origin_for(server)

    with pytest.raises(MalformedReply, match=reason):
        await get(origin)
    await server.wait_closed(0)


async def test_gzip_of_several_members_is_decoded_whole(serve: Serve) -> None:
    # RFC 1952: a gzip file is a series of members; all of them are the body
    server = await serve(answer(_gzip_reply(gzip.compress(b'{"a": 1, ') + gzip.compress(b'"b": 2}'))))
    origin = origin_for(server)

    assert (await get(origin)).body == b'{"a": 1, "b": 2}'
    origin.close()


async def test_unknown_content_coding_is_malformed(serve: Serve) -> None:
    server = await serve(answer(ok(b"\x1b\x00{}", "Content-Encoding: br")))
    origin = origin_for(server)

    with pytest.raises(MalformedReply, match="unsupported content coding 'br'"):
        await get(origin)


# ---- conflicting framing ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 15\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ],
    ids=[
        "two-lengths",
        "same-length-twice",
        "length-and-chunked",
        "chunked-and-length",
        "unknown-transfer-coding",
        "coding-before-chunked",
        "chunked-twice",
    ],
)
async def test_conflicting_framing_fails_and_closes_the_connection(serve: Serve, reply: bytes) -> None:
    # the server keeps its side open: if the connection ends, the client ended it
    server = await serve(answer(reply), answer(ok()))
    origin = origin_for(server)

    with pytest.raises(MalformedReply) as caught:
        await get(origin)
    assert caught.value.sent is True
    await server.wait_closed(0)
    await get(origin)  # the next request does not read what followed on the old connection
    assert server.connections == origin.connections_opened == 2
    origin.close()


# ---- interim replies ----------------------------------------------------------------------------


async def test_a_stream_of_100_continue_is_cut_off_long_before_the_reply_timeout(serve: Serve) -> None:
    server = await serve(answer(*[b"HTTP/1.1 100 Continue\r\n\r\n"] * 200))
    origin = origin_for(server)

    started = time.monotonic()
    with pytest.raises(ReplyOverBound, match=r"over 8 interim \(1xx\) replies") as caught:
        await origin.request("GET", "/redfish/v1", {}, None, connect_timeout=_WAIT, reply_timeout=30.0)
    assert (caught.value.bound, caught.value.limit) == ("interim replies", 8)
    assert time.monotonic() - started < 10.0  # 9 replies, 5 ms apart: far from the 30 s reply timeout
    await server.wait_closed(0)


async def test_interim_replies_in_one_flood_are_bounded_by_bytes(serve: Serve) -> None:
    big = b"HTTP/1.1 103 Early Hints\r\nLink: <" + b"x" * 60_000 + b">\r\n\r\n"
    server = await serve(answer(big + big))
    origin = origin_for(server)

    with pytest.raises(ReplyOverBound, match="reply head over 64 KiB") as caught:
        await origin.request("GET", "/redfish/v1", {}, None, connect_timeout=_WAIT, reply_timeout=30.0)
    assert caught.value.bound == "head bytes"


async def test_a_few_interim_replies_are_still_skipped(serve: Serve) -> None:
    interims = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 103 Early Hints\r\n\r\n"
    server = await serve(answer(interims, ok(b"done")), answer(ok(b"next")))
    origin = origin_for(server)

    assert (await get(origin)).body == b"done"
    assert (await get(origin)).body == b"next"
    assert origin.connections_opened == 1
    origin.close()


# ---- the status line ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "status_line",
    [
        "HTTP/1.1 ²00 OK",  # one byte in Latin-1 (0xB2): a digit to str.isdigit(), not to RFC 9112
        "HTTP/1.1 000 Zero",  # three digits, but no status: not an interim reply
        "HTTP/1.1 099 Low",
        "HTTP/1.1 600 High",
        "HTTP/1.1 20 Short",
        "HTTP/1.1 2000 Long",
        "HTTP/1.1 101 Switching Protocols",  # we asked for no upgrade
    ],
    ids=["superscript", "000", "099", "600", "two-digits", "four-digits", "101"],
)
async def test_status_not_three_ascii_digits_100_to_599_is_malformed_and_nothing_escapes(
    serve: Serve, status_line: str, caplog: pytest.LogCaptureFixture
) -> None:
    reply = f"{status_line}\r\nContent-Length: 2\r\n\r\n{{}}".encode("latin-1")
    server = await serve(answer(reply))
    origin = origin_for(server)

    with caplog.at_level(logging.DEBUG, logger="asyncio"):
        with pytest.raises(MalformedReply) as caught:
            await get(origin)
        await server.wait_closed(0)
    assert not isinstance(caught.value, ReplyTimeout)
    assert caught.value.sent is True
    # an exception out of `data_received` would be logged by asyncio ("Fatal error: protocol...")
    assert not [r for r in caplog.records if r.name == "asyncio"], caplog.text


# ---- charset ------------------------------------------------------------------------------------


@pytest.mark.parametrize("charset", ["rot13", "no-such-charset", "base64"])
async def test_reply_in_an_unknown_charset_is_a_typed_error(serve: Serve, charset: str) -> None:
    server = await serve(answer(ok(b'{"a": 1}', f"Content-Type: application/json; charset={charset}")))
    transport = _transport(f"http://127.0.0.1:{server.port}")

    with pytest.raises(ProtocolError, match=f"charset '{charset}' is no known text encoding"):
        await transport.send("GET", "/redfish/v1", {}, None)
    assert transport.in_flight == 0
    transport.close()


async def test_reply_in_a_known_charset_is_decoded_with_it(serve: Serve) -> None:
    body = '{"Name": "Gehäuse"}'.encode("latin-1")
    server = await serve(answer(ok(body, "Content-Type: application/json; charset=ISO-8859-1")))
    transport = _transport(f"http://127.0.0.1:{server.port}")

    assert (await transport.send("GET", "/redfish/v1", {}, None)).dict == {"Name": "Gehäuse"}
    transport.close()


# ---- redirects ----------------------------------------------------------------------------------


def _redirect(status: int, location: str) -> bytes:
    page = b"<html><body>moved</body></html>"  # what nginx sends: never to be read as JSON
    return (
        f"HTTP/1.1 {status} Moved\r\nLocation: {location}\r\nContent-Type: text/html\r\n"
        f"Content-Length: {len(page)}\r\n\r\n"
    ).encode() + page


def _request_lines(server: RawServer) -> list[bytes]:
    return [r.split(b"\r\n", 1)[0] for r in server.requests]


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("absolute", [False, True], ids=["relative", "absolute"])
async def test_a_read_redirected_on_the_same_origin_is_followed(
    serve: Serve, status: int, absolute: bool
) -> None:
    server = await serve(answer(), answer(ok(b'{"Id": "RootService"}')))
    location = "/redfish/v1/"
    if absolute:
        location = f"http://127.0.0.1:{server.port}{location}"
    server.answers[0] = answer(_redirect(status, location))
    transport = _transport(f"http://127.0.0.1:{server.port}")

    reply = await transport.send("GET", "/redfish/v1", {}, None)
    assert reply.status == 200 and reply.dict == {"Id": "RootService"}
    assert _request_lines(server) == [b"GET /redfish/v1 HTTP/1.1", b"GET /redfish/v1/ HTTP/1.1"]
    assert transport.connections_opened == 1 and transport.in_flight == 0
    transport.close()


async def test_a_relative_redirect_resolves_against_the_request(serve: Serve) -> None:
    server = await serve(answer(_redirect(302, "Power?x=1")), answer(ok()))
    transport = _transport(f"http://127.0.0.1:{server.port}")

    assert (await transport.exchange("GET", "/redfish/v1/Chassis/1/Thermal", {}, None)).status == 200
    assert _request_lines(server)[1] == b"GET /redfish/v1/Chassis/1/Power?x=1 HTTP/1.1"
    transport.close()


@pytest.mark.parametrize("method", ["PATCH", "POST", "PUT", "DELETE"])
async def test_a_redirected_write_is_refused_not_repeated_and_may_have_landed(
    serve: Serve, method: str
) -> None:
    server = await serve(answer(_redirect(307, "/redfish/v1/Chassis/1/Power/")), answer(ok()))
    transport = _transport(f"http://127.0.0.1:{server.port}")

    with pytest.raises(
        ProtocolError, match=f"{method} /redfish/v1/Chassis/1/Power: the BMC redirected the write"
    ) as caught:
        await transport.exchange(method, "/redfish/v1/Chassis/1/Power", {}, b'{"SetPoint": 400}')
    assert len(server.requests) == 1  # sent once, never to the new place
    assert may_have_landed(caught.value)  # the write's outcome is unknown, not "not written"
    transport.close()


@pytest.mark.parametrize(
    ("location", "reason"),
    [
        ("http://10.0.0.99/redfish/v1/", "another origin"),
        ("https://127.0.0.1:{port}/redfish/v1/", "another origin"),  # the scheme differs
        ("http://127.0.0.1:1/redfish/v1/", "another origin"),
        ("http://user@127.0.0.1:{port}/redfish/v1/", "another origin"),
        ("//evil.example/redfish/v1/", "another origin"),
        ("/login.html", "outside /redfish"),
        ("/redfish/v1/../../etc/passwd", "dot segments"),
        ("/redfish/v1/%2e%2e/AccountService", "dot segments"),
        ("/redfish/v1/Sessions%2F..%2F1", "no plain path"),
        ("http://127.0.0.1:notaport/", "no URL"),
    ],
    ids=[
        "other-host",
        "other-scheme",
        "other-port",
        "userinfo",
        "scheme-relative",
        "outside-redfish",
        "dot-segments",
        "encoded-dots",
        "encoded-slash",
        "bad-port",
    ],
)
async def test_a_redirect_off_the_bmcs_redfish_tree_is_refused(
    serve: Serve, location: str, reason: str
) -> None:
    server = await serve(answer(), answer(ok()))
    server.answers[0] = answer(_redirect(302, location.format(port=server.port)))
    transport = _transport(f"http://127.0.0.1:{server.port}")

    with pytest.raises(
        ProtocolError, match=f"GET /redfish/v1: the BMC redirected to .*{reason}; not followed"
    ):
        await transport.exchange("GET", "/redfish/v1", {}, None)
    assert len(server.requests) == 1
    transport.close()


async def test_redirects_are_followed_five_times_at_most(serve: Serve) -> None:
    server = await serve(*(answer(_redirect(302, f"/redfish/v1/{i}")) for i in range(7)))
    transport = _transport(f"http://127.0.0.1:{server.port}")

    with pytest.raises(ProtocolError, match=r"over 5 redirects \(the last 302 to '/redfish/v1/5'\)"):
        await transport.exchange("GET", "/redfish/v1", {}, None)
    assert len(server.requests) == 6
    assert transport.in_flight == 0
    transport.close()


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 300 Multiple Choices\r\nLocation: /redfish/v1/\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 304 Not Modified\r\n\r\n",
        b"HTTP/1.1 301 Moved\r\nContent-Length: 2\r\n\r\n{}",  # no Location
        b"HTTP/1.1 399 Odd\r\nContent-Length: 2\r\n\r\n{}",
    ],
    ids=["300", "304", "301-without-location", "399"],
)
async def test_a_3xx_not_followed_is_never_a_reply(serve: Serve, reply: bytes) -> None:
    server = await serve(answer(reply))
    transport = _transport(f"http://127.0.0.1:{server.port}")

    with pytest.raises(
        ProtocolError, match=r"GET /redfish/v1: the BMC answered 3\d\d \(to .*\), not a reply"
    ):
        await transport.send("GET", "/redfish/v1", {}, None)
    transport.close()
