"""The schema of the Redfish plugin's state JSON and device model, checked before any device code runs.

State and model come from the database or from a request (`device_state_json`,
`device_model_json`), so both are untrusted. `load_state` checks every section the plugin reads
and migrates older layouts; `check_model` checks the model fields the plugin uses. Either raises
`InvalidRequestError` with one line naming the bad key, never `RecursionError`/`TypeError`/
`ValueError` from deep inside the plugin.

State versions:

- unversioned and 1: `discovery`, `priors`, `applied`, `profiles`, `policies` (1 had a `version`);
- 2: the same plus `plugin: "redfish"`, `sessions` (Redfish session URIs this controller opened,
  per BMC origin; never tokens) and `readings` (each component's last limit reading, so a cap can
  skip its pre-write GET). State written by another plugin is refused; unknown top-level keys are
  kept as they are.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from plugins.base import InvalidRequestError, SystemSpec
from plugins.base.schema import check_model_basics, check_shape, is_int, json_type, quote
from plugins.redfish._client.uris import redfish_path, session_member
from plugins.redfish._discovery.layout import DISCOVERY_VERSION, PLATFORMS, Component
from plugins.redfish._platforms._base import PERSISTENCIES

STATE_VERSION = 2
#: nesting deeper than this is refused before anything walks it recursively
MAX_DEPTH = 24
#: JSON values (objects, arrays and scalars) in one state or model document
MAX_NODES = 50_000
CONTROL_MODES = ("Automatic", "Manual", "Override", "Disabled")
_MODE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}")
_KINDS = ("gpu", "cpu", "node", "module", "group")
_MECHANISMS = ("", "environment_metrics", "control", "legacy_power", "hpe_acc_power_limit")
_NODE_METRICS = ("", "environment_metrics", "control", "legacy_power", "sensor")
_COMPONENT_FIELDS: dict[str, type] = {
    "reason": str,
    "quirk": str,
    "covers": str,
    "key": str,
    "kind": str,
    "index": int,
    "name": str,
    "mechanism": str,
    "limit_uri": str,
    "member": int,
    "members": int,
    "resource_uri": str,
    "metrics_uri": str,
    "wpps_uri": str,
    "model": str,
    "cap_mode": str,
}
#: component fields that are BMC resource paths: requests are sent to them
_URI_FIELDS = ("limit_uri", "resource_uri", "metrics_uri", "wpps_uri")
_DISCOVERY_STRINGS = (
    "system",
    "url",
    "model",
    "vendor",
    "product",
    "redfish_version",
    "firmware",
    "note",
    "discovered_at",
)


class LoadedState(dict[str, Any]):
    """What `load_state` returns: a state already checked and migrated.

    `DeviceState` takes one as it is instead of checking it a second time (the host runs
    `load_state` before every operation; the second walk cost ~0.25 ms per request), and so does
    `load_state`. Only this plugin makes one: `load_state` after its checks, and
    `DeviceState.to_json` from a checked state changed only through its typed setters. A state
    that came as JSON (the database, a request, another process) is a plain dict and is checked.
    Nothing changes one in place: the host treats states as values.
    """

    __slots__ = ()


def load_state(state: Mapping[str, Any]) -> LoadedState:
    """A checked, migrated copy of a device's state (see the module docstring); one this module
    already made (or the plugin returned, `DeviceState.to_json`) as it is: nothing changes it."""
    if type(state) is LoadedState:
        return state
    if not isinstance(state, Mapping):
        raise InvalidRequestError(f"device state: expected a JSON object, got {json_type(state)}")
    check_shape(state, "device state", max_depth=MAX_DEPTH, max_nodes=MAX_NODES)
    data = dict(state)
    version = data.get("version")
    if version is not None and (not is_int(version) or version not in (1, STATE_VERSION)):
        raise InvalidRequestError(
            f"device state: unknown version {quote(version)} (this plugin reads versions 1..{STATE_VERSION})"
        )
    plugin = data.get("plugin", "redfish")
    if plugin != "redfish":
        raise InvalidRequestError(f"device state: plugin: written by {quote(plugin)}, not by redfish")
    # unknown top-level keys are kept as they are: a newer version's additions survive a rollback
    out: dict[str, Any] = {k: v for k, v in data.items() if k not in _SECTIONS}
    out.update(version=STATE_VERSION, plugin="redfish")
    discovery = data.get("discovery")
    if discovery is not None:
        found = _discovery(discovery)
        if found is not None:
            out["discovery"] = found
    out["priors"] = _scoped(data.get("priors"), "priors", _prior)
    out["applied"] = _keyed(data.get("applied"), "applied", _applied)
    out["profiles"] = _profiles(data.get("profiles"))
    out["policies"] = _keyed(data.get("policies"), "policies", _string)
    out["sessions"] = _keyed(data.get("sessions"), "sessions", _session_list)
    out["readings"] = _keyed(data.get("readings"), "readings", _reading)
    return LoadedState({k: v for k, v in out.items() if v != {} or k not in _SECTIONS})


_SECTIONS = frozenset(
    {"version", "plugin", "discovery", "priors", "applied", "profiles", "policies", "sessions", "readings"}
)


def check_model(model: Mapping[str, Any]) -> SystemSpec:
    """Check a device model JSON: shape limits, then the fields the plugin reads. Returns its
    `SystemSpec.from_model` (made by the check)."""
    spec = check_model_basics(model, max_depth=MAX_DEPTH, max_nodes=MAX_NODES)
    redfish = model.get("Redfish", model.get("redfish"))
    if redfish is not None:
        if not isinstance(redfish, Mapping):
            raise InvalidRequestError(f"device model: Redfish: expected an object, got {json_type(redfish)}")
        for key, value in redfish.items():
            if not isinstance(value, str):
                raise InvalidRequestError(
                    f"device model: Redfish.{quote(key)}: expected a string, got {json_type(value)}"
                )
    return spec


# ---- sections ------------------------------------------------------------------------------------


class CheckedDiscovery(dict[str, Any]):
    """A discovery section `_discovery` checked (and copied): taken as it is when it comes back.

    The section is only ever replaced whole, never changed in place (`state.DeviceState`), so the
    one a request's state returns to the next request of the device is the checked one: walking
    its components again on every request was most of `load_state`'s cost.
    """

    __slots__ = ()


def _discovery(data: Any) -> dict[str, Any] | None:
    if type(data) is CheckedDiscovery:
        return data
    where = "discovery"
    obj = _object(data, where)
    version = obj.get("version", 0)
    if not is_int(version):
        raise InvalidRequestError(
            f"device state: {where}.version: expected an integer, got {json_type(version)}"
        )
    if version != DISCOVERY_VERSION:
        return None  # an older discovery layout: migrated by discovering again
    platform = obj.get("platform")
    if platform not in PLATFORMS:
        raise InvalidRequestError(
            f"device state: {where}.platform: {quote(platform)} is not one of {', '.join(PLATFORMS)}"
        )
    for name in _DISCOVERY_STRINGS:
        if name in obj and not isinstance(obj[name], str):
            raise InvalidRequestError(
                f"device state: {where}.{name}: expected a string, got {json_type(obj[name])}"
            )
    for name in ("systems", "evidence"):
        strings = obj.get(name) or []
        if not isinstance(strings, list | tuple) or not all(isinstance(x, str) for x in strings):
            raise InvalidRequestError(f"device state: {where}.{name}: expected a list of strings")
    for name in ("node", "gpus", "cpus", "groups"):
        items = obj.get(name) or []
        if not isinstance(items, list | tuple):
            raise InvalidRequestError(
                f"device state: {where}.{name}: expected a list, got {json_type(items)}"
            )
        for i, comp in enumerate(items):
            _component(comp, f"{where}.{name}[{i}]")
    metrics = obj.get("node_metrics") or ["", ""]
    if (
        not isinstance(metrics, list | tuple)
        or len(metrics) != 2
        or not all(isinstance(m, str) for m in metrics)
        or metrics[0] not in _NODE_METRICS
    ):
        raise InvalidRequestError(f"device state: {where}.node_metrics: expected [kind, uri]")
    if metrics[1]:
        _resource_path(metrics[1], f"{where}.node_metrics")
    extra = obj.get("extra") or {}
    if not isinstance(extra, Mapping):
        raise InvalidRequestError(f"device state: {where}.extra: expected an object, got {json_type(extra)}")
    return CheckedDiscovery(obj)


def _component(data: Any, where: str) -> None:
    obj = _object(data, where)
    for name in obj:
        if name not in _COMPONENT_FIELDS:
            raise InvalidRequestError(f"device state: {where}: unknown key {quote(name)}")
    for name, kind in _COMPONENT_FIELDS.items():
        if name in ("key", "kind", "index", "name"):
            if name not in obj:
                raise InvalidRequestError(f"device state: {where}.{name}: missing")
        value = obj.get(name)
        if value is None:
            continue
        if not isinstance(value, kind) or isinstance(value, bool):
            wanted = "an integer" if kind is int else "a string"
            raise InvalidRequestError(
                f"device state: {where}.{name}: expected {wanted}, got {json_type(value)}"
            )
    if obj["kind"] not in _KINDS:
        raise InvalidRequestError(
            f"device state: {where}.kind: {quote(obj['kind'])} is not one of {', '.join(_KINDS)}"
        )
    if obj.get("mechanism", "") not in _MECHANISMS:
        raise InvalidRequestError(f"device state: {where}.mechanism: {quote(obj['mechanism'])} is not known")
    if obj.get("cap_mode", "") not in ("", *CONTROL_MODES):
        raise InvalidRequestError(
            f"device state: {where}.cap_mode: {quote(obj['cap_mode'])} is not a ControlMode"
        )
    for name in _URI_FIELDS:
        if obj.get(name):
            _resource_path(obj[name], f"{where}.{name}")
    if obj["index"] < 0 or obj.get("member", 0) < 0 or obj.get("members", 1) < 0:
        raise InvalidRequestError(f"device state: {where}: negative index")
    Component(**obj)  # every field is checked above; this cannot raise


def _prior(data: Any, where: str) -> dict[str, Any]:
    obj = _object(data, where)
    out = {
        "watts": _number(obj.get("watts"), f"{where}.watts"),
        "capped": _bool(obj.get("capped", False), f"{where}.capped"),
        "mode": _mode(obj.get("mode"), f"{where}.mode"),
    }
    if "uri" in obj:  # kept since discovery version 4
        out["uri"] = _string(obj["uri"], f"{where}.uri")
    if "persistency" in obj:
        out["persistency"] = _persistency(obj["persistency"], f"{where}.persistency")
    return out


def _persistency(value: Any, where: str) -> str:
    if value not in PERSISTENCIES:
        known = ", ".join(PERSISTENCIES)
        raise InvalidRequestError(f"device state: {where}: {quote(value)} is not one of {known}")
    return str(value)


def _applied(data: Any, where: str) -> dict[str, Any]:
    obj = _object(data, where)
    return {
        "watts": _number(obj.get("watts"), f"{where}.watts"),
        "requested": _number(obj.get("requested"), f"{where}.requested"),
        "scope": _string(obj.get("scope", ""), f"{where}.scope"),
        "at": _string(obj.get("at", ""), f"{where}.at"),
    }


def _reading(data: Any, where: str) -> dict[str, Any]:
    obj = _object(data, where)
    out: dict[str, Any] = {}
    for name in ("watts", "min", "max", "default", "increment"):
        out[name] = _number(obj.get(name), f"{where}.{name}")
    out["capped"] = _bool(obj.get("capped", False), f"{where}.capped")
    out["mode"] = _mode(obj.get("mode"), f"{where}.mode")
    out["units"] = _string(obj.get("units", "W"), f"{where}.units")
    out["modes"] = [_mode(m, f"{where}.modes") for m in _list(obj.get("modes") or [], f"{where}.modes")]
    out["offered"] = _bool(obj.get("offered", False), f"{where}.offered")
    if "persistency" in obj:
        out["persistency"] = _persistency(obj["persistency"], f"{where}.persistency")
    if obj.get("evidence") is not None:
        out["evidence"] = _evidence(obj["evidence"], f"{where}.evidence")
    return out


#: property paths, allowed values and actions kept per reading's evidence (`WriteEvidence`)
_EVIDENCE_ITEMS = 512


def _strings(data: Any, where: str) -> list[str]:
    items = _list(data or [], where)
    if len(items) > _EVIDENCE_ITEMS:
        raise InvalidRequestError(f"device state: {where}: more than {_EVIDENCE_ITEMS} entries")
    return [_string(v, f"{where}[{i}]") for i, v in enumerate(items)]


def _checked_path(value: Any, where: str) -> str:
    _resource_path(_string(value, where), where)
    return str(value)


def _evidence(data: Any, where: str) -> dict[str, Any]:
    """A stored reading's write evidence: what the write gate judges a write on when the reading
    stands in for the pre-write GET (paths requests go to are Redfish paths)."""
    obj = _object(data, where)
    allowable = _object(obj.get("allowable") or {}, f"{where}.allowable")
    actions = _list(obj.get("actions") or [], f"{where}.actions")
    if len(allowable) > _EVIDENCE_ITEMS or len(actions) > _EVIDENCE_ITEMS:
        raise InvalidRequestError(f"device state: {where}: more than {_EVIDENCE_ITEMS} entries")
    out_actions = []
    for i, item in enumerate(actions):
        at = f"{where}.actions[{i}]"
        action = _object(item, at)
        info = _string(action.get("info", ""), f"{at}.info")
        params = _object(action.get("parameters") or {}, f"{at}.parameters")
        out_actions.append(
            {
                "name": _string(action.get("name", ""), f"{at}.name"),
                "target": _checked_path(action.get("target"), f"{at}.target"),
                "parameters": {str(k): _strings(v, f"{at}.parameters.{k}") for k, v in params.items()},
                "info": _checked_path(info, f"{at}.info") if info else "",
            }
        )
    return {
        "path": _checked_path(obj.get("path"), f"{where}.path"),
        "refused": _string(obj.get("refused", ""), f"{where}.refused"),
        "shown": _strings(obj.get("shown"), f"{where}.shown"),
        "allowable": {str(k): _strings(v, f"{where}.allowable.{k}") for k, v in allowable.items()},
        "actions": out_actions,
    }


def _profiles(data: Any) -> dict[str, Any]:
    if data is None:
        return {}
    obj = _object(data, "profiles")
    out: dict[str, Any] = {}
    priors = _scoped(obj.get("priors"), "profiles.priors", _string)
    if priors:
        out["priors"] = priors
    gpus = _keyed(obj.get("gpus"), "profiles.gpus", _gpu_profiles)
    if gpus:
        out["gpus"] = gpus
    return out


def _gpu_profiles(data: Any, where: str) -> dict[str, Any]:
    obj = _object(data, where)
    out: dict[str, Any] = {}
    for name in ("requested", "enforced"):
        ids = _list(obj.get(name) or [], f"{where}.{name}")
        if not all(is_int(i) for i in ids):
            raise InvalidRequestError(f"device state: {where}.{name}: expected a list of integers")
        out[name] = ids
    out["at"] = _string(obj.get("at", ""), f"{where}.at")
    return out


def _session_list(data: Any, where: str) -> list[str]:
    uris = _list(data, where)
    for uri in uris:
        # exactly one member of the session collection: `Sessions/../../AccountService/Accounts/3`
        # would be sent as a DELETE of the account (`plugins.redfish._client.uris`)
        if session_member(uri) is None:
            raise InvalidRequestError(
                f"device state: {where}: not a Redfish session URI (one member of "
                f"/redfish/v1/SessionService/Sessions): {quote(uri)}"
            )
    return list(uris)[-8:]


def _resource_path(uri: str, where: str) -> None:
    if not redfish_path(uri):
        raise InvalidRequestError(
            f"device state: {where}: not a plain /redfish/v1/ resource path (dot segments, encoded "
            f"separators and control characters are refused): {quote(uri)}"
        )


# ---- scalars and containers ----------------------------------------------------------------------


def _scoped(data: Any, where: str, item: Callable[[Any, str], Any]) -> dict[str, Any]:
    return _keyed(data, where, lambda value, at: _keyed(value, at, item))


def _keyed(data: Any, where: str, item: Callable[[Any, str], Any]) -> dict[str, Any]:
    if data is None:
        return {}
    obj = _object(data, where)
    return {str(key): item(value, f"{where}.{quote(key, 40)}") for key, value in obj.items()}


def _object(data: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise InvalidRequestError(f"device state: {where}: expected an object, got {json_type(data)}")
    return data


def _list(data: Any, where: str) -> list[Any]:
    if not isinstance(data, list | tuple):
        raise InvalidRequestError(f"device state: {where}: expected a list, got {json_type(data)}")
    return list(data)


def _number(value: Any, where: str) -> float | None:
    if value is None:
        return None
    # NOTE: bounds come from the BMC (some show 4294967295 for "unlimited"): only non-numbers and
    # non-finite values are refused, or a device's own state could lock it out
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidRequestError(f"device state: {where}: expected watts (a number), got {json_type(value)}")
    return value


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidRequestError(f"device state: {where}: expected true or false, got {json_type(value)}")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise InvalidRequestError(f"device state: {where}: expected a string, got {json_type(value)}")
    return value


def _mode(value: Any, where: str) -> str | None:
    # NOTE: a mode comes from the BMC and restore must put back exactly what it showed, so a vendor's
    # own spelling is kept; only what no BMC sends (not a short identifier) is refused
    if value is None:
        return None
    if not isinstance(value, str) or not _MODE.fullmatch(value):
        raise InvalidRequestError(
            f"device state: {where}: {quote(value)} is not a ControlMode ({', '.join(CONTROL_MODES)}, …)"
        )
    return value
