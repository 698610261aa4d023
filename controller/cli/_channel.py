"""The one place client commands get their channel to the controller: `--server` plus TLS flags.

The TLS flags are accepted before the command (`devicectl --ca-cert ca.pem devices list`) and after
it (`devicectl devices list --ca-cert ca.pem`); environment variables give the defaults.
"""

from __future__ import annotations

import argparse
import os

import grpc

from controller.tls import ClientTls, sync_channel

_ENV = {
    "ca_cert": "DEVICECTL_CA_CERT",
    "cert": "DEVICECTL_CERT",
    "key": "DEVICECTL_KEY",
    "server_name": "DEVICECTL_SERVER_NAME",
}


def add_client_flags(p: argparse.ArgumentParser, *, top: bool = False) -> None:
    """TLS flags for a client command (`top`: the main parser, which holds the defaults)."""

    def default(name: str) -> str | None:
        return os.environ.get(_ENV[name]) if top else argparse.SUPPRESS  # type: ignore[return-value]

    p.add_argument(
        "--ca-cert", default=default("ca_cert"), help="CA bundle that verifies the controller (enables TLS)"
    )
    p.add_argument("--cert", default=default("cert"), help="client certificate (PEM) for mutual TLS")
    p.add_argument("--key", default=default("key"), help="client certificate's private key (PEM)")
    p.add_argument(
        "--server-name", default=default("server_name"), help="name expected in the server's certificate"
    )
    p.add_argument(
        "--tls",
        action="store_true",
        default=None if top else argparse.SUPPRESS,
        help="use TLS with the system's CAs (implied by --ca-cert/--cert)",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        default=None if top else argparse.SUPPRESS,
        help="allow plaintext to a non-loopback address",
    )


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
