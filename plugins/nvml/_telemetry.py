"""Readings: power, energy, temperatures, clocks, utilisation, limits. Runs on the NVML thread.

NVML units are kept in the raw reading (mW, mJ, °C, MHz, %) and converted once, where results are
built. Energy is counted since the driver was loaded (a decrease means a reload); power is a 1 s
average on Ampere and newer (nvml.md §2.2). A reading that the GPU does not support is left out
and its reason kept in `unavailable`; a GPU that is gone ends its reading (it is reported lost).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pynvml

from plugins.base import ComponentMetrics, NodeMetrics
from plugins.nvml._errors import describe, error_code, is_device_gone
from plugins.nvml._gpus import Gpu
from plugins.nvml._library import as_text
from plugins.nvml._power import GPU_SCOPE, module_scope_supported, read_limits, to_watts
from plugins.nvml._profiles import read_current

#: architecture names by `nvmlDeviceArchitecture_t` value, from the binding
ARCHITECTURES: dict[int, str] = {
    value: name.removeprefix("NVML_DEVICE_ARCH_").lower()
    for name, value in vars(pynvml).items()
    if name.startswith("NVML_DEVICE_ARCH_") and isinstance(value, int)
}

CLOCKS = {
    "graphics": pynvml.NVML_CLOCK_GRAPHICS,
    "sm": pynvml.NVML_CLOCK_SM,
    "memory": pynvml.NVML_CLOCK_MEM,
}

#: the power cap (software power scaling) is holding the clocks down
POWER_CAP_REASON = pynvml.nvmlClocksEventReasonSwPowerCap


@dataclass
class Reading:
    """What one GPU reported, in NVML units. None means not read (see `unavailable`)."""

    gpu_id: int
    uuid: str
    pci_bus_id: str
    name: str
    problem: str = ""
    power_mw: int | None = None
    energy_mj: int | None = None
    temperature_c: int | None = None
    memory_temperature_c: int | None = None
    clocks_mhz: dict[str, int] = field(default_factory=dict)
    utilization_gpu_pct: int | None = None
    utilization_memory_pct: int | None = None
    limit_mw: int | None = None
    enforced_limit_mw: int | None = None
    default_limit_mw: int | None = None
    min_limit_mw: int | None = None
    max_limit_mw: int | None = None
    clocks_event_reasons: int | None = None
    persistence_mode: bool | None = None
    profiles: dict[str, list[int]] | None = None
    unavailable: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problem

    @property
    def power_capped(self) -> bool | None:
        if self.clocks_event_reasons is None:
            return None
        return bool(self.clocks_event_reasons & POWER_CAP_REASON)


def _optional(reading: Reading, key: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Call `fn`; a GPU that is gone re-raises, any other failure only loses this value."""
    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        if is_device_gone(exc):
            raise
        reading.unavailable[key] = describe(error_code(exc))
        return None


def read(gpu: Gpu, *, full: bool = True, profiles: bool = False) -> Reading:
    """Read one GPU. `full=False` reads power only (the cheap GPU-metrics path)."""
    reading = Reading(gpu.gpu_id, gpu.uuid, gpu.pci_bus_id, gpu.name)
    if gpu.handle is None:
        reading.problem = gpu.problem
        return reading
    handle = gpu.handle
    try:
        reading.power_mw = _optional(reading, "power", pynvml.nvmlDeviceGetPowerUsage, handle)
        if not full:
            return reading
        _read_full(reading, handle, profiles)
    except pynvml.NVMLError as exc:
        reading.problem = describe(error_code(exc))
    return reading


