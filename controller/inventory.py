"""The device inventory: which devices exist, their plugin, model and how to reach them.

A TOML file with one `[[device]]` table per device (see docs/operations.md). Devices not in the
inventory can still be served when a request's `device_model_json` says how to reach them
(entity `Redfish.URL` and `Redfish.SecretName`).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.secrets import SecretStore
from plugins.base import Endpoint, HostEnvironmentError, SystemSpec

_CONNECTION_KEYS = {"url", "secret", "ca_bundle", "insecure"}


@dataclass(frozen=True)
class DeviceEntry:
    """One device: `model` is the model JSON object (a bare model name becomes {"Model": name})."""

    id: str
    plugin: str
    model: Mapping[str, Any] = field(default_factory=dict)
    url: str = ""
    secret: str = ""
    ca_bundle: str = ""
    insecure: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)

    def endpoint(self, secrets: SecretStore, default_ca: str = "") -> Endpoint:
        """Resolve the secret now, so rotated credentials apply on the next request."""
        return Endpoint(
            url=self.url,
            credentials=secrets.credentials(self.secret) if self.secret else None,
            verify_tls=not self.insecure,
            ca_bundle=self.ca_bundle or default_ca or None,
            options=dict(self.options),
        )


class InventoryError(ValueError):
    """The inventory file is invalid; the message names the file, the device and the key."""


def load_inventory(path: str | Path) -> dict[str, DeviceEntry]:
    """Parse and validate an inventory file."""
    where = str(path)
    try:
        with Path(path).open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise InventoryError(f"{where}: inventory file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise InventoryError(f"{where}: not valid TOML: {exc}") from None
    defaults = data.get("defaults", {})
    devices = data.get("device", [])
    if not isinstance(devices, list):
        raise InventoryError(f"{where}: `device` must be an array of tables ([[device]])")
    out: dict[str, DeviceEntry] = {}
    for index, raw in enumerate(devices):
        entry = _entry({**defaults, **raw}, f"{where}: device[{index}]")
        if entry.id in out:
            raise InventoryError(f"{where}: device[{index}]: duplicate id {entry.id!r}")
        out[entry.id] = entry
    return out


def _entry(raw: Mapping[str, Any], where: str) -> DeviceEntry:
    device_id = raw.get("id")
    if not isinstance(device_id, str) or not device_id.strip():
        raise InventoryError(f"{where}: `id` must be a non-empty string")
    where = f"{where} ({device_id})"
    plugin = raw.get("plugin")
    if not isinstance(plugin, str) or not plugin:
        raise InventoryError(f'{where}: `plugin` must name a plugin (e.g. "redfish" or "nvml")')
    model = raw.get("model", {})
    if isinstance(model, str):
        model = {"Model": model}
    elif not isinstance(model, Mapping):
        raise InventoryError(f"{where}: `model` must be a model name or a table")
    conn = dict(raw.get(plugin, {}) if isinstance(raw.get(plugin), Mapping) else {})
    conn.update(raw.get("connection", {}) if isinstance(raw.get("connection"), Mapping) else {})
    for key in ("url", "secret"):
        if key in conn and not isinstance(conn[key], str):
            raise InventoryError(f"{where}: `{key}` must be a string")
    if conn.get("url") and not str(conn["url"]).startswith(("https://", "http://")):
        raise InventoryError(f"{where}: url {conn['url']!r} must start with https:// (or http://)")
    insecure = conn.get("insecure", False)
    if not isinstance(insecure, bool):
        raise InventoryError(f"{where}: `insecure` must be true or false")
    return DeviceEntry(
        id=device_id,
        plugin=plugin,
        model=dict(model),
        url=str(conn.get("url", "")),
        secret=str(conn.get("secret", "")),
        ca_bundle=str(conn.get("ca_bundle", "")),
        insecure=insecure,
        options={k: v for k, v in conn.items() if k not in _CONNECTION_KEYS},
    )


def entry_from_model(device_id: str, model: Mapping[str, Any], default_plugin: str) -> DeviceEntry | None:
    """A device entry from a request's model JSON, when it says how to reach the device."""
    spec = SystemSpec.from_model(model)
    if not spec.redfish_url:
        return None
    plugin = spec.plugin.split("_", 1)[0].split(".", 1)[0] if spec.plugin else default_plugin
    return DeviceEntry(
        id=device_id,
        plugin=plugin or default_plugin,
        model=dict(model),
        url=spec.redfish_url,
        secret=spec.secret_name,
    )


def parse_model_json(data: bytes) -> dict[str, Any]:
    """Model or state JSON bytes as a dict ({} when empty)."""
    if not data:
        return {}
    value = json.loads(data)
    if not isinstance(value, dict):
        raise HostEnvironmentError("model JSON is not an object")
    return value
