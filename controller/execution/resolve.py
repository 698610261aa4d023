"""Resolving a device for a request: its inventory entry (or one built from its model JSON), its
started plugin, the merged model, the current state and the endpoint with its credentials.

It keeps this process's write-through copy of each device's stored state and model: a device's
requests run one at a time in this process (its lane), and every state change is written by the
runner's completion, which updates the copy, so the copy stays equal to the database and saves two
reads per request. It is valid only while this process holds the device's shard: dropped when
shards are gained and whenever a completion does not commit as given.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controller.config import Settings
from controller.execution.state_text import NO_STATE, Kept, StateText
from controller.inventory import DeviceEntry, entry_from_model, parse_model_json, plugin_registry
from controller.observability.logs import clip
from controller.plugin_host.host import PluginHost
from controller.security.secrets import SecretStore
from controller.store import Store
from plugins.base import DevicePlugin, Endpoint, InvalidRequestError, SystemSpec, UnknownDeviceError


@dataclass
class _Known:
    """This process's copy of a device's stored state and model JSON."""

    state: dict[str, Any] | None
    model: dict[str, Any]
    #: what this process kept of the state's JSON text when it stored it (None: read from the database)
    text: Kept | None = None


@dataclass(frozen=True)
class Resolved:
    entry: DeviceEntry
    plugin: DevicePlugin
    endpoint: Endpoint
    model: dict[str, Any]
    state: dict[str, Any]
    #: what this process kept of the device's stored state text when it stored it (`_Known.text`;
    #: `state_text.NO_STATE` where it read that the device has no stored state; None: unknown)
    prior: Kept | None = None


class DeviceResolver:
    """Resolves devices and keeps the write-through copies (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        plugins: PluginHost,
        settings: Settings,
        inventory: Mapping[str, DeviceEntry],
        secrets: SecretStore,
    ) -> None:
        self._store = store
        self._plugins = plugins
        self._settings = settings
        self._inventory = inventory
        self._secrets = secrets
        self._devices: dict[str, _Known] = {}
        #: device -> (entry, model, URL) of its last request (see `_url`)
        self._urls: dict[str, tuple[DeviceEntry, dict[str, Any], str]] = {}
        self._plugin_names = plugin_registry(inventory, settings.default_plugin)
        #: device -> (plugin, model) its plugin last accepted (see `_check_model`)
        self._checked: dict[str, tuple[DevicePlugin, dict[str, Any]]] = {}

    def forget_all(self) -> None:
        self._devices.clear()

    async def release(self, device: str) -> None:
        """What is held for `device` here goes: its write-through copy, and what its plugin holds
        for it (`DevicePlugin.forget`: the Redfish plugin logs out of its BMC). Another process
        runs the device now; a plugin this process never started holds nothing."""
        self._devices.pop(device, None)
        entry = self._inventory.get(device)
        plugin = self._plugins.started().get(entry.plugin) if entry is not None else None
        if plugin is not None:
            await plugin.forget(device)

    def forget(self, device: str) -> None:
        self._devices.pop(device, None)

    def remember(
        self,
        device: str,
        model: Mapping[str, Any],
        state: dict[str, Any] | None,
        text: StateText | None = None,
    ) -> None:
        """A completion committed: its model, and its new state (stored as `text`) if it has one,
        are the stored ones. The state is kept as the plugin returned it, unchanged: the next
        request hands it back. A completion without a new state kept the stored one: where the
        copy holds none of the device (dropped while the request ran, when shards were gained), it
        is left to be read again, never made up as "no state" (the next request would hand its
        plugin an empty state, and the device's discovery and priors would be lost)."""
        known = self._devices.get(device)
        if known is None:
            if state is None:
                return
            known = self._devices[device] = _Known(None, {})
        known.model = dict(model)
        if state is not None:
            # what the next change is cut from, where the store keeps the text (SQLite)
            known.state, known.text = state, text.kept() if text and self._store.keeps_state_text else None

    async def resolve(self, device: str, model_json: bytes, state_json: bytes) -> Resolved:
        """The device's inventory entry, started plugin, merged model and current state."""
        request_model = parse_model_json(model_json) if model_json else {}
        known = await self._known(device)
        entry = self._inventory.get(device)
        if entry is None:
            try:
                entry = entry_from_model(device, request_model or known.model, self._settings.default_plugin)
            except (TypeError, ValueError, AttributeError) as exc:  # e.g. {"spec": {"devices": 5}}
                raise InvalidRequestError(
                    f"device_model_json: not a usable device model ({type(exc).__name__}: {clip(exc)})"
                ) from None
        if entry is None:
            raise UnknownDeviceError(
                f"unknown device {device!r}: not in the inventory, and no device_model_json says how to "
                "reach it (Redfish.URL and Redfish.SecretName)"
            )
        # The request's model wins; without one, the last stored model (from an earlier request).
        model = {**entry.model, **(request_model or known.model)}
        # the stored state as the plugin returned it (never changed in place: see `remember`)
        state = parse_model_json(state_json) if state_json else (known.state or {})
        # Only registered plugin names reach the loader: a request never chooses code to import.
        self._plugin_names.lookup(entry.plugin, "request" if device not in self._inventory else "inventory")
        # The URL the plugin will connect to is fixed here, so the secret is checked against it.
        url = self._url(device, entry, model)
        endpoint = entry.endpoint(self._secrets, self._settings.ca_bundle, url=url)
        plugin = await self._plugins.get(entry.plugin)
        # the plugin's schema: hostile or outdated JSON is refused (or migrated) before device code
        self._check_model(device, plugin, model)
        try:
            state = plugin.load_state(state)
        except InvalidRequestError as exc:
            source = "device_state_json" if state_json else "stored device state"
            raise InvalidRequestError(f"{source}: {exc.message}") from None
        prior = known.text if known.text is not None else (NO_STATE if known.state is None else None)
        return Resolved(entry, plugin, endpoint, model, state, prior)

    def _check_model(self, device: str, plugin: DevicePlugin, model: dict[str, Any]) -> None:
        """`plugin.check_model`, skipped when the same plugin accepted an equal model for the device
        last time (a pure check; every request of a device usually carries the same model)."""
        cached = self._checked.get(device)
        if cached is not None and cached[0] is plugin and cached[1] == model:
            return
        plugin.check_model(model)
        self._checked[device] = (plugin, copy.deepcopy(model))  # its own: nothing else can change it

    def _url(self, device: str, entry: DeviceEntry, model: dict[str, Any]) -> str:
        """`device_url`, computed again only when the device's entry or model changed (parsing
        the model's spec on every request was a measurable share of a request's cost)."""
        cached = self._urls.get(device)
        if cached is not None and cached[0] is entry and cached[1] == model:
            return cached[2]
        url = device_url(entry, model)
        self._urls[device] = (entry, dict(model), url)
        return url

    async def _known(self, device: str) -> _Known:
        # the write-through copy (see the module docstring)
        known = self._devices.get(device)
        if known is None:
            view = await self._store.get_device(device)
            state = dict(view.state_json) if view is not None and view.state_json is not None else None
            known = _Known(state, dict(view.model_json or {}) if view is not None else {})
            if view is not None:
                self._devices[device] = known
        return known


def device_url(entry: DeviceEntry, model: Mapping[str, Any]) -> str:
    """The inventory's URL, else the model's `Redfish.URL` (checked against the secret's policy)."""
    if entry.url:
        return entry.url
    try:
        return SystemSpec.from_model(model).redfish_url
    except (TypeError, ValueError, AttributeError) as exc:
        raise InvalidRequestError(f"device_model_json: {type(exc).__name__}: {str(exc)[:200]}") from None
