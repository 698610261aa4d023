"""Example device plugin: the files of a directory as devices (the template for plugin authors)."""

from plugins.filedevices._plugin import FileDevicesPlugin

__all__ = ["FileDevicesPlugin"]
