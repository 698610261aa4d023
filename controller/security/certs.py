"""A local test CA: server certificate for the controller (and the topology sink) plus one client
certificate per name, for trying TLS/mTLS and roles without an organisation's PKI.

The CA and the server certificate (SAN localhost, 127.0.0.1, ::1) come from the BMC simulator's
certificate maker, so there is one implementation of "make a CA"; this module adds client
certificates (extended key usage clientAuth, CN = the name, SAN DNS = the name).
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: the client certificates `devicectl certs init` makes by default, named after their role
DEFAULT_CLIENTS = ("topology", "operator", "admin")


@dataclass(frozen=True)
class CertSet:
    """Paths of everything `init` wrote."""

    ca: Path
    server_cert: Path
    server_key: Path
    clients: dict[str, tuple[Path, Path]]  # name -> (cert, key)


def init(directory: str | os.PathLike[str], clients: tuple[str, ...] = DEFAULT_CLIENTS) -> CertSet:
    """Create (or reuse) the CA and server certificate in `directory`, and a client cert per name."""
    # the simulator's certificate maker, loaded only by the commands that make certificates
    from bmcsim.tls import CA_KEY_FILE, ensure_tls_files, key_pem, write_file

    files = ensure_tls_files(directory)
    ca_cert = x509.load_pem_x509_certificate(files.ca.read_bytes())
    ca_key = serialization.load_pem_private_key((files.ca.parent / CA_KEY_FILE).read_bytes(), None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{files.ca.parent / CA_KEY_FILE}: not an EC private key")
    made: dict[str, tuple[Path, Path]] = {}
    for name in clients:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"client name {name!r} is not usable as a file name")
        cert_path, key_path = files.ca.parent / f"{name}.pem", files.ca.parent / f"{name}-key.pem"
        key = ec.generate_private_key(ec.SECP256R1())
        write_file(key_path, key_pem(key), private=True)
        write_file(
            cert_path, client_certificate(name, key, ca_cert, ca_key).public_bytes(serialization.Encoding.PEM)
        )
        made[name] = (cert_path, key_path)
    return CertSet(files.ca, files.cert, files.key, made)


def client_certificate(
    name: str,
    key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    days: int = 825,
) -> x509.Certificate:
    """A client certificate for `name` (CN and SAN DNS), signed by the CA."""
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
