"""The schema of the NVML plugin's state JSON and device model, checked before any device code runs.

State and model come from the database or from a request (`device_state_json`,
`device_model_json`), so both are untrusted: `load_state` checks every section `NvmlState`
reads (shape in `_state.py`) and migrates older layouts; `check_model` checks the model fields
the plugin uses. Either raises `InvalidRequestError` with one line naming the bad key, never a
`TypeError`/`ValueError`/`RecursionError` from deep inside the plugin.

State versions (`version`):

- absent (0): the version 1 layout without the `version` and `plugin` keys (a state written by
  hand, e.g. seeded through a request's `device_state_json`); migrated by adding them;
- 1: the current layout.

A state written by a newer plugin (a higher version) or by another plugin is refused rather than
guessed at. Unknown top-level keys are kept, so a newer version's additions survive a rollback.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from plugins.base import ElementType, InvalidRequestError, SystemSpec

STATE_VERSION = 1
#: nesting deeper than this is refused before anything walks the document recursively; above the
#: edge's limit (32) plus the levels the state wraps around a policy's properties
MAX_DEPTH = 48
#: JSON values (objects, arrays and scalars) in one state or model document
MAX_NODES = 100_000
_SCOPES = ("gpu", "module")
_SOURCES = ("topology", "idle")
_ELEMENTS = tuple(e.value for e in ElementType)


def load_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """A checked, migrated copy of a device's state (see the module docstring)."""
    if not isinstance(state, Mapping):
        raise InvalidRequestError(f"nvml state: expected a JSON object, got {_type(state)}")
    check_shape(state, "nvml state")
    data = dict(state)
    version = data.get("version", 0)
    if not _is_int(version) or not 0 <= version <= STATE_VERSION:
        raise InvalidRequestError(
            f"nvml state: version: {_value(version)} is not a state version this plugin reads "
            f"(0..{STATE_VERSION})"
        )
    plugin = data.get("plugin", "nvml")
    if plugin != "nvml":
        raise InvalidRequestError(f"nvml state: plugin: written by {_value(plugin)}, not by nvml")
    for step in _MIGRATIONS[version:]:
        data = step(data)
    _section(data, "gpus", _gpu)
    _section(data, "limits", _limit_scopes)
    _policies(data.get("policies"))
    _section(data, "profiles", _profile)
    return data


def _to_v1(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "version": 1, "plugin": "nvml"}


#: `_MIGRATIONS[n]` turns a version-n state into version n + 1
_MIGRATIONS: tuple[Callable[[dict[str, Any]], dict[str, Any]], ...] = (_to_v1,)
assert len(_MIGRATIONS) == STATE_VERSION


def check_model(model: Mapping[str, Any]) -> None:
    """Check a device model JSON: shape limits, then what `SystemSpec.from_model` reads."""
    if not isinstance(model, Mapping):
        raise InvalidRequestError(f"device model: expected a JSON object, got {_type(model)}")
    check_shape(model, "device model")
    for key in ("Model", "model", "Name", "name"):
        if model.get(key) is not None and not isinstance(model[key], str):
            raise InvalidRequestError(f"device model: {key}: expected a string, got {_type(model[key])}")
    try:
        SystemSpec.from_model(model)
    except InvalidRequestError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
        raise InvalidRequestError(f"device model: {_short(str(exc), 160)}") from None


