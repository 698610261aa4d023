"""GPU enumeration, keyed by UUID, numbered by PCI bus id.

`gpu_id` (the GPU number in requests and results) is the GPU's position when the node's GPUs are
sorted by PCI bus id (domain, bus, device, function). NVML's own index is not used: its order is
not guaranteed stable across reboots and may differ from CUDA's (nvml.md §2.1), while bus ids
only change when the hardware does.

A GPU that was seen before (recorded in the device state) and can no longer be identified, for
example because it fell off the bus, keeps its slot and is reported as lost: its neighbours are
never renumbered, so a cap meant for GPU 4 can never land on GPU 5.

Everything here runs on the NVML thread. Handles are used within one job only and never cached:
they are unhashable, compare unequal across lookups, and go stale after a reset or driver reload.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pynvml

from plugins.base import DeviceLostError, InvalidRequestError
from plugins.nvml._errors import describe, error_code, is_device_gone
from plugins.nvml._library import as_text


@dataclass(frozen=True)
class KnownGpu:
    """A GPU recorded in the device state: enough to keep its slot while it is lost."""

    uuid: str
    pci_bus_id: str
    name: str = ""


@dataclass
class Gpu:
    """One GPU slot. `handle` is None when NVML cannot reach the GPU; `problem` then says why."""

    gpu_id: int
    uuid: str
    pci_bus_id: str
    name: str
    handle: Any = field(default=None, repr=False, compare=False)
    problem: str = ""

    @property
    def label(self) -> str:
        return f"GPU {self.gpu_id} ({self.uuid})"

    def require(self) -> Any:
        """The handle, or `DeviceLostError` naming the GPU."""
        if self.handle is None:
            raise DeviceLostError(f"{self.label} at {self.pci_bus_id}: {self.problem}")
        return self.handle


@dataclass
class Inventory:
    """The node's GPUs, ordered by `gpu_id`, plus NVML devices that could not be identified."""

    gpus: list[Gpu]
    unidentified: list[str] = field(default_factory=list)

    @property
    def ids(self) -> list[int]:
        return [gpu.gpu_id for gpu in self.gpus]

    def get(self, gpu_id: int) -> Gpu | None:
        for gpu in self.gpus:
            if gpu.gpu_id == gpu_id:
                return gpu
        return None

    def select(self, gpu_ids: Iterable[int]) -> list[Gpu]:
        """The GPUs with these ids (all GPUs when empty); an unknown id is an invalid request."""
        wanted = list(gpu_ids)
        if not wanted:
            return list(self.gpus)
        unknown = [i for i in wanted if self.get(i) is None]
        if unknown:
            raise InvalidRequestError(
                f"no GPU {', '.join(map(str, unknown))} on this node (GPUs: {describe_ids(self.ids)})"
            )
        return [gpu for i in wanted if (gpu := self.get(i)) is not None]

    def problems(self) -> list[str]:
        """Human-readable reasons for every GPU or NVML device that cannot be used."""
        lost = [f"{g.label} at {g.pci_bus_id}: {g.problem}" for g in self.gpus if g.handle is None]
        return lost + self.unidentified

    def known(self) -> dict[str, dict[str, str]]:
        """The JSON recorded in the device state (see `_state.py`)."""
        return {g.uuid: {"pci_bus_id": g.pci_bus_id, "name": g.name} for g in self.gpus}


def normalise_bus_id(bus_id: str) -> str:
    """`DDDDDDDD:BB:DD.F`, upper case, with the 8-digit domain (NVML also spells it with 4)."""
    text = bus_id.strip().upper()
    domain, sep, rest = text.partition(":")
    if sep and len(domain) < 8 and all(c in "0123456789ABCDEF" for c in domain):
        text = f"{domain.zfill(8)}:{rest}"
    return text


def bus_sort_key(bus_id: str) -> tuple[int, ...] | tuple[int, str]:
    """Numeric (domain, bus, device, function), so that `0A` sorts before `1B` whatever the case."""
    try:
        domain, bus, rest = bus_id.split(":")
        device, function = rest.split(".")
        return (int(domain, 16), int(bus, 16), int(device, 16), int(function, 16))
    except ValueError:
        return (1 << 40, bus_id)


def enumerate_gpus(known: Mapping[str, KnownGpu] | None = None) -> Inventory:
    """Every GPU NVML can see, plus `known` GPUs it no longer can, numbered by PCI bus id.

    Raises:
        pynvml.NVMLError: when the device count itself cannot be read.
    """
    count = pynvml.nvmlDeviceGetCount()
    found: list[tuple[str, str, str, Any]] = []
    unidentified: list[str] = []
    lost_reasons: list[str] = []
    for index in range(count):
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            uuid = as_text(pynvml.nvmlDeviceGetUUID(handle))
            bus_id = normalise_bus_id(as_text(pynvml.nvmlDeviceGetPciInfo(handle).busId))
            name = as_text(pynvml.nvmlDeviceGetName(handle))
        except pynvml.NVMLError as exc:
            reason = describe(error_code(exc))
            unidentified.append(f"NVML device index {index}: {reason}")
            if is_device_gone(exc):
                lost_reasons.append(reason)
            continue
        found.append((uuid, bus_id, name, handle))

    seen_uuids = {uuid for uuid, *_ in found}
    seen_buses = {bus for _, bus, *_ in found}
    missing = [
        k
        for k in (known or {}).values()
        if k.uuid not in seen_uuids and normalise_bus_id(k.pci_bus_id) not in seen_buses
    ]
    if missing and lost_reasons:
        # The unidentified devices are (most likely) the missing ones: say why, once per GPU.
        unidentified = []
    problem = lost_reasons[0] if lost_reasons else "not visible to NVML: lost or removed"

    slots: list[tuple[str, str, str, Any, str]] = [(u, b, n, h, "") for u, b, n, h in found]
    slots += [(k.uuid, normalise_bus_id(k.pci_bus_id), k.name, None, problem) for k in missing]
    slots.sort(key=lambda s: bus_sort_key(s[1]))
    gpus = [
        Gpu(gpu_id=i, uuid=u, pci_bus_id=b, name=n, handle=h, problem=p)
        for i, (u, b, n, h, p) in enumerate(slots)
    ]
    return Inventory(gpus=gpus, unidentified=unidentified)


def known_from_state(raw: Any) -> dict[str, KnownGpu]:
    """Parse the `gpus` object of the device state, ignoring malformed entries."""
    out: dict[str, KnownGpu] = {}
    if not isinstance(raw, Mapping):
        return out
    for uuid, entry in raw.items():
        if isinstance(uuid, str) and isinstance(entry, Mapping) and isinstance(entry.get("pci_bus_id"), str):
            out[uuid] = KnownGpu(uuid, entry["pci_bus_id"], str(entry.get("name", "")))
    return out


def describe_ids(ids: Iterable[int]) -> str:
    values = sorted(ids)
    if not values:
        return "none"
    if values == list(range(values[0], values[-1] + 1)) and len(values) > 2:
        return f"{values[0]}..{values[-1]}"
    return ", ".join(map(str, values))
