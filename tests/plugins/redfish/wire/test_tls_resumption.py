"""TLS session resumption (`plugins.redfish._wire.tls_sessions`) against real TLS servers.

Each server here is a real TLS endpoint with a certificate from the test CA: a small asyncio server
(Python's `ssl`, OpenSSL) that records, from its own side, whether each connection resumed a
session; nginx in front of it; and the HTTPS BMC simulator behind the whole plugin. The client
reads `session_reused` from its own side; the server's record is the independent witness.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from bmcsim import TlsFiles, ensure_tls_files
from plugins.base import Empty
from plugins.redfish._wire import tls_sessions
from plugins.redfish._wire.http import (
    RESUME_GIVE_UP,
    ConnectFailure,
    HttpConnections,
    Origin,
    Reply,
    TlsFailure,
)
from tests.plugins.redfish.harness import Harness
from tests.plugins.redfish.wire.nginx_front import NginxFront, nginx_or_skip

_WAIT = 5.0
_TIMEOUTS = {"connect_timeout": _WAIT, "reply_timeout": _WAIT}
_BODY = b'{"@odata.id": "/redfish/v1/"}'


@dataclass
class TlsServer:
    """HTTPS on 127.0.0.1 answering every request with `_BODY` and `Connection: close` (so each
    request is a new connection), recording per connection whether the server resumed a session."""

    context: ssl.SSLContext
    port: int = 0
    resumed: list[bool] = field(default_factory=list)
    server: asyncio.Server | None = None

    async def start(self, port: int = 0) -> TlsServer:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", port, ssl=self.context)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tls = writer.get_extra_info("ssl_object")
        self.resumed.append(bool(tls is not None and tls.session_reused))
        try:
            await reader.readuntil(b"\r\n\r\n")
            head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(_BODY)}\r\nConnection: close\r\n\r\n"
            writer.write(head.encode() + _BODY)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


Serve = Callable[..., Awaitable[TlsServer]]


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return ensure_tls_files(tmp_path_factory.mktemp("resumption-tls"))


@pytest.fixture(scope="module")
def other_ca_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    """A second CA and a server certificate from it (same names: 127.0.0.1, localhost)."""
    return ensure_tls_files(tmp_path_factory.mktemp("resumption-other-ca"))


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Factory: `await serve(context)` starts a `TlsServer` (stopped after the test)."""
    servers: list[TlsServer] = []

    async def start(context: ssl.SSLContext, port: int = 0) -> TlsServer:
        server = await TlsServer(context).start(port)
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.stop()


async def get(origin: Origin, target: str = "/redfish/v1/") -> Reply:
    return await origin.request("GET", target, {"Accept": "application/json"}, None, **_TIMEOUTS)


def handshakes(resumed: bool) -> float:
    value = REGISTRY.get_sample_value(
        "devicectl_bmc_tls_handshakes_total", {"resumed": "true" if resumed else "false"}
    )
    return value or 0.0


async def test_a_reconnect_resumes_the_origins_session_and_counts_it(
    serve: Serve, tls_files: TlsFiles
) -> None:
    server = await serve(tls_files.server_context())
    http = HttpConnections(30.0)
    origin = http.origin(server.url, tls_files.client_context())
    full, resumed = handshakes(False), handshakes(True)

    for _ in range(3):  # the server closes each connection after its reply: three connections
        assert (await get(origin)).body == _BODY

    assert origin.connections_opened == 3
    assert origin.tls_resumed == 2  # the client's `ssl_object.session_reused`, counted
    assert server.resumed == [False, True, True]  # and the server's own side agrees
    assert (handshakes(False) - full, handshakes(True) - resumed) == (1, 2)
    await http.close()


async def test_tls_1_2_resumes_too(serve: Serve, tls_files: TlsFiles) -> None:
    context = tls_files.server_context()
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    server = await serve(context)
    origin = Origin("127.0.0.1", server.port, tls_files.client_context(), 30.0)

    for _ in range(2):
        await get(origin)
    assert server.resumed == [False, True]
    assert origin.tls_resumed == 1
    origin.close()


