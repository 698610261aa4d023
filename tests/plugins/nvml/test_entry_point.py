"""The plugin is installed under the `devicectl.plugins` entry point and describes itself."""

from __future__ import annotations

from importlib.metadata import entry_points

from plugins.base import DevicePlugin
from plugins.nvml import NvmlPlugin


def test_the_entry_point_loads_the_plugin() -> None:
    (entry,) = [ep for ep in entry_points(group="devicectl.plugins") if ep.name == "nvml"]
    assert entry.value == "plugins.nvml:NvmlPlugin"
    cls = entry.load()
    assert cls is NvmlPlugin and issubclass(cls, DevicePlugin)


def test_plugin_info_and_options() -> None:
    plugin = NvmlPlugin()
    assert plugin.info.name == "nvml" and plugin.info.vendor == "NVIDIA"
    schema = plugin.config_schema()
    assert schema["additionalProperties"] is False
    assert schema["properties"]["power_scope"]["default"] == "gpu"
