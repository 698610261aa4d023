"""Serve the NVML plugin out of process over a fake node of two H100s (real pynvml, fake library),
as `devicectl plugin serve nvml` would on a GPU node. Started by the Go host in the tests."""

from __future__ import annotations

import sys

from plugins.base import serve
from plugins.nvml import NvmlPlugin
from plugins.nvml._library import NvmlLibrary
from plugins.nvml.testing import FakeNvml

#: the node the tests expect (the fake's UUIDs are derived from these presets)
MODELS = ("h100", "h100")


def main() -> int:
    fake = FakeNvml.node(*MODELS)
    fake.install()
    try:
        return serve(NvmlPlugin(NvmlLibrary(retry_initial=0.0, retry_max=0.0)))
    finally:
        fake.uninstall()


if __name__ == "__main__":
    sys.exit(main())
