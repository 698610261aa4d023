"""The Redfish plugin's plugin-level config: what a Nomad operator writes in
`plugin "redfish" { config { ... } }` (or devicectl's `[[plugin]] config`).

Two parts: plugin-wide defaults for every BMC (`RedfishSettings`; a device's inventory options
still override them per device), and, for a host that names no devices (a Nomad client's
Fingerprint and Stats carry no targets), the BMCs to report: `endpoints` with `username` and a
`password_file` (the password itself never goes into config). Every attribute may be null (not
set): Nomad sends them all, and the defaults fill in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from plugins.base import Credentials, DeviceTarget, Endpoint, InvalidRequestError
from plugins.redfish._config import RedfishSettings

#: the plugin-wide settings an operator may set, with their JSON types
_SETTINGS = {
    "auth": "string",
    "concurrency": "integer",
    "connect_timeout": "number",
    "read_timeout": "number",
    "ca_bundle": "string",
    "keepalive": "boolean",
    "verify_after": "number",
    "min_cap_watts": "number",
    "basic_fallback": "boolean",
    "max_document_bytes": "integer",
}
_DEFAULTS = RedfishSettings()

SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        **{
            name: {"type": kind, "description": f"default {name} for every BMC"}
            | ({} if getattr(_DEFAULTS, name) is None else {"default": getattr(_DEFAULTS, name)})
            for name, kind in _SETTINGS.items()
        },
        "endpoints": {
            "type": "array",
            "items": {"type": "string"},
            "default": [],
            "description": "BMC URLs to fingerprint and measure when the host names no devices (Nomad)",
        },
        "username": {"type": "string", "description": "BMC account for `endpoints`"},
        "password_file": {"type": "string", "description": "file holding that account's password"},
        "insecure": {
            "type": "boolean",
            "default": False,
            "description": "skip TLS verification for `endpoints` (lab BMCs only)",
        },
    },
}


def settings_from(config: Mapping[str, Any], base: RedfishSettings) -> RedfishSettings:
    """The plugin-wide settings with the config's values; a clear error for a bad one."""
    given = {k: config[k] for k in _SETTINGS if k in config}
    try:
        settings = dataclasses.replace(base, **given)  # checks every number (`_config._validate`)
        return dataclasses.replace(
            settings,
            concurrency=int(settings.concurrency),
            max_document_bytes=int(settings.max_document_bytes),
        )
    except (ValueError, TypeError) as exc:
        raise InvalidRequestError(f"config: {exc}") from None


def targets_from(config: Mapping[str, Any], settings: RedfishSettings) -> tuple[DeviceTarget, ...]:
    """The configured BMCs as device targets (device id: the BMC's host name)."""
    urls = [str(u) for u in config.get("endpoints", ())]
    if not urls:
        return ()
    credentials = None
    if config.get("username"):
        path = config.get("password_file")
        if not path:
            raise InvalidRequestError("config: username needs password_file")
        try:
            password = Path(str(path)).read_text().strip()
        except OSError as exc:
            raise InvalidRequestError(f"config: password_file: cannot read {path}: {exc.strerror}") from None
        credentials = Credentials(str(config["username"]), password)
    out = []
    for url in urls:
        host = urlsplit(url).hostname
        if not host or urlsplit(url).scheme != "https":  # credentials never go over plaintext
            raise InvalidRequestError(f"config: endpoints: {url!r} is not an https:// URL")
        endpoint = Endpoint(
            url=url,
            credentials=credentials,
            verify_tls=not config.get("insecure", False),
            ca_bundle=settings.ca_bundle,
        )
        port = urlsplit(url).port
        out.append(DeviceTarget(device_id=f"{host}:{port}" if port else host, endpoint=endpoint))
    return tuple(out)
