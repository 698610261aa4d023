"""Checks every plugin's state and model schema shares: bounded shape, type names, quoting.

State and model JSON are untrusted (they come from a request or the database), so each plugin's
`load_state` / `check_model` starts with `check_shape`, an iterative walk that refuses documents
too deep or too large before anything walks them recursively, and words its errors with the
helpers here so every plugin's messages read alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import repeat
from typing import Any

from plugins.base._errors import InvalidRequestError
from plugins.base._spec import SystemSpec

#: the model/name keys every plugin reads as plain strings
_NAME_KEYS = ("Model", "model", "Name", "name")
_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


def check_shape(value: Any, what: str, *, max_depth: int, max_nodes: int) -> None:
    """Refuse documents nested deeper than `max_depth` or holding more than `max_nodes` values."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    nodes = 0
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            raise InvalidRequestError(f"{what}: more than {max_nodes} JSON values")
        kind = type(item)
        if kind in _JSON_SCALARS:  # the common case first: exact types, no ABC check
            continue
        if kind is dict or kind is list or isinstance(item, Mapping | list | tuple):
            if depth >= max_depth:
                raise InvalidRequestError(f"{what}: nested deeper than {max_depth} levels")
            children = item.values() if isinstance(item, Mapping) else item
            stack.extend(zip(children, repeat(depth + 1)))
        elif not isinstance(item, str | int | float | bool):
            raise InvalidRequestError(f"{what}: not JSON ({json_type(item)})")


def check_model_basics(model: Any, *, max_depth: int, max_nodes: int) -> SystemSpec:
    """The model checks every plugin needs: an object of bounded shape, string names, a readable spec
    (returned: `SystemSpec.from_model` of it)."""
    if not isinstance(model, Mapping):
        raise InvalidRequestError(f"device model: expected a JSON object, got {json_type(model)}")
    check_shape(model, "device model", max_depth=max_depth, max_nodes=max_nodes)
    for key in _NAME_KEYS:
        if model.get(key) is not None and not isinstance(model[key], str):
            raise InvalidRequestError(f"device model: {key}: expected a string, got {json_type(model[key])}")
    try:
        return SystemSpec.from_model(model)
    except InvalidRequestError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
        raise InvalidRequestError(f"device model: {clip(str(exc), 160)}") from None


def is_int(value: Any) -> bool:
    """A JSON integer (booleans are ints in Python, not in JSON)."""
    return isinstance(value, int) and not isinstance(value, bool)


def json_type(value: Any) -> str:
    """The JSON name of a value's type, for "expected X, got Y" messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def clip(value: Any, limit: int = 60) -> str:
    """A value as an error message or log line quotes it: strings as they are, others as repr, cut
    to `limit`, on one line: control characters (a newline would forge a log record) escaped."""
    text = value if isinstance(value, str) else repr(value)
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= limit else f"{text[:limit]}…({len(text) - limit} more)"


def quote(value: Any, limit: int = 60) -> str:
    """A value quoted as Python writes it (`'bogus'`, `-1`, `None`), cut to `limit`."""
    return clip(repr(value), limit)
