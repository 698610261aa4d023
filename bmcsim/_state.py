"""Compact mutable state of one simulated BMC: power caps, energy meters and a load curve.

Readings are computed from the time and the caps when a resource is read, so a fleet of thousands of
BMCs keeps only a few small objects per BMC. Load is a sum of slow sines with a per-BMC phase: it varies a
little over time, differs between BMCs, is deterministic (no random generator per BMC) and is always
scaled under the effective cap.
"""

from __future__ import annotations

import math
import time
import zlib
from typing import Any

# periods (seconds) of the sines that make the load curve: a slow drift plus some ripple
_PERIODS = ((53.0, 0.12), (11.0, 0.05), (2.3, 0.02))
_BASE_LOAD = 0.62


def load_factor(now: float, phase: float) -> float:
    """Utilisation in roughly [0.43, 0.81] at monotonic time `now` for a component with `phase`."""
    value = _BASE_LOAD
    for k, (period, amplitude) in enumerate(_PERIODS, start=1):
        value += amplitude * math.sin(2 * math.pi * now / period + k * phase)
    return value


class Cap:
    """One power limit (a GPU, CPU, module or node cap).

    `set_point` None means "no cap" (DMTF `SetPoint: null` / `LimitInWatts: null`). `revision` is bumped
    by every change, which changes the ETag of every resource that shows this cap.
    """

    __slots__ = (
        "allow_max",
        "allow_min",
        "control_mode",
        "correction_ms",
        "default",
        "increment",
        "limit_exception",
        "name",
        "oob_active",
        "persistent",
        "revision",
        "set_point",
    )

    def __init__(
        self,
        name: str,
        allow_min: int,
        allow_max: int,
        *,
        set_point: int | None = None,
        default: int | None = None,
        control_mode: str = "Automatic",
        increment: int = 1,
    ) -> None:
        self.name = name
        self.allow_min = allow_min
        self.allow_max = allow_max
        self.default = default
        self.set_point = set_point
        self.control_mode = control_mode
        self.increment = increment
        self.oob_active = False
        self.persistent: bool | None = None
        self.limit_exception = "NoAction"
        self.correction_ms = 1000
        self.revision = 0

    def effective(self) -> float:
        """The limit the hardware enforces (AllowableMax when uncapped)."""
        return float(self.allow_max if self.set_point is None else self.set_point)

    def in_range(self, value: int) -> bool:
        """Whether `value` lies in [AllowableMin, AllowableMax]."""
        return self.allow_min <= value <= self.allow_max

    def snapshot(self) -> tuple[Any, ...]:
        """Everything a write can change, for the silent-revert fault."""
        return (self.set_point, self.control_mode, self.oob_active, self.persistent)

    def restore(self, snap: tuple[Any, ...]) -> None:
        """Put back a `snapshot()` (counts as a modification)."""
        self.set_point, self.control_mode, self.oob_active, self.persistent = snap
        self.revision += 1

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly view for tests and the control endpoint."""
        return {
            "set_point": self.set_point,
            "allowable_min": self.allow_min,
            "allowable_max": self.allow_max,
            "default_set_point": self.default,
            "control_mode": self.control_mode,
            "oob_active": self.oob_active,
            "revision": self.revision,
        }


class Meter:
    """An energy counter integrating power readings (trapezoids between reads)."""

    __slots__ = ("joules", "last_t", "last_w")

    def __init__(self, joules: float, now: float, watts: float) -> None:
        self.joules = joules
        self.last_t = now
        self.last_w = watts

    def update(self, now: float, watts: float) -> float:
        """Account up to `now` and return the total in joules."""
        if now > self.last_t:
            self.joules += (self.last_w + watts) / 2.0 * (now - self.last_t)
            self.last_t = now
        self.last_w = watts
        return self.joules


class PlatformState:
    """Base of the per-model states: the caps plus energy meters and the BMC's load phase."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        # golden-ratio spacing gives neighbouring BMCs well-separated phases
        self.phase = (seed * 0.6180339887) % 1.0 * 2 * math.pi
        self.caps: dict[str, Cap] = {}
        self._meters: dict[str, Meter] = {}

    def load(self, component: str, now: float) -> float:
        """Load factor of one component (components of a BMC are slightly out of phase)."""
        # crc32, not hash(): str hashes are salted per process and readings should be reproducible
        return load_factor(now, self.phase + (zlib.crc32(component.encode()) % 97) / 97.0)

    def energy(self, component: str, watts: float, now: float) -> float:
        """Energy counter of `component` in joules after a reading of `watts` at `now`."""
        meter = self._meters.get(component)
        if meter is None:
            # start from a plausible lifetime total so counters do not all begin at zero
            meter = self._meters[component] = Meter(3.6e6 * (10 + self.seed % 90), now, watts)
        return meter.update(now, watts)

    def set_points(self) -> dict[str, int | None]:
        """Current set point of every cap, keyed by cap name."""
        return {name: cap.set_point for name, cap in self.caps.items()}

    def describe(self) -> dict[str, Any]:
        """JSON-friendly state for tests and the control endpoint (models extend it)."""
        return {"caps": {name: cap.to_dict() for name, cap in self.caps.items()}}


def now() -> float:
    """Monotonic clock used for readings and meters."""
    return time.monotonic()


def rounded(value: float) -> float:
    """Readings carry three decimals, like NVIDIA's."""
    return round(value, 3)
