"""The one place client commands get their channel to the controller: `--server` plus TLS flags.

The TLS flags are accepted before the command (`devicectl --ca-cert ca.pem devices list`) and after
it (`devicectl devices list --ca-cert ca.pem`); environment variables (DEVICECTL_CA_CERT, _CERT,
_KEY, _SERVER_NAME, _SERVER) give the defaults (controller.cli._click.client_options).
"""

from __future__ import annotations

from dataclasses import replace

import grpc

from controller.cli._errors import UsageError
from controller.cli._options import Options
from controller.security.tls import ClientTls, sync_channel


def client_tls(args: Options) -> ClientTls:
    return ClientTls(
        ca_cert=getattr(args, "ca_cert", None) or "",
        cert=getattr(args, "cert", None) or "",
        key=getattr(args, "key", None) or "",
        server_name=getattr(args, "server_name", None) or "",
        tls=bool(getattr(args, "tls", False)),
        insecure=bool(getattr(args, "insecure", False)),
    )


#: the controller's gRPC port when `--server` names none (grpc itself would dial 443)
DEFAULT_PORT = 50051


def server_address(server: str) -> tuple[str, bool]:
    """`--server` as gRPC's target, and whether it asks for TLS: `host:port`, `host` (port
    50051), `[::1]`, or a URL `http://host:port` (plaintext) / `https://host:port` (TLS)."""
    text = server.strip()
    scheme, sep, rest = text.partition("://")
    tls = False
    if sep:
        if scheme.lower() not in ("http", "https"):
            raise UsageError(f"--server {server}: give HOST:PORT (or http:// or https:// before it)")
        tls = scheme.lower() == "https"
        text = rest
    text = text.rstrip("/")
    if "/" in text or not text:
        raise UsageError(f"--server {server}: give HOST:PORT, without a path")
    if text.startswith("["):  # [v6] or [v6]:port
        if text.endswith("]"):
            text = f"{text}:{DEFAULT_PORT}"
    elif text.count(":") > 1:  # a bare IPv6 address
        text = f"[{text}]:{DEFAULT_PORT}"
    elif ":" not in text:
        text = f"{text}:{DEFAULT_PORT}"
    return text, tls


def channel(args: Options) -> grpc.Channel:
    """A blocking channel to `--server` per the TLS flags (ValueError for bad combinations)."""
    target, tls = server_address(args.server)
    settings = client_tls(args)
    if tls and not settings.enabled:
        settings = replace(settings, tls=True)
    return sync_channel(target, settings, what="controller")
