"""Requested-versus-applied watts in a `diag_msg`.

The wire reports only the limit actually set (`power_cap_watts`). When a device set something
other than what was asked, the operator needs both numbers, so the note
"requested 700 W, applied 650 W" goes into `diag_msg` (after the plugin's own message, in
parentheses); a cap that was not applied at all (`power_cap_watts` 0: no cap of 0 W exists) reads
"requested 700 W, not applied", never "applied 0 W"; so does a write the device never took (its
result reports the limit read before it, which stays in force: nothing was applied), and a write
whose answer never came reads "requested 700 W, not confirmed". The note is written so it parses
back exactly, which keeps `response_from_proto(response_to_proto(...))` lossless.

What the request did to the component (`WriteOutcome`: "written", "not written", "unknown (the
BMC's answer never came)") leads the `diag_msg` when the plugin says it, followed by "; " and the
rest: the wire has no field for it, and a failed request must say exactly what it changed.
"""

from __future__ import annotations

import math
import re

from plugins.base import WriteOutcome

_NUMBER = r"(-?(?:\d+(?:\.\d*)?(?:e[-+]?\d+)?|inf))"
_NOTE = rf"requested {_NUMBER} W, (applied {_NUMBER} W|not applied|not confirmed)"
_BARE = re.compile(_NOTE)
_SUFFIXED = re.compile(rf"(.*) \({_NOTE}\)", re.DOTALL)


def format_watts(value: float) -> str:
    """`650` for whole numbers, else the shortest text that reads back as the same float."""
    value = float(value)  # plugins may hand over ints
    if math.isfinite(value) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def describe(message: str, requested: float | None, applied: float, write: WriteOutcome | None = None) -> str:
    """`message`, plus the requested/applied note when the two differ (`write`: what the request
    did to the component, when the plugin says)."""
    if requested is None or requested == applied:
        return message
    if write is WriteOutcome.UNKNOWN:
        done = "not confirmed"
    elif write is WriteOutcome.NOT_WRITTEN or applied == 0:
        done = "not applied"
    else:
        done = f"applied {format_watts(applied)} W"
    note = f"requested {format_watts(requested)} W, {done}"
    return f"{message} ({note})" if message else note


def parse(diag: str, applied: float, write: WriteOutcome | None = None) -> tuple[str, float | None]:
    """Split a `diag_msg` written by `describe` into (message, requested watts or None).

    The note is only trusted where `describe` would have written it: "applied X W" when X is
    `applied`, "not applied" when `applied` is 0 or nothing was written, "not confirmed" when the
    write's answer never came; so a plugin message that merely looks like a note is left alone.
    """
    match = _BARE.fullmatch(diag)
    message = ""
    if match is None:
        match = _SUFFIXED.fullmatch(diag)
        if match is None:
            return diag, None
        message, requested_text, tail, applied_text = match.groups()
    else:
        requested_text, tail, applied_text = match.groups()
    requested = float(requested_text)
    trusted = {
        "not applied": applied == 0 or write is WriteOutcome.NOT_WRITTEN,
        "not confirmed": write is WriteOutcome.UNKNOWN,
    }.get(tail, applied_text is not None and float(applied_text) == applied)
    if not trusted or requested == applied:
        return diag, None
    return message, requested


def with_write(diag: str, write: WriteOutcome | None) -> str:
    """`diag` led by what the request did to the component (unchanged when the plugin does not say)."""
    if write is None:
        return diag
    return f"{write.value}; {diag}" if diag else write.value


def split_write(diag: str) -> tuple[str, WriteOutcome | None]:
    """Undo `with_write`: (the rest of the diag_msg, the write outcome or None)."""
    for write in WriteOutcome:
        if diag == write.value:
            return "", write
        if diag.startswith(f"{write.value}; "):
            return diag[len(write.value) + 2 :], write
    return diag, None


def without_writes(text: str) -> str:
    """`text` (one diag_msg, or several joined) without the write outcomes that lead each: a dry
    run wrote nothing, so "not written" there says nothing the plan does not already say."""
    for write in sorted(WriteOutcome, key=lambda w: -len(w.value)):  # "not written" before "written"
        text = text.replace(f"{write.value}; ", "")
    return text
