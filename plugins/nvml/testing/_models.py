"""Fake GPUs: mutable per-GPU driver state, and presets for a few GPU models.

Numbers are plausible, not measured: H100 SXM 200..700 W (default 700 W), B200 200..1000 W, A100
SXM 100..400 W; superchip module limits and profile priorities/conflicts are illustrative. Tests
that need other values pass overrides (`make_gpu("b200", 0, max_mw=1_100_000)`).
"""

from __future__ import annotations

import uuid as uuid_lib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pynvml

GIB = 1024**3

#: PCI buses of an 8-GPU HGX baseboard; further GPUs get 0x10 + index
HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


@dataclass
class FakeProfiles:
    """Workload power profiles of one GPU, by NVML id: id → (priority, conflicting ids).

    Lower priority numbers win. `enforced()` arbitrates like the firmware is documented to: a
    requested profile is enforced unless it conflicts with a higher-priority requested one.
    """

    supported: dict[int, tuple[int, frozenset[int]]]
    requested: set[int] = field(default_factory=set)

    def enforced(self) -> set[int]:
        chosen: set[int] = set()
        for pid in sorted(self.requested & set(self.supported), key=lambda i: (self.supported[i][0], i)):
            if not (self.supported[pid][1] & chosen):
                chosen.add(pid)
        return chosen


@dataclass
class FakeModule:
    """Module (GPU + Grace CPU) power limits of a superchip, in mW."""

    min_mw: int
    max_mw: int
    default_mw: int
    limit_mw: int


@dataclass
class FakeGpu:
    """One GPU's driver-side state. Tests may read and change any field directly."""

    uuid: str
    name: str
    pci_bus_id: str
    architecture: int
    minor: int
    memory_total: int
    min_mw: int
    max_mw: int
    default_mw: int
    limit_mw: int
    #: a lower out-of-band (BMC) limit; the enforced limit is the lower of both
    oob_limit_mw: int | None = None
    #: what the workload would draw without a cap; the draw is capped by the enforced limit
    demand_mw: int = 350_000
    energy_mj: int = 0
    temperature_c: int = 45
    memory_temperature_c: int | None = 50
    clocks_mhz: dict[int, int] = field(
        default_factory=lambda: {
            pynvml.NVML_CLOCK_GRAPHICS: 1755,
            pynvml.NVML_CLOCK_SM: 1755,
            pynvml.NVML_CLOCK_MEM: 2619,
            pynvml.NVML_CLOCK_VIDEO: 1545,
        }
    )
    utilization: tuple[int, int] = (87, 41)
    persistence: bool = True
    module: FakeModule | None = None
    profiles: FakeProfiles | None = None
    #: fell off the bus: every call raises GPU_IS_LOST
    lost: bool = False
    #: no longer enumerated at all (the driver removed it)
    vanished: bool = False
    #: NVML function names that raise NOT_SUPPORTED on this GPU
    unsupported: set[str] = field(default_factory=set)

    @property
    def enforced_mw(self) -> int:
        return min(self.limit_mw, self.oob_limit_mw) if self.oob_limit_mw is not None else self.limit_mw

    @property
    def power_mw(self) -> int:
        return min(self.demand_mw, self.enforced_mw)

    @property
    def requested_profiles(self) -> set[int]:
        """The requested workload profiles (NVML ids); empty when the GPU has none."""
        return self.profiles.requested if self.profiles is not None else set()

    @property
    def module_limit_mw(self) -> int | None:
        return self.module.limit_mw if self.module is not None else None

    @property
    def clocks_event_reasons(self) -> int:
        return pynvml.nvmlClocksEventReasonSwPowerCap if self.demand_mw > self.enforced_mw else 0


