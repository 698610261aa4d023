"""JSON carried in request bytes fields (device models, states, entity documents): strict parsing
with size and depth limits, so a hostile document never reaches a recursive parser.

Every error names the request field it came from, like the rest of request validation.
"""

from __future__ import annotations

import json
import re
from typing import Any

from plugins.base import InvalidRequestError, json_type

__all__ = ["DEFAULT_MAX_JSON_BYTES", "DEFAULT_MAX_JSON_DEPTH", "json_depth_exceeds", "parse_json_object"]

DEFAULT_MAX_JSON_BYTES = 1 << 20
#: deepest accepted nesting of arrays and objects in a JSON field; real models and states stay
#: under 10, and deeper documents would make recursive code (json, deepcopy, plugins) blow up
DEFAULT_MAX_JSON_DEPTH = 32


def _reject_constant(name: str) -> Any:
    # Python's json accepts NaN/Infinity by default; they are not JSON and other readers choke.
    raise ValueError(f"{name} is not valid JSON")


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_BRACKET = re.compile(r"[\[\]{}]")


def json_depth_exceeds(text: str, limit: int) -> bool:
    """True when `text` nests arrays/objects deeper than `limit`; iterative, linear time.

    Brackets inside string literals do not count. Run before parsing, so a hostile document
    never reaches a recursive parser or any code that walks it.
    """
    depth = 0
    for match in _JSON_BRACKET.finditer(_JSON_STRING.sub("", text)):
        if match.group() in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def parse_json_object(
    data: bytes, field: str, *, max_bytes: int | None = None, max_depth: int = DEFAULT_MAX_JSON_DEPTH
) -> dict[str, Any]:
    """Parse `data` as a UTF-8 JSON object; empty bytes mean an empty object.

    Args:
        data: the raw bytes field (e.g. `device_model_json`).
        field: the proto field path, used in error messages.
        max_bytes: refuse documents larger than this many bytes (None: no limit).
        max_depth: refuse documents nesting arrays/objects deeper than this.

    Raises:
        InvalidRequestError: naming `field`, when the bytes are too large, nested too deeply, not
            UTF-8, not strict JSON (NaN and Infinity are refused), or not an object.
    """
    if not data:
        return {}
    if max_bytes is not None and len(data) > max_bytes:
        raise InvalidRequestError(f"{field}: {len(data)} bytes exceeds the limit of {max_bytes} bytes")
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequestError(
            f"{field}: not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None
    if json_depth_exceeds(text, max_depth):
        raise InvalidRequestError(f"{field}: JSON nested deeper than {max_depth} levels")
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise InvalidRequestError(
            f"{field}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except ValueError as exc:  # from _reject_constant
        raise InvalidRequestError(f"{field}: not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidRequestError(f"{field}: not valid JSON: nested too deeply") from None
    if not isinstance(value, dict):
        raise InvalidRequestError(f"{field}: must be a JSON object, got {json_type(value)}")
    return value