def _read_full(reading: Reading, handle: Any, profiles: bool) -> None:
    reading.energy_mj = _optional(reading, "energy", pynvml.nvmlDeviceGetTotalEnergyConsumption, handle)
    reading.temperature_c = _optional(
        reading, "temperature", pynvml.nvmlDeviceGetTemperatureV, handle, pynvml.NVML_TEMPERATURE_GPU
    )
    memory_temp = _optional(
        reading,
        "memory_temperature",
        pynvml.nvmlDeviceGetFieldValues,
        handle,
        [pynvml.NVML_FI_DEV_MEMORY_TEMP],
    )
    if memory_temp is not None:
        entry = memory_temp[0]
        if entry.nvmlReturn == pynvml.NVML_SUCCESS:
            reading.memory_temperature_c = int(entry.value.uiVal)
        else:
            reading.unavailable["memory_temperature"] = describe(entry.nvmlReturn)
    for key, clock in CLOCKS.items():
        value = _optional(reading, f"clock_{key}", pynvml.nvmlDeviceGetClockInfo, handle, clock)
        if value is not None:
            reading.clocks_mhz[key] = int(value)
    utilization = _optional(reading, "utilization", pynvml.nvmlDeviceGetUtilizationRates, handle)
    if utilization is not None:
        reading.utilization_gpu_pct = int(utilization.gpu)
        reading.utilization_memory_pct = int(utilization.memory)
    limits = _optional(reading, "limits", read_limits, handle, GPU_SCOPE)
    if limits is not None:
        reading.limit_mw = limits.requested_mw
        reading.enforced_limit_mw = limits.enforced_mw
        reading.default_limit_mw = limits.default_mw
        reading.min_limit_mw = limits.min_mw
        reading.max_limit_mw = limits.max_mw
    reading.clocks_event_reasons = _optional(
        reading, "clocks_event_reasons", pynvml.nvmlDeviceGetCurrentClocksEventReasons, handle
    )
    mode = _optional(reading, "persistence_mode", pynvml.nvmlDeviceGetPersistenceMode, handle)
    if mode is not None:
        reading.persistence_mode = mode == pynvml.NVML_FEATURE_ENABLED
    if profiles:
        current = _optional(reading, "workload_profiles", read_current, handle)
        if current is not None:
            reading.profiles = {
                "supported": sorted(current.supported),
                "requested": sorted(current.requested),
                "enforced": sorted(current.enforced),
            }


@dataclass(frozen=True)
class Static:
    """What does not change while the driver is loaded: the fingerprint's attributes."""

    memory_mib: int | None
    architecture: str
    default_limit_mw: int | None
    min_limit_mw: int | None
    max_limit_mw: int | None
    profiles_supported: bool
    module_scope: bool
    minor_number: int | None
    problem: str = ""


def read_static(gpu: Gpu) -> Static:
    if gpu.handle is None:
        return Static(None, "", None, None, None, False, False, None, problem=gpu.problem)
    handle = gpu.handle
    scratch = Reading(gpu.gpu_id, gpu.uuid, gpu.pci_bus_id, gpu.name)
    try:
        memory = _optional(scratch, "memory", pynvml.nvmlDeviceGetMemoryInfo, handle)
        arch = _optional(scratch, "architecture", pynvml.nvmlDeviceGetArchitecture, handle)
        limits = _optional(scratch, "limits", read_limits, handle, GPU_SCOPE)
        minor = _optional(scratch, "minor_number", pynvml.nvmlDeviceGetMinorNumber, handle)
        module = bool(_optional(scratch, "module_scope", module_scope_supported, handle))
        profiles = _optional(scratch, "workload_profiles", read_current, handle)
    except pynvml.NVMLError as exc:
        return Static(None, "", None, None, None, False, False, None, problem=describe(error_code(exc)))
    return Static(
        memory_mib=int(memory.total) // (1024 * 1024) if memory is not None else None,
        architecture=ARCHITECTURES.get(arch, "unknown") if arch is not None else "unknown",
        default_limit_mw=limits.default_mw if limits else None,
        min_limit_mw=limits.min_mw if limits else None,
        max_limit_mw=limits.max_mw if limits else None,
        profiles_supported=bool(profiles and profiles.supported),
        module_scope=module,
        minor_number=int(minor) if minor is not None else None,
    )


def minor_number(gpu: Gpu) -> int:
    """N of the GPU's /dev/nvidiaN."""
    return int(pynvml.nvmlDeviceGetMinorNumber(gpu.require()))


def driver_version() -> str:
    return as_text(pynvml.nvmlSystemGetDriverVersion())


def _w(mw: int | None) -> float:
    return to_watts(mw) if mw is not None else 0.0


def node_metrics(name: str, readings: Sequence[Reading], at: datetime) -> NodeMetrics:
    """Standard metrics: per GPU in watts, joules and °C; node power is the GPUs' sum, the only
    part of the node NVML can see."""
    gpus = tuple(
        ComponentMetrics(
            id=str(r.gpu_id),
            power_watts=_w(r.power_mw),
            energy_joules=(r.energy_mj or 0) / 1000.0,
            limit_watts=_w(r.enforced_limit_mw),
            min_watts=_w(r.min_limit_mw),
            max_watts=_w(r.max_limit_mw),
            temperature_celsius=float(r.temperature_c or 0),
        )
        for r in readings
        if r.ok
    )
    return NodeMetrics(name=name, power_watts=sum(g.power_watts for g in gpus), gpus=gpus, sampled_at=at)


def failure(reading: Reading, what: str) -> str:
    """Why a GPU's reading is missing, for a result's `error`."""
    label = f"GPU {reading.gpu_id} ({reading.uuid})"
    if reading.problem:
        return f"{label}: {reading.problem}"
    return f"{label}: {what} unavailable ({'; '.join(reading.unavailable.values()) or 'no value'})"
