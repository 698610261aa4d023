"""Plugin discovery: the `devicectl.plugins` entry-point group, or a `module:Class` import path.

A third party adds a plugin with pip by declaring an entry point in that group; tests and
benchmarks may name a class directly with an import path, but only in operator-controlled
config or inventory. A plugin name that comes from a request is looked up in a fixed
`PluginRegistry` (built at start) and never imported: `load_class` is only ever called with a
name the registry accepted.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
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


def is_path(name: str) -> bool:
    """A `module:Class` import path rather than an installed plugin's name."""
    return ":" in name


class PluginRegistry:
    """The fixed set of plugin names this process may load: the installed entry points, plus the
    `module:Class` paths the operator named (inventory, `default_plugin`). Built once at start;
    `lookup` never imports anything."""

    def __init__(self, operator_named: Iterable[str] = (), external: Iterable[str] = ()) -> None:
        self._installed = {s.name for s in available()}
        self._paths = {n for n in operator_named if is_path(n)}
        #: names of out-of-process plugins the operator declared (inventory [[plugin]] tables)
        self._external = set(external)

    def names(self) -> list[str]:
        return sorted(self._installed | self._paths | self._external)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (
            name in self._installed or name in self._paths or name in self._external
        )

    def lookup(self, name: str, where: str = "request") -> str:
        """`name` when registered; HostEnvironmentError naming the known plugins otherwise."""
        if name in self:
            return name
        shown = name if len(name) <= 64 else name[:61] + "..."
        known = ", ".join(sorted(self._installed)) or "none"
        raise HostEnvironmentError(
            f"unknown plugin {shown!r} named by the {where} (installed: {known}); plugins are chosen "
            "from the installed set, and module paths only in the operator's inventory or config"
        )
