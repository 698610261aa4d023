"""Numbers from outside are finite and in range: one check for every config, inventory and request.

A NaN compares false with everything, so `timeout <= 0` lets it through, and one NaN deadline in
asyncio's timer heap stalls every timer of the event loop; an infinite or huge value overflows
`int()`. Each layer's decoder (controller settings, inventory options, a plugin's config from TOML
or Nomad's msgpack, request fields) passes its numbers through `check_number`, which refuses
them with one line naming the field.
"""

from __future__ import annotations

import math
from typing import Any

#: the most seconds any timeout, interval or back-off may be: a year (anything longer is a typo)
MAX_SECONDS = 365 * 86_400.0
#: the most watts any cap, floor or limit may name: far above any rack (a GB200 NVL72 is ~130 kW)
MAX_WATTS = 10_000_000.0
#: the most any count (concurrency, attempts, sizes) may be
MAX_COUNT = 2**31 - 1


def finite(value: Any) -> bool:
    """A real number (not a bool) that is neither NaN nor infinite."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def shown(value: Any) -> str:
    """A number as a message shows it: `650`, `12.5`, `nan`, `-inf`; anything else as repr."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def check_number(
    value: Any,
    name: str,
    *,
    minimum: float = 0.0,
    maximum: float = MAX_SECONDS,
    positive: bool = False,
    integer: bool = False,
) -> Any:
    """`value` when it is a finite number within [minimum, maximum] (above 0 when `positive`, a
    whole number when `integer`); otherwise `ValueError` with one line naming `name`.

    Strings are not parsed here: a layer that takes text (environment, flags) converts it first.
    """
    if not finite(value):
        kind = "a whole number" if integer else "a finite number"
        raise ValueError(f"{name} must be {kind}, got {shown(value)}")
    if integer and value != int(value):
        raise ValueError(f"{name} must be a whole number, got {shown(value)}")
    if positive and value <= 0:
        raise ValueError(f"{name} must be positive, got {shown(value)}")
    if value < minimum or value > maximum:
        raise ValueError(f"{name} must be within {shown(minimum)}..{shown(maximum)}, got {shown(value)}")
    return int(value) if integer else value
