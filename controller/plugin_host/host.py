"""One started instance per plugin name, created on first use and closed at shutdown.

A name declared as an external plugin (an inventory `[[plugin]]` table) gets a `RemotePlugin`:
the same `DevicePlugin` interface, served by its own supervised process.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from controller.plugin_host.launch import ExternalPlugin
from controller.plugin_host.remote import RemotePlugin
from plugins import registry
from plugins.base import DevicePlugin

log = logging.getLogger(__name__)


class PluginHost:
    """Args:
    external: plugins served by their own processes, by name.
    client_id: this controller's instance id, handed to every in-process plugin (`set_client_id`).
    """

    def __init__(self, external: Mapping[str, ExternalPlugin] | None = None, client_id: str = "") -> None:
        self._external = dict(external or {})
        self._client_id = client_id
        self._plugins: dict[str, DevicePlugin] = {}
        self._lock = asyncio.Lock()

    async def get(self, name: str) -> DevicePlugin:
        """The started plugin `name` (entry-point name or module:Class). Raises HostEnvironmentError."""
        plugin = self._plugins.get(name)
        if plugin is not None:
            return plugin
        async with self._lock:
            if name not in self._plugins:
                spec = self._external.get(name)
                instance = RemotePlugin(spec) if spec is not None else registry.load_class(name)()
                if spec is None and self._client_id:
                    instance.set_client_id(self._client_id)
                await instance.start()
                log.info("plugin %s %s started", instance.info.name, instance.info.version)
                self._plugins[name] = instance
            return self._plugins[name]

    def started(self) -> dict[str, DevicePlugin]:
        return dict(self._plugins)

    async def close(self) -> None:
        for name, plugin in list(self._plugins.items()):
            try:
                await plugin.close()
            except Exception:
                log.exception("plugin %s failed to close cleanly", name)
        self._plugins.clear()
