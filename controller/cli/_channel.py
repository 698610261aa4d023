"""The one place client commands get their channel to the controller: `--server` plus TLS flags.

The TLS flags are accepted before the command (`devicectl --ca-cert ca.pem devices list`) and after
it (`devicectl devices list --ca-cert ca.pem`); environment variables (DEVICECTL_CA_CERT, _CERT,
_KEY, _SERVER_NAME, _SERVER) give the defaults (controller.cli._click.client_options).
"""

from __future__ import annotations

import argparse

import grpc

from controller.tls import ClientTls, sync_channel


def client_tls(args: argparse.Namespace) -> ClientTls:
    return ClientTls(
        ca_cert=getattr(args, "ca_cert", None) or "",
        cert=getattr(args, "cert", None) or "",
        key=getattr(args, "key", None) or "",
        server_name=getattr(args, "server_name", None) or "",
        tls=bool(getattr(args, "tls", False)),
        insecure=bool(getattr(args, "insecure", False)),
    )


def channel(args: argparse.Namespace) -> grpc.Channel:
    """A blocking channel to `--server` per the TLS flags (ValueError for bad combinations)."""
    return sync_channel(args.server, client_tls(args), what="controller")
