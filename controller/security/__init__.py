"""Who may talk to the controller, and with what: TLS for every gRPC endpoint (plaintext only on
loopback, certificates reloaded) in `tls`, roles from client certificates in `authz`, a local test
CA in `certs`, and credentials looked up by name at use and handed out only for the URL they are
bound to in `secrets` (docs/security.md).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from controller.security.authz import RoleInterceptor, allows, parse_roles, required_role
    from controller.security.certs import CertSet, client_certificate
    from controller.security.secrets import SecretPolicy, SecretStore
    from controller.security.tls import ClientTls, ServerTls, add_port, check_settings, client_channel

__all__ = [
    "CertSet",
    "ClientTls",
    "RoleInterceptor",
    "SecretPolicy",
    "SecretStore",
    "ServerTls",
    "add_port",
    "allows",
    "check_settings",
    "client_certificate",
    "client_channel",
    "parse_roles",
    "required_role",
]

#: the module of each public name, imported on first use: importing one module of this room
#: (as the controller's own code always does) imports none of the others
_HOME = {
    "CertSet": "certs",
    "ClientTls": "tls",
    "RoleInterceptor": "authz",
    "SecretPolicy": "secrets",
    "SecretStore": "secrets",
    "ServerTls": "tls",
    "add_port": "tls",
    "allows": "authz",
    "check_settings": "tls",
    "client_certificate": "certs",
    "client_channel": "tls",
    "parse_roles": "authz",
    "required_role": "authz",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
