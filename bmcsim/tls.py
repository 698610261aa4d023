"""A private CA and one server certificate for every simulated BMC.

Real BMCs ship self-signed certificates; clients are expected to trust a per-BMC CA bundle. The simulator
writes `ca.pem` so tests and benchmarks verify TLS exactly as they would in production, instead of turning
verification off. Files already in the directory are reused, so several processes (a fleet and the
benchmark that talks to it) agree on one CA.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import datetime as dt
import ipaddress
import os
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_FILE = "ca.pem"
CA_KEY_FILE = "ca-key.pem"
CERT_FILE = "server.pem"
KEY_FILE = "server-key.pem"

_SAN_DNS = ("localhost",)
_SAN_IPS = ("127.0.0.1", "::1")
# regenerate a certificate this close to expiry so a long benchmark never meets an expired one
_RENEW_BEFORE = dt.timedelta(days=7)


@dataclass(frozen=True)
class TlsFiles:
    """Paths of the CA bundle and of the server certificate and key."""

    ca: Path
    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        """An SSL context for the simulator's listening sockets (shared by all BMCs)."""
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.cert, self.key)
        return ctx

    def client_context(self) -> ssl.SSLContext:
        """An SSL context that verifies the simulator against `ca.pem`, as a real client should."""
        return ssl.create_default_context(cafile=str(self.ca))


def ensure_tls_files(cert_dir: str | os.PathLike[str]) -> TlsFiles:
    """Create (or reuse) the CA and server certificate in `cert_dir`.

    The server certificate covers 127.0.0.1, ::1 and localhost. Existing files are reused when they
    parse, are not about to expire and the server certificate was issued by the CA on disk.
    """
    directory = Path(cert_dir)
    directory.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(directory / CA_FILE, directory / CERT_FILE, directory / KEY_FILE)
    ca_key_path = directory / CA_KEY_FILE

    ca_cert, ca_key = _load_ca(files.ca, ca_key_path)
    if ca_cert is None or ca_key is None:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_cert = _make_ca(ca_key)
        write_file(ca_key_path, key_pem(ca_key), private=True)
        write_file(files.ca, ca_cert.public_bytes(serialization.Encoding.PEM))
    elif _server_ok(files, ca_cert):
        return files

    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = _make_server(server_key, ca_cert, ca_key)
    write_file(files.key, key_pem(server_key), private=True)
    write_file(files.cert, server_cert.public_bytes(serialization.Encoding.PEM))
    return files


class _CompactSSLProtocol(asyncio.sslproto.SSLProtocol):
    # asyncio gives every TLS connection a 256 KiB receive buffer; Redfish replies are a few KiB and a
    # TLS record is at most ~16 KiB, so 32 KiB keeps thousands of BMC connections affordable
    max_size = 32 * 1024


def compact_tls_factory(
    loop: asyncio.AbstractEventLoop, protocol_factory: Callable[[], asyncio.BaseProtocol], ctx: ssl.SSLContext
) -> Callable[[], asyncio.BaseProtocol]:
    """A server protocol factory doing TLS with small buffers; use with a plain `loop.create_server`.

    Equivalent to `loop.create_server(protocol_factory, ssl=ctx)`, but a simulated fleet of 2,000 BMCs
    with two connections each would otherwise pin about 1 GiB in asyncio's TLS buffers.
    """

    def factory() -> asyncio.BaseProtocol:
        # the handshake outcome is not awaited by anyone: consume it so a failed handshake (a client
        # that does not trust the CA) is not reported as "Future exception was never retrieved"
        waiter = loop.create_future()
        waiter.add_done_callback(_consume)
        return _CompactSSLProtocol(
            loop,
            protocol_factory(),
            ctx,
            waiter,
            server_side=True,
            ssl_handshake_timeout=60,
            ssl_shutdown_timeout=5,
        )

    return factory


def _consume(future: asyncio.Future[object]) -> None:
    if not future.cancelled():
        future.exception()


def _load_ca(
    ca_path: Path, key_path: Path
) -> tuple[x509.Certificate | None, ec.EllipticCurvePrivateKey | None]:
    try:
        cert = x509.load_pem_x509_certificate(ca_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError):
        return None, None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or _expiring(cert):
        return None, None
    if cert.public_key() != key.public_key():
        return None, None
    return cert, key


def _server_ok(files: TlsFiles, ca_cert: x509.Certificate) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
        key = serialization.load_pem_private_key(files.key.read_bytes(), password=None)
    except (OSError, ValueError):
        return False
    if _expiring(cert) or cert.issuer != ca_cert.subject or cert.public_key() != key.public_key():
        return False
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (InvalidSignature, ValueError, TypeError):  # not issued by this CA: regenerate
        return False
    return True


def _expiring(cert: x509.Certificate) -> bool:
    return cert.not_valid_after_utc - _RENEW_BEFORE < dt.datetime.now(dt.UTC)


def _make_ca(key: ec.EllipticCurvePrivateKey) -> x509.Certificate:
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "devicectl BMC simulator"),
            x509.NameAttribute(NameOID.COMMON_NAME, "devicectl BMC simulator CA"),
        ]
    )
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def _make_server(
    key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    san = [x509.DNSName(d) for d in _SAN_DNS] + [x509.IPAddress(ipaddress.ip_address(a)) for a in _SAN_IPS]
    return (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "devicectl BMC simulator"),
                    x509.NameAttribute(NameOID.COMMON_NAME, "localhost"),
                ]
            )
        )
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=825))
        .add_extension(x509.SubjectAlternativeName(san), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """A private key as unencrypted PKCS#8 PEM."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def write_file(path: Path, data: bytes, *, private: bool = False) -> None:
    """Write-then-rename, so a reader (a server reloading its certificate) never sees half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o600 if private else 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