async def test_a_server_that_issues_no_tickets_gets_full_handshakes(
    serve: Serve, tls_files: TlsFiles
) -> None:
    context = tls_files.server_context()
    context.num_tickets = 0  # TLS 1.3 without session tickets: nothing a client could resume
    server = await serve(context)
    origin = Origin("127.0.0.1", server.port, tls_files.client_context(), 30.0)

    for _ in range(2):
        assert (await get(origin)).body == _BODY
    assert origin.tls_session is None  # a session without a ticket is not kept
    assert server.resumed == [False, False]
    assert origin.tls_resumed == 0
    origin.close()


async def test_a_session_is_never_offered_to_another_origin(serve: Serve, tls_files: TlsFiles) -> None:
    # two ports served by one TLS context, so one ticket key: either would resume the other's session
    shared = tls_files.server_context()
    first, second = await serve(shared), await serve(shared)
    client = tls_files.client_context()  # one context for both, as the pool shares one per CA bundle
    http = HttpConnections(30.0)
    a, b = http.origin(first.url, client), http.origin(second.url, client)

    await get(a)
    await get(b)
    assert a.tls_session is not None and b.tls_session is not None
    assert a.tls_session != b.tls_session
    assert (a.tls_resumed, b.tls_resumed) == (0, 0)
    assert first.resumed == second.resumed == [False]

    # that isolation is the origin's doing: the second server would have taken the first's session
    b.tls_session = a.tls_session
    await get(b)
    assert second.resumed == [False, True]
    await http.close()


async def test_a_changed_certificate_fails_verification_as_before_and_drops_the_session(
    serve: Serve, tls_files: TlsFiles, other_ca_files: TlsFiles
) -> None:
    server = await serve(tls_files.server_context())
    port = server.port
    origin = Origin("127.0.0.1", port, tls_files.client_context(), 30.0)
    await get(origin)
    assert origin.tls_session is not None

    # the BMC comes back with a certificate from a CA the client does not trust
    await server.stop()
    impostor = await serve(other_ca_files.server_context(), port)
    with pytest.raises(TlsFailure) as caught:
        await get(origin)
    assert isinstance(caught.value.verification, ssl.SSLCertVerificationError)
    assert caught.value.sent is False
    assert origin.tls_session is None  # a failed handshake drops what the origin kept
    assert impostor.resumed == []  # no connection got past the handshake

    # the trusted certificate again (a restarted server: new ticket keys): a full, verified handshake
    await impostor.stop()
    restored = await serve(tls_files.server_context(), port)
    assert (await get(origin)).body == _BODY
    assert restored.resumed == [False]
    assert origin.tls_session is not None
    origin.close()


def _offers_a_session(record: bytes) -> bool:
    """Whether a TLS record holding a ClientHello carries the `pre_shared_key` extension (41, RFC 8446
    §4.2.11): a TLS 1.3 client offering a session ticket."""
    i = 5 + 4 + 2 + 32  # record header, handshake header, legacy_version, random
    i += 1 + record[i]  # legacy_session_id
    i += 2 + int.from_bytes(record[i : i + 2], "big")  # cipher_suites
    i += 1 + record[i]  # legacy_compression_methods
    end = i + 2 + int.from_bytes(record[i : i + 2], "big")
    i += 2
    while i + 4 <= end:
        kind, size = int.from_bytes(record[i : i + 2], "big"), int.from_bytes(record[i + 2 : i + 4], "big")
        if kind == 41:
            return True
        i += 4 + size
    return False


@dataclass
class SessionRefusingFront:
    """A TCP relay in front of a TLS server that ends every handshake offering a session: with a
    fatal `handshake_failure` alert (`alert`), or by resetting the connection (`reset`), as broken
    BMC TLS stacks do. Other handshakes pass through to the server untouched."""

    upstream_port: int
    how: str
    #: offers refused at most (None: every one)
    refuse_at_most: int | None = None
    refused: int = 0
    relayed: int = 0
    port: int = 0
    server: asyncio.Server | None = None

    async def start(self) -> SessionRefusingFront:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readexactly(5)
        record = head + await reader.readexactly(int.from_bytes(head[3:5], "big"))
        if _offers_a_session(record) and (self.refuse_at_most is None or self.refused < self.refuse_at_most):
            self.refused += 1
            if self.how == "alert":
                writer.write(bytes([21, 3, 3, 0, 2, 2, 40]))  # alert record: fatal, handshake_failure
                await writer.drain()
                writer.close()
            else:
                writer.transport.abort()
            return
        self.relayed += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        up_writer.write(record)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    except ConnectionError:
        pass
    finally:
        sink.close()


