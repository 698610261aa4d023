"""Replies within bounds: a BMC's reply cannot stall the event loop or bloat the process.

Each hostile reply below comes from a real TLS peer (`test_http_client`'s scripted raw server with
the test CA), is refused with a typed error that names its bound (`ReplyOverBound` on the wire,
`ReplyBoundError` through the transport and `BmcClient`), and is refused while it arrives: a
healthy call to another BMC, started beside it, completes, and a coroutine that only counts its
own turns keeps getting them (progress, not wall-clock time). docs/redfish.md ("Framing") states
the bounds.
"""

from __future__ import annotations

import asyncio
import gzip
import time
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import pytest

from bmcsim import TlsFiles
from plugins.base import InvalidRequestError
from plugins.redfish._client.client import BmcClient
from plugins.redfish._config import ConnectionSettings, RedfishSettings
from plugins.redfish._plugin_config import settings_from
from plugins.redfish._wire.document import (
    MAX_CONTAINERS,
    MAX_NESTING,
    MAX_VALUES,
    loads,
    past_bound,
    too_deep,
)
from plugins.redfish._wire.errors import ProtocolError, ReplyBoundError
from plugins.redfish._wire.http import HttpConnections, Origin, ReplyOverBound
from plugins.redfish._wire.http_connection import (
    DEFAULT_MAX_BODY,
    MAX_HEAD_FIELDS,
    MAX_TRAILER_BYTES,
    MAX_TRAILER_FIELDS,
)
from plugins.redfish._wire.inflate import MAX_GZIP_MEMBERS
from plugins.redfish._wire.transport import BmcTransport
from tests.plugins.redfish.wire.test_http_client import (
    _WAIT,
    RawServer,
    Serve,
    answer,
    get,
    ok,
    serve,
    tls_files,
)

__all__ = ["serve", "tls_files"]  # fixtures, imported to be used here

_JSON = "Content-Type: application/json"


class Turns:
    """A coroutine that does nothing but count its turns on the event loop: it advances only while
    no callback holds the loop."""

    def __init__(self) -> None:
        self.count = 0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Turns:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()

    async def _run(self) -> None:
        while True:
            self.count += 1
            await asyncio.sleep(0)


async def refused_beside_a_healthy_call(
    serve: Serve, tls_files: TlsFiles, hostile: Awaitable[Any]
) -> BaseException:
    """Run `hostile` (a call to a BMC sending a hostile reply) beside a call to a healthy BMC and a
    `Turns`: the hostile one's exception. The healthy call must complete with its reply, and the
    loop must have given other coroutines turns while the hostile reply was read."""
    healthy = await serve(answer(ok(b'{"Id": "healthy"}', _JSON)), ssl_context=tls_files.server_context())
    origin = Origin("127.0.0.1", healthy.port, tls_files.client_context(), 30.0)
    async with Turns() as turns:
        results = await asyncio.wait_for(
            asyncio.gather(hostile, get(origin), return_exceptions=True), _WAIT * 5
        )
        turns_seen = turns.count
    origin.close()
    refused, reply = results
    assert not isinstance(reply, BaseException), reply
    assert reply.body == b'{"Id": "healthy"}'
    assert turns_seen > 1  # the other coroutine ran while both replies were read
    assert isinstance(refused, BaseException), f"the hostile reply was taken: {refused!r}"
    return refused


@pytest.fixture
async def tls_server(serve: Serve, tls_files: TlsFiles) -> AsyncIterator[Any]:
    async def start(*parts: bytes) -> RawServer:
        return await serve(answer(*parts), ssl_context=tls_files.server_context())

    yield start


def _transport(server: RawServer, tls_files: TlsFiles, http: HttpConnections | None = None) -> BmcTransport:
    return BmcTransport(
        http or HttpConnections(30.0),
        ConnectionSettings(url=f"https://127.0.0.1:{server.port}"),
        tls_files.client_context(),
    )


def _in_parts(data: bytes, size: int = 64 << 10) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


# ---- gzip members ----------------------------------------------------------------------------


async def test_a_hundred_thousand_empty_gzip_members_are_refused_at_the_member_bound(
    serve: Serve, tls_server: Any, tls_files: TlsFiles
) -> None:
    empty_member = gzip.compress(b"")
    body = empty_member * 100_000  # about 2 MB; it decodes to nothing
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nContent-Encoding: gzip\r\n{_JSON}\r\n\r\n"
    parts = [head.encode(), *_in_parts(body)]
    server = await tls_server(*parts)
    transport = _transport(server, tls_files)

    refused = await refused_beside_a_healthy_call(
        serve, tls_files, transport.exchange("GET", "/redfish/v1/Chassis/1", {}, None)
    )
    assert isinstance(refused, ReplyBoundError), refused
    assert (refused.bound, refused.limit, refused.sent) == ("gzip members", MAX_GZIP_MEMBERS, True)
    await server.wait_closed(0)
    assert server.parts_written < len(parts)  # refused while it arrived, not read to its end
    assert f"over {MAX_GZIP_MEMBERS} gzip members" in str(refused)
    transport.close()


