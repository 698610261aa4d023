"""JSON documents on the wire: `google.protobuf.Struct` and JSON bytes fields."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format, struct_pb2

#: floats that are whole numbers within this bound come back as ints (exact in a double)
_MAX_EXACT_INT = 2**53


class Untranslatable(ValueError):
    """A message that has no domain equivalent; the text starts with the field path."""


def _ints_back(value: Any) -> Any:
    # Struct stores every number as a double; JSON has no int/float split, and plugins expect
    # `3` rather than `3.0` for counts and ids, so whole numbers are returned as ints.
    if isinstance(value, float) and value.is_integer() and abs(value) <= _MAX_EXACT_INT:
        return int(value)
    if isinstance(value, dict):
        return {key: _ints_back(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_ints_back(item) for item in value]
    return value


def struct_to_dict(struct: struct_pb2.Struct, field: str) -> dict[str, Any]:
    """A plain dict for `struct` (whole-number floats become ints).

    Raises:
        Untranslatable: naming `field`, for NaN or infinite numbers (JSON has none).
    """
    try:
        value = json_format.MessageToDict(struct)
    except ValueError as exc:
        raise Untranslatable(f"{field}: {exc}") from None
    result: dict[str, Any] = _ints_back(value)
    return result


def _plain(value: Any, path: str) -> Any:
    """`value` with every Mapping made a dict and every tuple a list, checked to be JSON."""
    if value is None or isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Untranslatable(f"{path}: must be a finite number, got {value!r}")
        return value
    if isinstance(value, Mapping):
        plain: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise Untranslatable(f"{path}: keys must be strings, got {key!r}")
            plain[key] = _plain(item, f"{path}.{key}")
        return plain
    if isinstance(value, list | tuple):
        return [_plain(item, f"{path}[{index}]") for index, item in enumerate(value)]
    raise Untranslatable(f"{path}: {type(value).__name__} has no JSON form")


def dict_to_struct(value: Mapping[str, Any], field: str) -> struct_pb2.Struct:
    """A Struct holding `value` (JSON-compatible: str keys; str, number, bool, None, list, dict).

    Raises:
        Untranslatable: naming the offending path under `field`, for anything without a JSON form.
    """
    struct = struct_pb2.Struct()
    struct.update(_plain(value, field))
    return struct


def encode_json_object(value: Mapping[str, Any], field: str = "json") -> bytes:
    """Compact UTF-8 JSON for a bytes field (`device_state_json`, device models).

    An empty mapping encodes as `b"{}"`, never `b""`: in `device_state_json` empty bytes mean
    "keep the stored state", which is not the same as "the state is now empty".

    Raises:
        Untranslatable: naming the offending path under `field`, for anything without a JSON
            form (NaN, non-string keys, arbitrary objects).
    """
    text = json.dumps(_plain(value, field), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.encode("utf-8")
