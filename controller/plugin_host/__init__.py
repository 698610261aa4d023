"""Plugins as the controller runs them: one started instance per plugin name in `host`, an
out-of-process plugin started (or dialed) and negotiated with over go-plugin's handshake in
`launch`, and `RemotePlugin`, the supervised proxy that makes such a process just another
`DevicePlugin`, in `remote`. The plugin contract itself is `plugins.base`.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from controller.plugin_host.host import PluginHost
    from controller.plugin_host.launch import ExternalPlugin, connect, load_external_plugins
    from controller.plugin_host.remote import RemotePlugin

__all__ = ["ExternalPlugin", "PluginHost", "RemotePlugin", "connect", "load_external_plugins"]

#: the module of each public name, imported on first use: importing one module of this room
#: (as the controller's own code always does) imports none of the others
_HOME = {
    "ExternalPlugin": "launch",
    "PluginHost": "host",
    "RemotePlugin": "remote",
    "connect": "launch",
    "load_external_plugins": "launch",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