async def test_a_few_gzip_members_are_still_one_body(tls_server: Any, tls_files: TlsFiles) -> None:
    members = [gzip.compress(b'{"a": %d, ' % i) for i in range(MAX_GZIP_MEMBERS - 1)]
    body = b"".join(members) + gzip.compress(b'"end": 1}')
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nContent-Encoding: gzip\r\n\r\n".encode()
    # split inside members and between a member's end and the next one's magic bytes
    server = await tls_server(head + body[:25], body[25:31], body[31:])
    origin = Origin("127.0.0.1", server.port, tls_files.client_context(), 30.0)

    reply = await get(origin)
    assert reply.body.startswith(b'{"a": 0, {"a": 1, ') and reply.body.endswith(b'"end": 1}')
    origin.close()


async def test_an_empty_decoded_body_is_no_document(tls_server: Any, tls_files: TlsFiles) -> None:
    body = gzip.compress(b"")
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nContent-Encoding: gzip\r\n{_JSON}\r\n\r\n"
    server = await tls_server(head.encode() + body)
    client = BmcClient(HttpConnections(30.0), _basic(server), tls_files.client_context())

    with pytest.raises(ProtocolError, match=r"the reply has no body \(a JSON document was expected\)"):
        await client.get("/redfish/v1/Chassis/1", deadline=time.monotonic() + _WAIT)
    client.transport.close()


# ---- decoded size --------------------------------------------------------------------------------