def _b200_profiles() -> FakeProfiles:
    p = pynvml
    return FakeProfiles(
        {
            p.NVML_POWER_PROFILE_MAX_P: (2, frozenset({p.NVML_POWER_PROFILE_MAX_Q})),
            p.NVML_POWER_PROFILE_MAX_Q: (1, frozenset({p.NVML_POWER_PROFILE_MAX_P})),
            p.NVML_POWER_PROFILE_COMPUTE: (3, frozenset({p.NVML_POWER_PROFILE_MEMORY_BOUND})),
            p.NVML_POWER_PROFILE_MEMORY_BOUND: (4, frozenset({p.NVML_POWER_PROFILE_COMPUTE})),
            p.NVML_POWER_PROFILE_NETWORK: (5, frozenset()),
            p.NVML_POWER_PROFILE_BALANCED: (6, frozenset()),
            p.NVML_POWER_PROFILE_LLM_INFERENCE: (7, frozenset()),
            p.NVML_POWER_PROFILE_LLM_TRAINING: (7, frozenset()),
            p.NVML_POWER_PROFILE_HPC: (8, frozenset()),
        }
    )


def _spec(
    name: str, arch: int, memory: int, lo: int, hi: int, default: int, **extra: Any
) -> Callable[[], dict[str, Any]]:
    def make() -> dict[str, Any]:
        fields = dict(
            name=name,
            architecture=arch,
            memory_total=memory,
            min_mw=lo,
            max_mw=hi,
            default_mw=default,
            limit_mw=default,
        )
        fields.update({k: v() if callable(v) else v for k, v in extra.items()})
        return fields

    return make


#: GPU model presets by short name
MODELS: Mapping[str, Callable[[], dict[str, Any]]] = {
    "h100": _spec(
        "NVIDIA H100 80GB HBM3", pynvml.NVML_DEVICE_ARCH_HOPPER, 80 * GIB, 200_000, 700_000, 700_000
    ),
    "a100": _spec(
        "NVIDIA A100-SXM4-80GB", pynvml.NVML_DEVICE_ARCH_AMPERE, 80 * GIB, 100_000, 400_000, 400_000
    ),
    "b200": _spec(
        "NVIDIA B200",
        pynvml.NVML_DEVICE_ARCH_BLACKWELL,
        180 * GIB,
        200_000,
        1_000_000,
        1_000_000,
        profiles=_b200_profiles,
    ),
    "gh200": _spec(
        "NVIDIA GH200 480GB",
        pynvml.NVML_DEVICE_ARCH_HOPPER,
        96 * GIB,
        100_000,
        900_000,
        900_000,
        module=lambda: FakeModule(450_000, 1_000_000, 1_000_000, 1_000_000),
    ),
    "gb200": _spec(
        "NVIDIA GB200",
        pynvml.NVML_DEVICE_ARCH_BLACKWELL,
        186 * GIB,
        200_000,
        1_200_000,
        1_200_000,
        module=lambda: FakeModule(500_000, 2_700_000, 2_700_000, 2_700_000),
        profiles=_b200_profiles,
    ),
}


def make_gpu(model: str, index: int, **overrides: Any) -> FakeGpu:
    """A GPU of a preset model in slot `index` (bus id from an HGX board), with overrides."""
    try:
        fields = MODELS[model.lower()]()
    except KeyError:
        raise ValueError(f"unknown fake GPU model {model!r} (known: {', '.join(sorted(MODELS))})") from None
    bus = HGX_BUSES[index] if index < len(HGX_BUSES) else 0x10 + index
    fields.update(
        uuid=f"GPU-{uuid_lib.uuid5(uuid_lib.NAMESPACE_OID, f'devicectl-fake-{model}-{index}')}",
        pci_bus_id=f"00000000:{bus:02X}:00.0",
        minor=index,
    )
    fields.update(overrides)
    return FakeGpu(**fields)


class FakeHandle:
    """Like a real `nvmlDevice_t`: unhashable, and unequal to another lookup of the same GPU."""

    __slots__ = ("uuid",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, uuid: str) -> None:
        self.uuid = uuid

    def __repr__(self) -> str:
        return f"<FakeHandle {self.uuid}>"


@dataclass(frozen=True)
class Call:
    """One NVML call the fake served: the function name and the GPU's UUID (if any)."""

    function: str
    uuid: str | None = None

    @property
    def is_write(self) -> bool:
        return any(verb in self.function for verb in ("Set", "Clear", "Update"))
