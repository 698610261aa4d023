"""Plugin discovery: the `devicectl.plugins` entry-point group, or a `module:Class` import path.

A third party adds a plugin with pip by declaring an entry point in that group; tests and
benchmarks may name a class directly with an import path.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib.metadata import entry_points

from plugins.base import DevicePlugin, HostEnvironmentError

GROUP = "devicectl.plugins"


@dataclass(frozen=True)
class PluginSource:
    name: str
    target: str  # "module:attr"


def available() -> list[PluginSource]:
    """Every plugin installed in the entry-point group, sorted by name."""
    return sorted((PluginSource(ep.name, ep.value) for ep in entry_points(group=GROUP)), key=lambda s: s.name)


def load_class(name: str) -> type[DevicePlugin]:
    """The plugin class for an entry-point name or a `module:Class` path."""
    target = name
    if ":" not in name:
        matches = [ep for ep in entry_points(group=GROUP) if ep.name == name]
        if not matches:
            known = ", ".join(s.name for s in available()) or "none"
            raise HostEnvironmentError(f"unknown plugin {name!r} (installed: {known})")
        target = matches[0].value
    module_name, _, attr = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise HostEnvironmentError(f"plugin {name!r}: cannot load {target}: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, DevicePlugin)):
        raise HostEnvironmentError(f"plugin {name!r}: {target} is not a DevicePlugin subclass")
    return cls
