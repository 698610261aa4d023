"""The range a cap must fall in: the BMC's own (the tightest it publishes for the limit, parsed by
the mechanism into `LimitReading.min_watts` / `max_watts`), else the device spec's, else a floor."""

from __future__ import annotations

from dataclasses import dataclass

from plugins.base import plain_init
from plugins.redfish._platforms import LimitReading


@plain_init
@dataclass(frozen=True)
class Bounds:
    """Limits for a cap when the BMC publishes none: the device spec's, else a safety floor."""

    min_watts: float | None
    max_watts: float | None
    source: str
    floor: float


def range_problem(label: str, watts: float, current: LimitReading, bounds: Bounds | None = None) -> str:
    if not current.in_watts:
        return (
            f"{label}: the BMC's limit is in {current.units!r}, not watts; percent set points are "
            "unsupported on this platform"
        )
    lo, hi = current.min_watts, current.max_watts
    if bounds is not None and (lo is None or hi is None):
        # NOTE: a missing bound (or PowerCapacityWatts 0, "not reported") is unknown, not zero: the
        # device spec's limits stand in; without them a floor keeps a 1 W cap from being sent.
        if lo is None and bounds.min_watts is not None:
            problem = _outside(label, watts, bounds.min_watts, None, bounds.source)
            if problem:
                return problem
        elif lo is None and watts < bounds.floor - 1e-9:
            return (
                f"{label}: {_w(watts)} is below the safety floor of {_w(bounds.floor)} (neither the BMC "
                "nor the device spec gives a minimum; option min_cap_watts)"
            )
        if hi is None and bounds.max_watts is not None:
            problem = _outside(label, watts, None, bounds.max_watts, bounds.source)
            if problem:
                return problem
    if lo is not None and watts < lo - 1e-9:
        return f"{label}: {_w(watts)} is below the BMC's {current.min_name} of {_w(lo)} ({_span(lo, hi)})"
    if hi is not None and watts > hi + 1e-9:
        return f"{label}: {_w(watts)} is above the BMC's {current.max_name} of {_w(hi)} ({_span(lo, hi)})"
    return ""


def _span(lo: float | None, hi: float | None) -> str:
    """The BMC's range, as a refusal names it (made only for a refusal: every cap is checked)."""
    if lo is not None and hi is not None:
        return f"the BMC allows {_w(lo)}..{_w(hi)}"
    return f"the BMC allows at least {_w(lo)}" if lo is not None else f"the BMC allows up to {_w(hi)}"


def _outside(label: str, watts: float, lo: float | None, hi: float | None, source: str) -> str:
    if lo is not None and watts < lo - 1e-9:
        return f"{label}: {_w(watts)} is below the {source} minimum of {_w(lo)} (the BMC publishes none)"
    if hi is not None and watts > hi + 1e-9:
        return f"{label}: {_w(watts)} is above the {source} maximum of {_w(hi)} (the BMC publishes none)"
    return ""


def _w(value: float | None) -> str:
    return "no cap" if value is None else f"{value:g} W"
