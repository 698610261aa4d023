"""The TLS check of a verification: the certificate the BMC presents, its expiry and its host name.

The certificate is read over a connection of its own that checks nothing, so a bad certificate is
described (expired, wrong name, not trusted) instead of only failing the handshake; whether the
plugin's own connections verify it (`insecure`, `ca_bundle`) is part of the evidence.
"""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from cryptography import x509

from plugins.base.health import FAIL, PASS, WARN, HealthCheck
from plugins.redfish._config import ConnectionSettings

#: a certificate expiring sooner than this is a warning
EXPIRY_WARN_DAYS = 30


async def tls_check(settings: ConnectionSettings, budget: float) -> HealthCheck:
    """Fetch and judge the BMC's certificate (see the module docstring)."""
    url = urlsplit(settings.url)
    host, port = url.hostname or "", url.port or 443
    if url.scheme != "https":
        return HealthCheck("tls", FAIL, f"{settings.origin}: not HTTPS; credentials would travel in clear")
    try:
        der = await asyncio.wait_for(_peer_certificate(host, port), max(0.5, min(budget, 10.0)))
    except (OSError, TimeoutError, ssl.SSLError) as exc:
        return HealthCheck("tls", FAIL, f"{settings.origin}: no TLS handshake ({exc or type(exc).__name__})")
    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError as exc:
        return HealthCheck("tls", FAIL, f"{settings.origin}: the certificate cannot be parsed ({exc})")
    now = datetime.now(UTC)
    expires = cert.not_valid_after_utc
    days = (expires - now).total_seconds() / 86400
    names = _names(cert)
    matches = any(_match(host, n) for n in names)
    evidence: dict[str, Any] = {
        "subject": cert.subject.rfc4514_string(),
        "issuer": cert.issuer.rfc4514_string(),
        "not_after": expires.isoformat(),
        "days_left": round(days, 1),
        "names": names,
        "host": host,
        "host_matches": matches,
        "verified": not settings.insecure,
        "ca_bundle": settings.ca_bundle or ("(none: not checked)" if settings.insecure else "system store"),
    }
    if days < 0:
        return HealthCheck("tls", FAIL, f"the certificate expired on {expires:%Y-%m-%d}", evidence)
    if cert.not_valid_before_utc > now:
        return HealthCheck(
            "tls", FAIL, f"the certificate is not valid before {cert.not_valid_before_utc:%Y-%m-%d}", evidence
        )
    if not matches:
        status = WARN if settings.insecure else FAIL
        return HealthCheck(
            "tls", status, f"the certificate names {', '.join(names) or 'no host'}, not {host}", evidence
        )
    if settings.insecure:
        return HealthCheck(
            "tls", WARN, "certificate verification is off for this BMC (insecure = true)", evidence
        )
    if days < EXPIRY_WARN_DAYS:
        return HealthCheck(
            "tls", WARN, f"the certificate expires in {days:.0f} days ({expires:%Y-%m-%d})", evidence
        )
    return HealthCheck(
        "tls", PASS, f"verified, names {host}, expires {expires:%Y-%m-%d} ({days:.0f} days)", evidence
    )


async def _peer_certificate(host: str, port: int) -> bytes:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # read only: this connection carries no credentials
    _, writer = await asyncio.open_connection(host, port, ssl=context, server_hostname=host or None)
    try:
        obj = writer.get_extra_info("ssl_object")
        der = obj.getpeercert(binary_form=True) if obj is not None else None
        if not der:
            raise ssl.SSLError("the BMC presented no certificate")
        return bytes(der)
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except (OSError, ssl.SSLError):
            pass


def _names(cert: x509.Certificate) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        common = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
        return [str(a.value) for a in common]
    return [
        *san.get_values_for_type(x509.DNSName),
        *(str(a) for a in san.get_values_for_type(x509.IPAddress)),
    ]


def _match(host: str, name: str) -> bool:
    """RFC 6125 matching: exact (IP addresses compared as addresses), or one leftmost `*` label."""
    try:
        return ipaddress.ip_address(host) == ipaddress.ip_address(name)
    except ValueError:
        pass
    host, name = host.lower().rstrip("."), name.lower().rstrip(".")
    if name.startswith("*."):
        head, _, rest = host.partition(".")
        return bool(head) and rest == name[2:]
    return host == name
