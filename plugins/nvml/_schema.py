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

from plugins.base import ElementType, InvalidRequestError
from plugins.base.schema import check_model_basics, check_shape, clip, is_int, json_type, quote

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
        raise InvalidRequestError(f"nvml state: expected a JSON object, got {json_type(state)}")
    check_shape(state, "nvml state", max_depth=MAX_DEPTH, max_nodes=MAX_NODES)
    data = dict(state)
    version = data.get("version", 0)
    if not is_int(version) or not 0 <= version <= STATE_VERSION:
        raise InvalidRequestError(
            f"nvml state: version: {quote(version)} is not a state version this plugin reads "
            f"(0..{STATE_VERSION})"
        )
    plugin = data.get("plugin", "nvml")
    if plugin != "nvml":
        raise InvalidRequestError(f"nvml state: plugin: written by {quote(plugin)}, not by nvml")
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
    check_model_basics(model, max_depth=MAX_DEPTH, max_nodes=MAX_NODES)


# ---- sections ------------------------------------------------------------------------------------


def _section(data: Mapping[str, Any], name: str, check: Callable[[str, Any], None]) -> None:
    raw = data.get(name)
    if raw is None:
        return
    for key, value in _object(raw, name).items():
        check(f"{name}.{clip(key)}", value)


def _gpu(where: str, raw: Any) -> None:
    entry = _object(raw, where)
    _string(f"{where}.pci_bus_id", entry.get("pci_bus_id"), required=True)
    _string(f"{where}.name", entry.get("name"))


def _limit_scopes(where: str, raw: Any) -> None:
    for scope, record in _object(raw, where).items():
        if scope not in _SCOPES:
            raise _bad(f"{where}.{clip(scope)}", f"unknown power scope (one of {', '.join(_SCOPES)})")
        for key, value in _object(record, f"{where}.{scope}").items():
            if key in ("prior_mw", "requested_mw") and not (is_int(value) and value >= 0):
                raise _bad(f"{where}.{scope}.{key}", f"expected an integer >= 0, got {quote(value)}")


def _profile(where: str, raw: Any) -> None:
    entry = _object(raw, where)
    for key in ("prior_requested", "enabled"):
        items = entry.get(key, [])
        if not isinstance(items, list) or not all(is_int(i) and 0 <= i < 256 for i in items):
            raise _bad(f"{where}.{key}", "expected a list of NVML profile ids (0..255)")


def _policies(raw: Any) -> None:
    if raw is None:
        return
    layers = _object(raw, "policies")
    topology = layers.get("topology")
    if topology is not None:
        layer = _object(topology, "policies.topology")
        if layer.get("source", "topology") not in _SOURCES:
            raise _bad("policies.topology.source", f"{quote(layer.get('source'))} is not topology or idle")
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
                raise _bad(f"policies.gpu.limits.{clip(key)}", "expected a GPU id")
            _power_limit(f"policies.gpu.limits.{key}", limit)


def _policy(where: str, raw: Any) -> None:
    if raw is None:
        return
    policy = _object(raw, where)
    _string(f"{where}.name", policy.get("name"))
    limits = policy.get("limits", [])
    if not isinstance(limits, list):
        raise _bad(f"{where}.limits", f"expected an array, got {json_type(limits)}")
    for index, item in enumerate(limits):
        entry = _object(item, f"{where}.limits[{index}]")
        if entry.get("element") not in _ELEMENTS:
            raise _bad(
                f"{where}.limits[{index}].element",
                f"{quote(entry.get('element'))} is not one of {', '.join(_ELEMENTS)}",
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
        raise _bad(f"{where}.{keys[0]}", f"expected a finite number >= 0, got {quote(value)}")


# ---- helpers -------------------------------------------------------------------------------------


def _object(raw: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise _bad(where, f"expected an object, got {json_type(raw)}")
    return raw


def _string(where: str, raw: Any, *, required: bool = False) -> None:
    if raw is None and not required:
        return
    if not isinstance(raw, str):
        raise _bad(where, f"expected a string, got {json_type(raw)}")


def _bad(where: str, problem: str) -> InvalidRequestError:
    return InvalidRequestError(f"nvml state: {where}: {problem}")
