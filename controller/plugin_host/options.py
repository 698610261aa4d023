"""A plugin's options checked against its `config_schema()` (a JSON Schema subset: names, types,
enums and bounds), each problem one line naming the option; the inventory's start-time check."""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from typing import Any

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def option_errors(schema: Mapping[str, Any], options: Mapping[str, Any]) -> list[str]:
    """Options checked against a plugin's config_schema(): names, types, enums and bounds."""
    properties: Mapping[str, Any] = schema.get("properties", {})
    errors = []
    if schema.get("additionalProperties", True) is False or properties:
        unknown = sorted(set(options) - set(properties))
        if unknown:
            known = ", ".join(sorted(properties)) or "none"
            near = [m for u in unknown for m in difflib.get_close_matches(u, list(properties), n=1)]
            hint = f"; did you mean {near[0]}?" if near else ""
            errors.append(f"unknown option(s) {', '.join(unknown)} (known: {known}){hint}")
    for key, value in options.items():
        rule = properties.get(key)
        if not isinstance(rule, Mapping):
            continue
        types = _JSON_TYPES.get(str(rule.get("type", "")), ())
        if types and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
            errors.append(f"option {key} must be of type {rule['type']}, got {value!r}")
            continue
        if isinstance(value, float) and not math.isfinite(value):  # passes `minimum`, stalls timers
            errors.append(f"option {key} must be a finite number, got {value!r}")
            continue
        if "enum" in rule and value not in rule["enum"]:
            errors.append(f"option {key} must be one of {', '.join(map(str, rule['enum']))}, got {value!r}")
        for bound, ok in (
            ("minimum", lambda v, b: v >= b),
            ("maximum", lambda v, b: v <= b),
            ("exclusiveMinimum", lambda v, b: v > b),
        ):
            if bound in rule and isinstance(value, int | float) and not ok(value, rule[bound]):
                errors.append(f"option {key} = {value!r} is out of range ({bound} {rule[bound]})")
    return errors
