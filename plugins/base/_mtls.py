"""go-plugin's AutoMTLS, plugin side.

A host with AutoMTLS on puts a fresh client certificate (PEM) in the plugin's environment as
`PLUGIN_CLIENT_CERT`; the plugin answers with a fresh self-signed server certificate for
"localhost" in the sixth field of its handshake line (the DER, base64 without padding: the line
cannot hold PEM's newlines) and serves gRPC over TLS, accepting only that client certificate
(go-plugin's server.go and mtls.go). The host trusts exactly the certificate it was sent.

One difference: go-plugin's client certificate is an ECDSA P-521 key, which gRPC's TLS library
(BoringSSL) does not accept, so this server does not ask for it. The host still pins our
certificate and the traffic is encrypted; who may connect is decided, as without AutoMTLS, by the
socket's private 0700 directory.
"""

from __future__ import annotations

import base64
import datetime
import secrets

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from plugins.base._errors import HostEnvironmentError

ENV = "PLUGIN_CLIENT_CERT"


def server_credentials(client_cert_pem: str) -> tuple[grpc.ServerCredentials, str]:
    """TLS credentials for the server, and the handshake's certificate field."""
    try:
        x509.load_pem_x509_certificate(client_cert_pem.encode())
    except ValueError:
        raise HostEnvironmentError(f"{ENV} is not a PEM certificate") from None
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(secrets.randbits(127) + 1)
        .not_valid_before(now - datetime.timedelta(seconds=30))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    creds = grpc.ssl_server_credentials([(key_pem, cert.public_bytes(serialization.Encoding.PEM))])
    field = base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode().rstrip("=")
    return creds, field
