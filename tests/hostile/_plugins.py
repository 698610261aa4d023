"""Test plugins an operator's inventory can name (by module path) for hostile-input tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plugins.base import PluginInfo
from tests.memory_plugin import MemoryPlugin


class BrokenStatePlugin(MemoryPlugin):
    """A plugin with a bug in its state loader: it raises something no contract allows."""

    info = PluginInfo(name="broken-state", version="1.0", vendor="tests")

    def load_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        raise RuntimeError("state loader bug: cannot read key 'gpus'")
