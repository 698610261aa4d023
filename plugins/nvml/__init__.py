"""NVML plugin: in-band power limits, workload power profiles and telemetry of the local GPUs.

Uses the `pynvml` module of the `nvidia-ml-py` distribution. See docs/nvml.md for running
devicectl on a GPU node, the `gpu_id` numbering, units and the device state it keeps.
"""

from plugins.nvml._library import NvmlLibrary, check_binding, shared_library
from plugins.nvml._plugin import NvmlPlugin
from plugins.nvml._profiles import OOB_OFFSET, to_nvml_id, to_oob_id

__all__ = [
    "OOB_OFFSET",
    "NvmlLibrary",
    "NvmlPlugin",
    "check_binding",
    "shared_library",
    "to_nvml_id",
    "to_oob_id",
]
