"""TLS for every gRPC endpoint devicectl opens or dials: the controller's server, the topology
sink, the callback channel and the CLI's client channel. One home for "plaintext only on loopback".

Server certificates are re-read when their files change (checked at each new connection's handshake
through grpc's certificate-configuration fetcher), so a rotated certificate is served to new
connections without a restart. Write rotated files with write-then-rename so a handshake never
sees half a file; a pair that does not load or does not match (half-way through replacing key and
certificate) is logged and the previous one kept until the next handshake finds a good pair.

Client certificates are requested only when a client CA is configured, and then required: grpcio
offers "require and verify" or "do not request", nothing in between.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

if TYPE_CHECKING:
    from controller.config import Settings

log = logging.getLogger(__name__)

Options = Sequence[tuple[str, str | int]]


@dataclass(frozen=True)
class ServerTls:
    """A server's certificate and key (PEM files) and the CA that client certificates must chain to."""

    cert: str = ""
    key: str = ""
    client_ca: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.cert or self.key or self.client_ca)

    @property
    def mutual(self) -> bool:
        return bool(self.client_ca)

    def check(self, what: str) -> None:
        """Raises ValueError naming the missing piece."""
        if self.enabled and not (self.cert and self.key):
            raise ValueError(f"{what}: TLS needs both a certificate and a key (tls_cert and tls_key)")
        for path in (self.cert, self.key, self.client_ca):
            if path and not Path(path).is_file():
                raise ValueError(f"{what}: TLS file {path} not found")


@dataclass(frozen=True)
class ClientTls:
    """How a client dials: CA to verify the server, optional client certificate, name override.

    TLS is used when any file is given or `tls` is set (then the system's CAs verify the server).
    """

    ca_cert: str = ""
    cert: str = ""
    key: str = ""
    server_name: str = ""
    tls: bool = False
    insecure: bool = False  # allow plaintext to a non-loopback target

    @property
    def enabled(self) -> bool:
        return bool(self.tls or self.ca_cert or self.cert or self.key)

    def credentials(self) -> grpc.ChannelCredentials:
        if bool(self.cert) != bool(self.key):
            raise ValueError("a client certificate needs both --cert and --key")
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca_cert) if self.ca_cert else None,
            private_key=_read(self.key) if self.key else None,
            certificate_chain=_read(self.cert) if self.cert else None,
        )

    def options(self) -> list[tuple[str, str | int]]:
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []


def is_loopback(address: str) -> bool:
    """Whether a `host:port` (or unix: socket) address can only be reached from this machine."""
    if address.startswith(("unix:", "unix-abstract:")):
        return True
    host = address.rsplit(":", 1)[0] if ":" in address else address
    for prefix in ("dns:///", "ipv4:", "ipv6:"):
        host = host.removeprefix(prefix)
    host = host.strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def allow_plaintext(address: str, insecure: bool, what: str) -> None:
    """Refuse plaintext beyond loopback unless the operator said `insecure`; warn when they did."""
    if is_loopback(address):
        return
    if not insecure:
        raise ValueError(
            f"{what} {address} is not a loopback address: configure TLS (certificate and key), "
            "or accept plaintext explicitly with --insecure (setting insecure = true)"
        )
    log.warning("%s %s: plaintext gRPC on a non-loopback address (insecure = true)", what, address)


def client_channel(
    target: str, tls: ClientTls, *, what: str = "server", options: Options = ()
) -> grpc.aio.Channel:
    """An asyncio channel to `target` per `tls` (plaintext only to loopback unless insecure)."""
    if tls.enabled:
        return grpc.aio.secure_channel(target, tls.credentials(), options=[*options, *tls.options()])
    allow_plaintext(target, tls.insecure, what)
    return grpc.aio.insecure_channel(target, options=list(options))


def sync_channel(target: str, tls: ClientTls, *, what: str = "server") -> grpc.Channel:
    """The blocking-API twin of `client_channel` (the CLI's one-shot commands)."""
    if tls.enabled:
        return grpc.secure_channel(target, tls.credentials(), options=tls.options())
    allow_plaintext(target, tls.insecure, what)
    return grpc.insecure_channel(target)