@pytest.mark.parametrize("how", ["alert", "reset"])
async def test_a_bmc_that_fails_resumed_handshakes_is_reconnected_without_and_no_longer_offered(
    serve: Serve, tls_files: TlsFiles, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = await serve(tls_files.server_context())
    front = await SessionRefusingFront(server.port, how).start()
    origin = Origin("127.0.0.1", front.port, tls_files.client_context(), 30.0)
    try:
        with caplog.at_level(logging.WARNING, logger="plugins.redfish._wire.http"):
            for _ in range(4):  # every request answered: none fails for the session offered
                assert (await get(origin)).body == _BODY
        assert front.refused == RESUME_GIVE_UP  # offered, refused each time, then never again
        assert front.relayed == 4
        assert server.resumed == [False] * 4
        assert (origin.connections_opened, origin.tls_resumed, origin.tls_session) == (4, 0, None)
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "not resumed with this BMC" in warnings[0], warnings
    finally:
        origin.close()
        await front.stop()


async def test_one_refused_offer_is_not_taken_for_a_broken_bmc(
    serve: Serve, tls_files: TlsFiles, caplog: pytest.LogCaptureFixture
) -> None:
    """A connect offering the session is reset once (the network, a busy BMC), then offers work
    again: the BMC goes on being offered sessions, and resumes them; no warning."""
    server = await serve(tls_files.server_context())
    front = await SessionRefusingFront(server.port, "reset", refuse_at_most=1).start()
    origin = Origin("127.0.0.1", front.port, tls_files.client_context(), 30.0)
    try:
        with caplog.at_level(logging.WARNING, logger="plugins.redfish._wire.http"):
            for _ in range(4):
                assert (await get(origin)).body == _BODY
        assert front.refused == 1
        # the first connection full, the second refused once and made without, the others resumed
        assert server.resumed == [False, False, True, True]
        assert (origin.connections_opened, origin.tls_resumed) == (4, 2)
        assert origin.tls_session is not None
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    finally:
        origin.close()
        await front.stop()


async def test_a_bmc_down_fails_the_connect_as_before_and_resumption_goes_on_after(
    serve: Serve, tls_files: TlsFiles
) -> None:
    server = await serve(tls_files.server_context())
    port = server.port
    origin = Origin("127.0.0.1", port, tls_files.client_context(), 30.0)
    await get(origin)
    assert origin.tls_session is not None
    await server.stop()
    with pytest.raises(ConnectFailure):  # refused with and without the session: the failure stands
        await get(origin)
    again = await serve(tls_files.server_context(), port)
    for _ in range(2):
        await get(origin)
    assert again.resumed == [False, True]  # not a BMC that cannot resume: it still resumes
    origin.close()


async def test_an_unchecked_context_resumes_and_a_checked_one_still_verifies(
    serve: Serve, tls_files: TlsFiles
) -> None:
    # an `insecure` device's context keeps its own sessions; the system store still refuses the
    # test CA on the same server (a context never takes another's session)
    server = await serve(tls_files.server_context())
    unchecked = ssl.create_default_context()
    unchecked.check_hostname = False
    unchecked.verify_mode = ssl.CERT_NONE
    http = HttpConnections(30.0)
    insecure = http.origin(server.url, unchecked)
    for _ in range(2):
        await get(insecure)
    assert insecure.tls_resumed == 1

    system = http.origin(server.url, ssl.create_default_context())
    system.tls_session = insecure.tls_session  # even handed one, a session never skips the check
    with pytest.raises(TlsFailure) as caught:
        await get(system)
    assert isinstance(caught.value.verification, ssl.SSLCertVerificationError)
    await http.close()


async def test_a_resumed_connection_still_reports_the_verified_certificate(
    serve: Serve, tls_files: TlsFiles
) -> None:
    # OpenSSL keeps the peer's certificate in the session: a check on `getpeercert()` after the
    # handshake sees the same certificate on a resumed connection as on a full one
    server = await serve(tls_files.server_context())
    context = tls_files.client_context()
    assert tls_sessions.enable_resumption(context)
    seen: list[tuple[bool, bytes | None]] = []
    session: ssl.SSLSession | None = None
    for _ in range(2):
        with tls_sessions.offering(session):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=context)
        writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        await reader.read()  # the whole reply (the server closes): the TLS 1.3 tickets came first
        tls: ssl.SSLObject = writer.get_extra_info("ssl_object")
        seen.append((tls.session_reused, tls.getpeercert(binary_form=True)))
        session = tls_sessions.resumable_session(tls)
        writer.close()
    (first_resumed, first_cert), (second_resumed, second_cert) = seen
    assert (first_resumed, second_resumed) == (False, True)
    assert first_cert is not None and second_cert == first_cert
    assert second_cert == ssl.PEM_cert_to_DER_cert(tls_files.cert.read_text())


