"""The TLS check of a verification against real TLS listeners: an expired certificate, one for another
host, one about to expire, and verification turned off, each judged with the certificate as evidence."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from plugins.redfish._config import ConnectionSettings
from plugins.redfish._verify.verify_tls import tls_check


def _cert(tmp: Path, *, days: tuple[int, int], names: list[x509.GeneralName]) -> ssl.SSLContext:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bmc")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + timedelta(days=days[0]))
        .not_valid_after(now + timedelta(days=days[1]))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(key, hashes.SHA256())
    )
    (tmp / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp / "cert.pem", tmp / "key.pem")
    return context


@pytest.fixture
async def serve_tls(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    servers: list[asyncio.Server] = []

    async def serve(days: tuple[int, int], names: list[x509.GeneralName]) -> int:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.close()

        server = await asyncio.start_server(
            answer, "127.0.0.1", 0, ssl=_cert(tmp_path, days=days, names=names)
        )
        servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    yield serve
    for server in servers:
        server.close()
        await server.wait_closed()


LOOPBACK = [x509.IPAddress(IPv4Address("127.0.0.1"))]


@pytest.mark.parametrize(
    ("days", "names", "insecure", "status", "says"),
    [
        ((-30, 365), LOOPBACK, False, "pass", "verified, names 127.0.0.1"),
        ((-400, -1), LOOPBACK, False, "fail", "the certificate expired on"),
        ((1, 365), LOOPBACK, False, "fail", "the certificate is not valid before"),
        ((-30, 365), [x509.DNSName("bmc.example")], False, "fail", "names bmc.example, not 127.0.0.1"),
        ((-30, 365), [x509.DNSName("bmc.example")], True, "warn", "names bmc.example, not 127.0.0.1"),
        ((-30, 10), LOOPBACK, False, "warn", "the certificate expires in 10 days"),
        ((-30, 365), LOOPBACK, True, "warn", "certificate verification is off for this BMC"),
    ],
)
async def test_each_certificate_problem_is_named_with_its_evidence(
    serve_tls: Callable[..., Any],
    days: tuple[int, int],
    names: list[Any],
    insecure: bool,
    status: str,
    says: str,
) -> None:
    port = await serve_tls(days, names)
    check = await tls_check(ConnectionSettings(url=f"https://127.0.0.1:{port}", insecure=insecure), 5.0)
    assert (check.status, says in check.detail) == (status, True), check.detail
    assert check.evidence["host"] == "127.0.0.1" and check.evidence["verified"] is not insecure


async def test_plain_http_and_no_listener_fail() -> None:
    check = await tls_check(ConnectionSettings(url="http://127.0.0.1:1"), 2.0)
    assert check.status == "fail" and "not HTTPS" in check.detail
    check = await tls_check(ConnectionSettings(url="https://127.0.0.1:1"), 2.0)
    assert check.status == "fail" and "no TLS handshake" in check.detail