class _Reloader:
    """grpc's certificate-config fetcher: a new configuration whenever a file's mtime/size changes."""

    def __init__(self, tls: ServerTls) -> None:
        self._tls = tls
        self._lock = threading.Lock()
        self._seen = self._stamp()
        self._failed: tuple[tuple[int, int, int], ...] = ()
        self.reloads = 0

    def _paths(self) -> list[str]:
        return [p for p in (self._tls.cert, self._tls.key, self._tls.client_ca) if p]

    def _stamp(self) -> tuple[tuple[int, int, int], ...]:
        out = []
        for path in self._paths():
            try:
                st = os.stat(path)
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append((0, 0, 0))
        return tuple(out)

    def config(self) -> grpc.ServerCertificateConfiguration:
        key, cert = _read(self._tls.key), _read(self._tls.cert)
        _check_pair(key, cert, self._tls)
        return grpc.ssl_server_certificate_configuration(
            [(key, cert)],
            root_certificates=_read(self._tls.client_ca) if self._tls.client_ca else None,
        )

    def __call__(self) -> grpc.ServerCertificateConfiguration | None:
        # Called by grpc at every handshake; must never raise.
        stamp: tuple[tuple[int, int, int], ...] = ()
        try:
            with self._lock:
                stamp = self._stamp()
                if stamp == self._seen:
                    return None
                config = self.config()
                self._seen = stamp
                self.reloads += 1
            log.info("TLS: reloaded certificate files (%s)", ", ".join(self._paths()))
            return config
        except Exception as exc:  # keep serving the previous certificate; say so once per change
            if stamp != self._failed:
                self._failed = stamp
                log.error("TLS: cannot reload certificate files, keeping the previous ones: %s", exc)
            return None


def server_credentials(tls: ServerTls) -> grpc.ServerCredentials:
    """Reloading server credentials; client certificates required when a client CA is set."""
    reloader = _Reloader(tls)
    return grpc.dynamic_ssl_server_credentials(
        reloader.config(), reloader, require_client_authentication=tls.mutual
    )


def add_port(server: grpc.aio.Server, listen: str, tls: ServerTls, *, insecure: bool, what: str) -> int:
    """Bind `listen` with TLS when configured, else plaintext (loopback or `insecure` only).

    Returns the port (0 when it could not bind, as grpc does). Raises ValueError for bad settings.
    """
    if tls.enabled:
        tls.check(what)
        return int(server.add_secure_port(listen, server_credentials(tls)))
    allow_plaintext(listen, insecure, what)
    return int(server.add_insecure_port(listen))


def _check_pair(key_pem: bytes, cert_pem: bytes, tls: ServerTls) -> None:
    """ValueError unless the key belongs to the certificate (e.g. half-way through a rotation)."""
    # NOTE: imported here, only where TLS files are checked: `cryptography` costs a plaintext
    # controller ~16 MB of resident memory just by being imported
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"TLS files {tls.cert} / {tls.key} do not load: {exc}") from None
    if cert.public_key().public_bytes(*spki) != key.public_key().public_bytes(*spki):
        raise ValueError(f"TLS key {tls.key} does not belong to certificate {tls.cert}")


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read TLS file {path}: {exc.strerror}") from None


def server_tls(settings: Settings) -> ServerTls:
    return ServerTls(settings.tls_cert, settings.tls_key, settings.tls_client_ca)


def callback_tls(settings: Settings) -> ClientTls:
    return ClientTls(
        ca_cert=settings.callback_ca_cert,
        cert=settings.callback_cert,
        key=settings.callback_key,
        server_name=settings.callback_server_name,
        tls=settings.callback_tls,
        insecure=settings.insecure,
    )


def check_settings(settings: Settings) -> None:
    """Fail fast (ValueError) on TLS settings that cannot work, before anything is started.

    Plaintext beyond loopback without `insecure` is refused here; the warning for an accepted one
    is logged when the port is bound or the channel opened.
    """
    server = server_tls(settings)
    server.check("listen address")
    if not server.enabled and not settings.insecure and not is_loopback(settings.listen):
        allow_plaintext(settings.listen, False, "listen address")
    callback = callback_tls(settings)
    if settings.callback:
        if callback.enabled:
            callback.credentials()  # reads the files: a missing one is named now
        elif not settings.insecure and not is_loopback(settings.callback):
            allow_plaintext(settings.callback, False, "topology callback")
