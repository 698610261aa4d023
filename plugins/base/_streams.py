"""Nomad-shaped fingerprint, stats and reservation types.

Follows Nomad's `plugins/device/device.go`: a fingerprint stream of device groups, a stats
stream of per-instance statistics, and a reservation with environment variables, mounts and
device nodes. Errors travel inside the streams as data, so one failing device does not end them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from plugins.base._errors import DeviceControllerError

DEVICE_TYPE_GPU = "gpu"
DEVICE_TYPE_NODE = "node"


@dataclass(frozen=True)
class Attribute:
    """A typed attribute value with an optional unit (e.g. 700, "W")."""

    value: int | float | str | bool
    unit: str = ""


@dataclass(frozen=True)
class DeviceLocality:
    pci_bus_id: str = ""


@dataclass(frozen=True)
class Device:
    """One device instance of a group."""

    id: str
    healthy: bool
    health_description: str = ""
    locality: DeviceLocality | None = None


@dataclass(frozen=True)
class DeviceGroup:
    """Devices sharing vendor, type and name, with attributes common to all of them."""

    vendor: str
    type: str
    name: str
    devices: tuple[Device, ...] = ()
    attributes: Mapping[str, Attribute] = field(default_factory=dict)


@dataclass(frozen=True)
class FingerprintResponse:
    """Either the full current set of device groups, or an error."""

    groups: tuple[DeviceGroup, ...] = ()
    error: DeviceControllerError | None = None


@dataclass(frozen=True)
class StatValue:
    """A measured value: numerator/denominator pairs allow "used of total" values."""

    float_numerator: float | None = None
    float_denominator: float | None = None
    int_numerator: int | None = None
    int_denominator: int | None = None
    string: str | None = None
    boolean: bool | None = None
    unit: str = ""
    desc: str = ""


@dataclass(frozen=True)
class StatObject:
    """Nested statistics: named sub-objects and named values."""

    nested: Mapping[str, StatObject] = field(default_factory=dict)
    attributes: Mapping[str, StatValue] = field(default_factory=dict)


@dataclass(frozen=True)
class DeviceStats:
    summary: StatValue
    stats: StatObject
    timestamp: datetime


@dataclass(frozen=True)
class DeviceGroupStats:
    vendor: str
    type: str
    name: str
    instance_stats: Mapping[str, DeviceStats] = field(default_factory=dict)


@dataclass(frozen=True)
class StatsResponse:
    groups: tuple[DeviceGroupStats, ...] = ()
    error: DeviceControllerError | None = None


@dataclass(frozen=True)
class Mount:
    task_path: str
    host_path: str
    read_only: bool = True


@dataclass(frozen=True)
class DeviceNode:
    """A device node to expose to a task (Nomad's DeviceSpec)."""

    task_path: str
    host_path: str
    cgroup_perms: str = "rw"


@dataclass(frozen=True)
class ContainerReservation:
    envs: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    devices: tuple[DeviceNode, ...] = ()