def test_a_session_past_its_lifetime_is_not_valid(tls_files: TlsFiles) -> None:
    async def one_session() -> ssl.SSLSession:
        server = await TlsServer(tls_files.server_context()).start()
        origin = Origin("127.0.0.1", server.port, tls_files.client_context(), 30.0)
        try:
            await get(origin)
            assert origin.tls_session is not None
            return origin.tls_session
        finally:
            origin.close()
            await server.stop()

    session = asyncio.run(one_session())
    assert tls_sessions.still_valid(session, now=session.time + session.timeout - 1)
    assert not tls_sessions.still_valid(session, now=session.time + session.timeout)


async def test_a_context_with_its_own_sslobject_class_is_left_alone(tls_files: TlsFiles) -> None:
    class Own(ssl.SSLObject):
        pass

    context = tls_files.client_context()
    context.sslobject_class = Own
    assert tls_sessions.enable_resumption(context) is False
    assert context.sslobject_class is Own
    plain = tls_files.client_context()
    assert tls_sessions.enable_resumption(plain) and tls_sessions.enable_resumption(plain)
    assert plain.sslobject_class is tls_sessions.ResumingSSLObject


async def test_nginx_resumes_its_session_tickets(serve: Serve, tls_files: TlsFiles, tmp_path: Path) -> None:
    nginx_or_skip()
    upstream = await serve(tls_files.server_context())
    with NginxFront(upstream.url, tls_files, tmp_path) as front:
        origin = Origin("127.0.0.1", front.port, tls_files.client_context(), 30.0, keepalive=False)
        for _ in range(3):  # `Connection: close`: nginx ends each connection after its reply
            assert (await get(origin)).body == _BODY
        assert origin.connections_opened == 3
        assert origin.tls_resumed == 2
        origin.close()
    assert front.requests() == ['"GET /redfish/v1/ HTTP/1.1" 200'] * 3


async def test_the_plugin_resumes_against_the_simulator_and_a_new_ca_bundle_starts_over(
    make_harness: Callable[..., Any], tmp_path: Path
) -> None:
    h: Harness
    async with make_harness(n=1, model="gb200", latency=0.0) as h:
        bmc = h.fleet.bmcs[0]
        # one request at a time, each on its own connection (`Connection: close`)
        options = {"keepalive": False, "concurrency": 1}
        assert (await h.call("std_metrics", bmc, Empty(), options=options)).result.ok
        client = h.plugin.pool.get(bmc.url)
        assert client is not None
        opened = client.transport.connections_opened
        assert opened >= 2
        assert client.transport.tls_resumed == opened - 1  # all but the first resumed

        # another CA bundle path (the same CA): new verification settings, a new origin, no session
        bundle = tmp_path / "ca-copy.pem"
        shutil.copyfile(h.fleet.ca_bundle, bundle)
        ctx = h.ctx(bmc, options=options, ca_bundle=str(bundle))
        assert (await h.plugin.std_metrics(ctx, Empty())).result.ok
        renewed = h.plugin.pool.get(bmc.url)
        assert renewed is not None and renewed is not client
        assert renewed.transport.connections_opened >= 2
        assert renewed.transport.tls_resumed == renewed.transport.connections_opened - 1
