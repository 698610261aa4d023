"""Nomad-shaped fingerprint, stats and reservation, built from NVML readings.

Devices are GPUs keyed by UUID and grouped by model name (vendor "nvidia", type "gpu"), as
Nomad's own NVIDIA device plugin does. The snapshot functions run on the NVML thread; the
builders are pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from plugins.base import (
    DEVICE_TYPE_GPU,
    Attribute,
    ContainerReservation,
    Device,
    DeviceGroup,
    DeviceGroupStats,
    DeviceLocality,
    DeviceNode,
    DeviceStats,
    StatObject,
    StatValue,
)
from plugins.nvml import _telemetry
from plugins.nvml._gpus import KnownGpu, enumerate_gpus
from plugins.nvml._power import to_watts

VENDOR = "nvidia"

#: device nodes every CUDA task needs besides its GPUs' /dev/nvidiaN
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


@dataclass(frozen=True)
class GpuSnapshot:
    gpu_id: int
    uuid: str
    pci_bus_id: str
    name: str
    static: _telemetry.Static


@dataclass(frozen=True)
class FingerprintSnapshot:
    driver_version: str
    gpus: tuple[GpuSnapshot, ...]
    unidentified: tuple[str, ...] = ()


def take_fingerprint(known: Mapping[str, KnownGpu]) -> FingerprintSnapshot:
    """NVML thread: identify every GPU and read its static attributes."""
    inv = enumerate_gpus(known)
    gpus = tuple(
        GpuSnapshot(g.gpu_id, g.uuid, g.pci_bus_id, g.name, _telemetry.read_static(g)) for g in inv.gpus
    )
    return FingerprintSnapshot(_telemetry.driver_version(), gpus, tuple(inv.unidentified))


def take_stats(known: Mapping[str, KnownGpu]) -> tuple[_telemetry.Reading, ...]:
    """NVML thread: a full reading of every GPU."""
    return tuple(_telemetry.read(g) for g in enumerate_gpus(known).gpus)


def _group_attributes(gpu: GpuSnapshot, driver_version: str) -> dict[str, Attribute]:
    static = gpu.static
    attrs: dict[str, Attribute] = {
        "driver_version": Attribute(driver_version),
        "architecture": Attribute(static.architecture),
        "workload_power_profiles": Attribute(static.profiles_supported),
        "module_power_scope": Attribute(static.module_scope),
    }
    if static.memory_mib is not None:
        attrs["memory"] = Attribute(static.memory_mib, "MiB")
    for key, mw in (
        ("power_limit_default", static.default_limit_mw),
        ("power_limit_min", static.min_limit_mw),
        ("power_limit_max", static.max_limit_mw),
    ):
        if mw is not None:
            attrs[key] = Attribute(to_watts(mw), "W")
    return attrs


def build_groups(snapshot: FingerprintSnapshot) -> tuple[DeviceGroup, ...]:
    """Group GPUs by model name; attributes come from the group's first healthy GPU."""
    by_name: dict[str, list[GpuSnapshot]] = {}
    for gpu in snapshot.gpus:
        by_name.setdefault(gpu.name or "unknown", []).append(gpu)
    groups = []
    for name, members in sorted(by_name.items()):
        devices = tuple(
            Device(
                id=g.uuid,
                healthy=not g.static.problem,
                health_description=g.static.problem,
                locality=DeviceLocality(pci_bus_id=g.pci_bus_id),
            )
            for g in members
        )
        healthy = [g for g in members if not g.static.problem]
        attributes = _group_attributes(healthy[0], snapshot.driver_version) if healthy else {}
        groups.append(DeviceGroup(VENDOR, DEVICE_TYPE_GPU, name, devices, attributes))
    return tuple(groups)


def _value(value: float | int | None, unit: str, desc: str) -> StatValue | None:
    if value is None:
        return None
    if isinstance(value, int):
        return StatValue(int_numerator=value, unit=unit, desc=desc)
    return StatValue(float_numerator=value, unit=unit, desc=desc)


def _watts(mw: int | None) -> float | None:
    return to_watts(mw) if mw is not None else None


def device_stats(reading: _telemetry.Reading, at: datetime) -> DeviceStats:
    if not reading.ok:
        error = StatValue(string=reading.problem, desc="the GPU cannot be read")
        return DeviceStats(summary=error, stats=StatObject(attributes={"error": error}), timestamp=at)
    energy = reading.energy_mj / 1000.0 if reading.energy_mj is not None else None
    values: dict[str, StatValue | None] = {
        "power": _value(_watts(reading.power_mw), "W", "power draw (1 s average on Ampere and newer)"),
        "energy": _value(energy, "J", "energy since the driver was loaded"),
        "temperature": _value(reading.temperature_c, "C", "GPU temperature"),
        "memory_temperature": _value(reading.memory_temperature_c, "C", "memory temperature"),
        "utilization": _value(reading.utilization_gpu_pct, "%", "GPU utilization"),
        "memory_utilization": _value(reading.utilization_memory_pct, "%", "memory utilization"),
        "power_limit": _value(_watts(reading.limit_mw), "W", "requested (in-band) power limit"),
        "enforced_power_limit": _value(
            _watts(reading.enforced_limit_mw), "W", "enforced power limit (all limiters)"
        ),
        "default_power_limit": _value(_watts(reading.default_limit_mw), "W", "default power limit"),
        "min_power_limit": _value(_watts(reading.min_limit_mw), "W", "lowest settable power limit"),
        "max_power_limit": _value(_watts(reading.max_limit_mw), "W", "highest settable power limit"),
    }
    for clock, mhz in reading.clocks_mhz.items():
        values[f"{clock}_clock"] = _value(mhz, "MHz", f"{clock} clock")
    if reading.power_capped is not None:
        values["power_capped"] = StatValue(
            boolean=reading.power_capped, desc="clocks held down by the power cap (SW power cap)"
        )
    if reading.persistence_mode is not None:
        values["persistence_mode"] = StatValue(boolean=reading.persistence_mode, desc="persistence mode")
    attributes = {k: v for k, v in values.items() if v is not None}
    summary = StatValue(
        float_numerator=_watts(reading.power_mw),
        float_denominator=_watts(reading.enforced_limit_mw),
        unit="W",
        desc="power draw of the enforced power limit",
    )
    return DeviceStats(summary=summary, stats=StatObject(attributes=attributes), timestamp=at)


def build_stats(readings: Sequence[_telemetry.Reading], at: datetime) -> tuple[DeviceGroupStats, ...]:
    by_name: dict[str, dict[str, DeviceStats]] = {}
    for reading in readings:
        by_name.setdefault(reading.name or "unknown", {})[reading.uuid] = device_stats(reading, at)
    return tuple(
        DeviceGroupStats(VENDOR, DEVICE_TYPE_GPU, name, instances)
        for name, instances in sorted(by_name.items())
    )


def reservation(uuids: Sequence[str], minors: Sequence[int]) -> ContainerReservation:
    """`NVIDIA_VISIBLE_DEVICES` for the NVIDIA container runtime, plus the nodes to mount without it."""
    nodes = [f"/dev/nvidia{minor}" for minor in minors] + list(CONTROL_NODES)
    return ContainerReservation(
        envs={"NVIDIA_VISIBLE_DEVICES": ",".join(uuids)},
        devices=tuple(DeviceNode(task_path=path, host_path=path, cgroup_perms="rw") for path in nodes),
    )