async def test_32_kib_of_gzip_inflating_to_32_mib_is_refused_while_inflating(
    serve: Serve, tls_server: Any, tls_files: TlsFiles
) -> None:
    inflated = b"[" + b"{}," * ((32 << 20) // 3) + b"{}]"
    body = gzip.compress(inflated, 9)
    assert len(body) < 200 << 10  # a small reply on the wire
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nContent-Encoding: gzip\r\n{_JSON}\r\n\r\n"
    server = await tls_server(head.encode(), *_in_parts(body, 16 << 10))
    transport = _transport(server, tls_files)

    refused = await refused_beside_a_healthy_call(
        serve, tls_files, transport.exchange("GET", "/redfish/v1/Systems", {}, None)
    )
    assert isinstance(refused, ReplyBoundError), refused
    assert (refused.bound, refused.limit) == ("max_document_bytes", DEFAULT_MAX_BODY)
    assert f"decoded body over {DEFAULT_MAX_BODY} bytes" in str(refused)
    transport.close()


async def test_the_document_bound_comes_from_the_plugin_config(serve: Serve, tls_files: TlsFiles) -> None:
    settings = settings_from({"max_document_bytes": 100_000}, RedfishSettings())
    assert settings.max_document_bytes == 100_000
    with pytest.raises(InvalidRequestError, match="config: max_document_bytes"):
        settings_from({"max_document_bytes": 10}, RedfishSettings())  # below 64 KiB: no Redfish service

    document = b'{"Members": [' + b'{"@odata.id": "/redfish/v1/x"},' * 4000 + b"{}]}"  # 132 KB
    context = tls_files.server_context()
    server = await serve(answer(ok(document, _JSON)), answer(ok(document, _JSON)), ssl_context=context)
    http = HttpConnections(30.0, settings.max_document_bytes)
    with pytest.raises(ReplyBoundError, match=r"Content-Length \d+ over 100000 bytes") as caught:
        await _transport(server, tls_files, http).exchange("GET", "/redfish/v1/Systems", {}, None)
    assert caught.value.bound == "max_document_bytes"

    roomier = HttpConnections(30.0, 200_000)
    reply = await _transport(server, tls_files, roomier).exchange("GET", "/redfish/v1/Systems", {}, None)
    assert reply.body == document
    await roomier.close()


# ---- nesting depth -----------------------------------------------------------------------------


def _basic(server: RawServer) -> ConnectionSettings:
    return ConnectionSettings(
        url=f"https://127.0.0.1:{server.port}", username="admin", password="pw", auth="basic", max_attempts=1
    )


_NESTED = b'{"a": ' + b"[" * 9000 + b"]" * 9000 + b"}"  # 18 KB; Python's parser recurses per level


async def test_18_kb_of_nested_json_is_a_typed_error_from_bmcclient_get(
    serve: Serve, tls_server: Any, tls_files: TlsFiles
) -> None:
    server = await tls_server(ok(_NESTED, _JSON))
    client = BmcClient(HttpConnections(30.0), _basic(server), tls_files.client_context())

    refused = await refused_beside_a_healthy_call(
        serve, tls_files, client.get("/redfish/v1/Chassis/1", deadline=time.monotonic() + _WAIT)
    )
    assert isinstance(refused, ReplyBoundError), refused
    assert (refused.bound, refused.limit) == ("nesting depth", MAX_NESTING)
    assert f"JSON nested deeper than {MAX_NESTING} levels (bound nesting depth = {MAX_NESTING})" in str(
        refused
    )
    client.transport.close()


async def test_nested_json_at_login_is_a_typed_error(tls_server: Any, tls_files: TlsFiles) -> None:
    # the DMTF client's login reads the service root first: that reply is the deep one
    server = await tls_server(ok(_NESTED, _JSON))
    settings = ConnectionSettings(
        url=f"https://127.0.0.1:{server.port}", username="admin", password="pw", max_attempts=1
    )
    client = BmcClient(HttpConnections(30.0), settings, tls_files.client_context())

    with pytest.raises(ReplyBoundError, match="nested deeper than") as caught:
        await client.get("/redfish/v1/Chassis/1", deadline=time.monotonic() + _WAIT)
    assert caught.value.bound == "nesting depth"
    client.transport.close()


def test_a_flat_array_of_millions_of_values_is_past_the_value_bound() -> None:
    with pytest.raises(ValueError, match=f"bound JSON values = {MAX_VALUES}"):
        loads(b"[" + b"1," * (MAX_VALUES + 1) + b"1]")
    assert len(loads(b"[" + b"1," * 1000 + b"1]")) == 1001
    # the bound exactly, over a body just long enough to hold it, and commas inside strings
    assert past_bound(b"[" + b"1," * MAX_VALUES + b"1]") is None
    assert past_bound(b'["' + b"," * MAX_VALUES + b'"]') is None
    over = past_bound(b'["' + b"," * (MAX_VALUES + 1) + b'"]')  # counted, not parsed: a bound
    assert over is not None and over.bound == "JSON values"
    assert past_bound(b"," * MAX_VALUES) is None


async def test_8_mib_of_nested_arrays_is_refused_at_the_container_bound(
    serve: Serve, tls_server: Any, tls_files: TlsFiles
) -> None:
    # within the byte bound and nested 51 deep at most, yet millions of arrays: parsing it would
    # hold the loop for seconds
    group = b"[" * 50 + b"]" * 50
    body = b"[" + b",".join([group] * ((DEFAULT_MAX_BODY - 8) // 101)) + b"]"
    server = await tls_server(ok(body, _JSON))
    client = BmcClient(HttpConnections(30.0), _basic(server), tls_files.client_context())

    refused = await refused_beside_a_healthy_call(
        serve, tls_files, client.get("/redfish/v1/Systems", deadline=time.monotonic() + _WAIT)
    )
    assert isinstance(refused, ReplyBoundError), refused
    assert (refused.bound, refused.limit) == ("JSON containers", MAX_CONTAINERS)
    client.transport.close()


@pytest.mark.parametrize(
    ("text", "deep"),
    [
        (b'{"a": [[1, 2], {"b": {}}]}', False),
        (b"[" * MAX_NESTING + b"]" * MAX_NESTING, False),
        (b"[" * (MAX_NESTING + 1) + b"]" * (MAX_NESTING + 1), True),
        (b'{"s": "' + b"[" * 5000 + b'"}', False),  # brackets inside a string are no nesting
        (b'{"s": "\\"' + b"{" * 5000 + b'"}', False),  # nor after an escaped quote
        (b"[{}," * 5000 + b"{}" + b"]" * 5000, True),
        (b"[" + b"{}," * 50_000 + b"{}]", False),  # many brackets, shallow
        (b"[" * 9000, True),  # never closed: a parser recurses into each before it fails
        (b'{"a": [' + b"[1]," * 100 + b"[2]", False),  # cut short, shallow: plain invalid JSON
        ((b"[" * MAX_NESTING + b"]" * MAX_NESTING + b",") * 1000, False),  # deep often, never past
    ],
    ids=[
        "redfish-like",
        "at-the-bound",
        "past-it",
        "in-a-string",
        "escaped-quote",
        "deep-mixed",
        "wide",
        "never-closed",
        "cut-short",
        "at-the-bound-often",
    ],
)
def test_nesting_is_measured_not_guessed(text: bytes, deep: bool) -> None:
    assert too_deep(text) is deep
    if deep:
        with pytest.raises(ValueError, match="bound nesting depth"):
            loads(text)
    else:
        try:
            loads(text)  # parses, or is invalid JSON: never RecursionError
        except ValueError as exc:
            assert "nested" not in str(exc)


# ---- head and trailer fields -------------------------------------------------------------------


async def test_a_chunked_body_followed_by_megabytes_of_trailer_fields_is_refused(
    serve: Serve, tls_server: Any, tls_files: TlsFiles
) -> None:
    trailer = b"X-T: 1\r\n" * (28 << 20 >> 3)  # 28 MB of small trailer fields
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
    parts = [head + b"2\r\n{}\r\n0\r\n", *_in_parts(trailer, 1 << 20), b"\r\n"]
    server = await tls_server(*parts)
    transport = _transport(server, tls_files)

    refused = await refused_beside_a_healthy_call(
        serve, tls_files, transport.exchange("GET", "/redfish/v1/Chassis/1", {}, None)
    )
    assert isinstance(refused, ReplyBoundError), refused
    assert (refused.bound, refused.limit) == ("trailer fields", MAX_TRAILER_FIELDS)
    await server.wait_closed(0)
    assert server.parts_written < len(parts)  # refused while it arrived: no 28 MB kept
    transport.close()


@pytest.mark.parametrize(
    ("trailer", "bound", "limit"),
    [
        (b"X-T: " + b"v" * (MAX_TRAILER_BYTES + 10) + b"\r\n\r\n", "trailer bytes", MAX_TRAILER_BYTES),
        (b"X-T: " + b"v" * (2 << 20), "framing bytes", None),  # one field that never ends
    ],
    ids=["one-large-field", "a-field-without-end"],
)
async def test_a_large_trailer_field_is_refused(
    tls_server: Any, tls_files: TlsFiles, trailer: bytes, bound: str, limit: int | None
) -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n"
    server = await tls_server(head, *_in_parts(trailer))
    origin = Origin("127.0.0.1", server.port, tls_files.client_context(), 30.0)

    with pytest.raises(ReplyOverBound) as caught:
        await get(origin)
    assert caught.value.bound == bound
    if limit is not None:
        assert caught.value.limit == limit


async def test_a_few_trailer_fields_are_still_read(tls_server: Any, tls_files: TlsFiles) -> None:
    trailers = b"".join(b"X-T%d: 1\r\n" % i for i in range(MAX_TRAILER_FIELDS))
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n"
    server = await tls_server(head + trailers + b"\r\n")
    origin = Origin("127.0.0.1", server.port, tls_files.client_context(), 30.0)

    reply = await get(origin)
    assert reply.body == b"{}" and "X-T0" not in reply.headers  # trailers are not the head's fields
    origin.close()


async def test_chunk_extensions_without_end_are_refused(tls_server: Any, tls_files: TlsFiles) -> None:
    # llhttp reads a chunk's extensions without a callback: only the framing bound sees them
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;x="
    server = await tls_server(head, *_in_parts(b"y" * (1 << 20)))
    origin = Origin("127.0.0.1", server.port, tls_files.client_context(), 30.0)

    with pytest.raises(ReplyOverBound) as caught:
        await get(origin)
    assert caught.value.bound == "framing bytes"


async def test_a_head_of_too_many_fields_is_refused(tls_server: Any, tls_files: TlsFiles) -> None:
    fields = b"".join(b"A: 1\r\n" for _ in range(MAX_HEAD_FIELDS + 1))
    server = await tls_server(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n" + fields + b"\r\n{}")
    origin = Origin("127.0.0.1", server.port, tls_files.client_context(), 30.0)

    with pytest.raises(ReplyOverBound, match=f"over {MAX_HEAD_FIELDS} fields") as caught:
        await get(origin)
    assert (caught.value.bound, caught.value.limit) == ("head fields", MAX_HEAD_FIELDS)


async def test_a_reply_is_bounds_scanned_once_and_parsed_from_its_text(
    tls_server: Any, tls_files: TlsFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the transport scans each reply's bytes as it comes; `BmcClient.get` parses that reply's text
    # without a second scan (nor encoding the text back to bytes for one)
    import plugins.redfish._wire.document as document_module
    import plugins.redfish._wire.transport as transport_module

    scanned: list[bytes] = []
    real = document_module.past_bound

    def counted(body: bytes) -> Any:
        scanned.append(body)
        return real(body)

    monkeypatch.setattr(transport_module, "past_bound", counted)
    monkeypatch.setattr(document_module, "past_bound", counted)
    body = (
        b'{"Id": "1", "Name": "caf\xc3\xa9", "PowerLimitWatts": {"SetPoint": 500, "AllowableMax": [[[1]]]}}'
    )
    server = await tls_server(ok(body, _JSON))
    client = BmcClient(HttpConnections(30.0), _basic(server), tls_files.client_context())
    doc = await client.get("/redfish/v1/Chassis/1", deadline=time.monotonic() + _WAIT)
    assert doc.body["Name"] == "café" and doc.body["PowerLimitWatts"]["SetPoint"] == 500
    assert scanned == [body]  # once, the bytes as they came
    client.transport.close()
