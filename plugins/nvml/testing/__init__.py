"""A fake NVML for tests, demos and benchmarks, and a read-only guard for real-GPU checks.

Build a node from GPU model presets and install it for the duration of a block::

    from plugins.nvml.testing import FakeNvml

    with FakeNvml.node("h100", "h100", "b200", privileged=True) as fake:
        fake.fail("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_TIMEOUT, uuid=fake.gpu(0).uuid)
        fake.lose(fake.gpu(1).uuid)          # falls off the bus
        fake.unload_driver()                 # limits revert where persistence mode is off
        ...                                  # run NvmlPlugin(NvmlLibrary()) against it
        assert not fake.writes()

`FakeNode` adds a started plugin and carries the device state between operations as the
controller does (`async with FakeNode.start("b200") as node: await node.do("ping", Ping())`).

Presets (`MODELS`): h100, a100 (no profiles), b200 (profiles), gh200 (module scope),
gb200 (module scope and profiles).
"""

from plugins.nvml.testing._fake import PURE_HELPERS, FakeNvml
from plugins.nvml.testing._guard import forbid_writes, is_mutating
from plugins.nvml.testing._models import (
    MODELS,
    Call,
    FakeGpu,
    FakeHandle,
    FakeModule,
    FakeProfiles,
    make_gpu,
)
from plugins.nvml.testing._node import FakeNode

__all__ = [
    "MODELS",
    "PURE_HELPERS",
    "Call",
    "FakeGpu",
    "FakeHandle",
    "FakeModule",
    "FakeNode",
    "FakeNvml",
    "FakeProfiles",
    "forbid_writes",
    "is_mutating",
    "make_gpu",
]