def check_shape(value: Any, what: str) -> None:
    """Refuse documents nested deeper than `MAX_DEPTH` or larger than `MAX_NODES` (iteratively)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    nodes = 0
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise InvalidRequestError(f"{what}: more than {MAX_NODES} JSON values")
        if isinstance(item, Mapping | list | tuple):
            if depth >= MAX_DEPTH:
                raise InvalidRequestError(f"{what}: nested deeper than {MAX_DEPTH} levels")
            stack.extend(
                (child, depth + 1) for child in (item.values() if isinstance(item, Mapping) else item)
            )
        elif not (item is None or isinstance(item, str | int | float | bool)):
            raise InvalidRequestError(f"{what}: not JSON ({_type(item)})")


# ---- sections ------------------------------------------------------------------------------------


def _section(data: Mapping[str, Any], name: str, check: Callable[[str, Any], None]) -> None:
    raw = data.get(name)
    if raw is None:
        return
    for key, value in _object(raw, name).items():
        check(f"{name}.{_short(key)}", value)


def _gpu(where: str, raw: Any) -> None:
    entry = _object(raw, where)
    _string(f"{where}.pci_bus_id", entry.get("pci_bus_id"), required=True)
    _string(f"{where}.name", entry.get("name"))


def _limit_scopes(where: str, raw: Any) -> None:
    for scope, record in _object(raw, where).items():
        if scope not in _SCOPES:
            raise _bad(f"{where}.{_short(scope)}", f"unknown power scope (one of {', '.join(_SCOPES)})")
        for key, value in _object(record, f"{where}.{scope}").items():
            if key in ("prior_mw", "requested_mw") and not (_is_int(value) and value >= 0):
                raise _bad(f"{where}.{scope}.{key}", f"expected an integer >= 0, got {_value(value)}")


def _profile(where: str, raw: Any) -> None:
    entry = _object(raw, where)
    for key in ("prior_requested", "enabled"):
        items = entry.get(key, [])
        if not isinstance(items, list) or not all(_is_int(i) and 0 <= i < 256 for i in items):
            raise _bad(f"{where}.{key}", "expected a list of NVML profile ids (0..255)")


def _policies(raw: Any) -> None:
    if raw is None:
        return
    layers = _object(raw, "policies")
    topology = layers.get("topology")
    if topology is not None:
        layer = _object(topology, "policies.topology")
        if layer.get("source", "topology") not in _SOURCES:
            raise _bad("policies.topology.source", f"{_value(layer.get('source'))} is not topology or idle")
        _policy("policies.topology.policy", layer.get("policy"))
    group = layers.get("resource_group")
    if group is not None:
        layer = _object(group, "policies.resource_group")
        _string("policies.resource_group.name", layer.get("name"))
        _policy("policies.resource_group.policy", layer.get("policy"))
    gpu = layers.get("gpu")
    if gpu is not None:
        layer = _object(gpu, "policies.gpu")
        _string("policies.gpu.resource_group", layer.get("resource_group"))
        _policy("policies.gpu.current_policy", layer.get("current_policy"))
        for key, limit in _object(layer.get("limits") or {}, "policies.gpu.limits").items():
            if not key.isdigit():
                raise _bad(f"policies.gpu.limits.{_short(key)}", "expected a GPU id")
            _power_limit(f"policies.gpu.limits.{key}", limit)


def _policy(where: str, raw: Any) -> None:
    if raw is None:
        return
    policy = _object(raw, where)
    _string(f"{where}.name", policy.get("name"))
    limits = policy.get("limits", [])
    if not isinstance(limits, list):
        raise _bad(f"{where}.limits", f"expected an array, got {_type(limits)}")
    for index, item in enumerate(limits):
        entry = _object(item, f"{where}.limits[{index}]")
        if entry.get("element") not in _ELEMENTS:
            raise _bad(
                f"{where}.limits[{index}].element",
                f"{_value(entry.get('element'))} is not one of {', '.join(_ELEMENTS)}",
            )
        _power_limit(f"{where}.limits[{index}]", entry)
    if policy.get("properties") is not None:
        _object(policy["properties"], f"{where}.properties")


def _power_limit(where: str, raw: Any) -> None:
    entry = _object(raw, where)
    keys = [k for k in ("watts", "percent") if entry.get(k) is not None]
    if len(keys) != 1:
        raise _bad(where, "expected exactly one of watts or percent")
    value = entry[keys[0]]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise _bad(f"{where}.{keys[0]}", f"expected a finite number >= 0, got {_value(value)}")


# ---- helpers -------------------------------------------------------------------------------------


def _object(raw: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise _bad(where, f"expected an object, got {_type(raw)}")
    return raw


def _string(where: str, raw: Any, *, required: bool = False) -> None:
    if raw is None and not required:
        return
    if not isinstance(raw, str):
        raise _bad(where, f"expected a string, got {_type(raw)}")


def _bad(where: str, problem: str) -> InvalidRequestError:
    return InvalidRequestError(f"nvml state: {where}: {problem}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _type(value: Any) -> str:
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


def _value(value: Any) -> str:
    """A value as the message quotes it: `'bogus'`, `-1`, `None`, clipped."""
    return _short(repr(value))


def _short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else f"{text[:limit]}…({len(text) - limit} more)"
