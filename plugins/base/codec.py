"""Domain types ⇄ JSON-compatible values, driven by the dataclasses' type hints.

Out-of-process plugins exchange requests, results and state as JSON documents of the domain
types (`devicectl.plugin.v1.PowerOperations`), so a field added to a domain type travels without
a protocol change. Decoding checks shapes and raises `InvalidRequestError` naming the field.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from datetime import datetime
from functools import cache
from typing import Any, TypeVar

from plugins.base import _errors as e

T = TypeVar("T")

_ERRORS: dict[str, type[e.DeviceControllerError]] = {
    cls.code: cls
    for cls in (
        e.InvalidRequestError,
        e.UnknownDeviceError,
        e.DeviceUnreachableError,
        e.DeviceRejectedError,
        e.DeviceLostError,
        e.UnsupportedError,
        e.HostEnvironmentError,
        e.DeviceTimeoutError,
        e.TransientError,
    )
}


def error_from(code: str, message: str, retryable: bool) -> e.DeviceControllerError:
    """The `DeviceControllerError` subclass a plugin raised, rebuilt from its code."""
    cls = _ERRORS.get(code, e.DeviceControllerError)
    return cls(message, retryable=retryable)


def encode(value: Any) -> Any:
    """A JSON-compatible copy of a domain value (dataclasses, enums, datetimes, errors)."""
    # NOTE: JSON's own types told by their exact type first (a receipt's body is encoded with every
    # write): what `_encode` does with each of them, without its chain of `isinstance` (an ABC's
    # among them) per value; a subclass of any of them goes through that chain as before
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is dict:
        return {str(k): encode(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [encode(v) for v in value]
    return _encode(value)


#: the exact types `_encode` returns as they are
_PLAIN = frozenset({str, int, float, bool, type(None)})


def _encode(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, e.DeviceControllerError):
        return {"code": value.code, "message": value.message, "retryable": value.retryable}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    raise TypeError(f"cannot encode {type(value).__name__}")


def decode(tp: Any, data: Any, where: str = "value") -> Any:
    """Rebuild a value of type `tp` from `encode`'s output."""
    try:
        return _decode(tp, data, where)
    except e.InvalidRequestError:
        raise
    except (TypeError, ValueError, KeyError) as exc:
        raise e.InvalidRequestError(f"{where}: {exc}") from None


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _decode(tp: Any, data: Any, where: str) -> Any:
    if tp is Any:
        return data
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        return _decode_union(typing.get_args(tp), data, where)
    if origin is tuple:
        return tuple(
            _decode(typing.get_args(tp)[0], v, f"{where}[{i}]") for i, v in enumerate(_list(data, where))
        )
    if origin in (Mapping, dict):
        key_type, value_type = typing.get_args(tp)
        return {
            _key(key_type, k, where): _decode(value_type, v, f"{where}.{k}")
            for k, v in _dict(data, where).items()
        }
    if isinstance(tp, type) and issubclass(tp, e.DeviceControllerError):
        raw = _dict(data, where)
        return error_from(str(raw.get("code", "")), str(raw.get("message", "")), bool(raw.get("retryable")))
    try:
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return tp(data)
        if tp is datetime:
            return datetime.fromisoformat(_typed(str, data, where))
    except ValueError as exc:
        raise e.InvalidRequestError(f"{where}: {exc}") from None
    if tp is float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            raise e.InvalidRequestError(f"{where}: expected a number, got {type(data).__name__}")
        return float(data)
    if tp in (str, int, bool):
        return _typed(tp, data, where)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        raw = _dict(data, where)
        hints = _hints(tp)
        kwargs = {
            f.name: _decode(hints[f.name], raw[f.name], f"{where}.{f.name}")
            for f in dataclasses.fields(tp)
            if f.name in raw
        }
        return tp(**kwargs)
    raise TypeError(f"cannot decode into {tp!r}")


def _decode_union(options: tuple[Any, ...], data: Any, where: str) -> Any:
    if data is None:
        if type(None) in options:
            return None
        raise e.InvalidRequestError(f"{where}: must not be null")
    candidates = [o for o in options if o is not type(None)]
    if len(candidates) == 1:
        return _decode(candidates[0], data, where)
    if all(o in (int, float, str, bool) for o in candidates):  # a scalar of any of these types
        if isinstance(data, tuple(candidates)):
            return data
        raise e.InvalidRequestError(f"{where}: expected one of {', '.join(o.__name__ for o in candidates)}")
    raise TypeError(f"{where}: ambiguous union {options!r}")


def _typed(tp: type[T], data: Any, where: str) -> T:
    if not isinstance(data, tp) or (tp is int and isinstance(data, bool)):
        raise e.InvalidRequestError(f"{where}: expected {tp.__name__}, got {type(data).__name__}")
    return data


def _key(tp: Any, key: Any, where: str) -> Any:
    """A mapping key: JSON keys are strings, an int-keyed mapping (GPU index -> watts) gets ints back."""
    if tp is not int:
        return str(key)
    try:
        return int(key)
    except ValueError:
        raise e.InvalidRequestError(f"{where}: key {key!r} is not an integer") from None


def _dict(data: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise e.InvalidRequestError(f"{where}: expected an object, got {type(data).__name__}")
    return data


def _list(data: Any, where: str) -> list[Any]:
    if not isinstance(data, list | tuple):
        raise e.InvalidRequestError(f"{where}: expected a list, got {type(data).__name__}")
    return list(data)
