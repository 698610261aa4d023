"""Plugin config as a Nomad client sends it, on both sides of the wire.

A Nomad client parses the agent's `plugin "x" { config { ... } }` block with the plugin's HCL
spec (`ConfigSchema`), which fills the spec's defaults, converts values to the declared types and
refuses missing required or unknown arguments (Nomad's `helper/pluginutils/loader/init.go`,
`validatePluginConfig`, with `hclspecutils.Convert` and `hclutils.ParseHclInterface`). It then
encodes the resulting cty object with cty's msgpack: *every* attribute of the spec, `nil` where
the operator set none, keys sorted, whole numbers as integers.

`decode_config` is that step, done the same way on both sides: the plugin server runs it on the
msgpack it receives (so a Nomad client's nulls mean "not set" and get the defaults), and
devicectl's host runs it on `[[plugin]] config` / `devicectl plugin launch --config` before
`encode_config` puts it on the wire, so a plugin gets from devicectl exactly what Nomad would send.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import msgpack

from plugins._proto.nomad.plugins.shared.hclspec import hcl_spec_pb2 as hpb
from plugins.base._errors import InvalidRequestError
from plugins.base.bounds import finite, shown
from plugins.base.schema import clip, json_type

_PRIMITIVES = ("string", "number", "bool", "any")
_COLLECTION = re.compile(r"^(list|set|map)\((.*)\)$")


@dataclass(frozen=True)
class ConfigField:
    """One attribute (or nested block) of a plugin's config spec."""

    name: str
    type: str = "any"  # an HCL type expression: string, number, bool, any, list(T), set(T), map(T)
    required: bool = False
    default: Any = None  # already of `type`; None: no default
    block: ConfigSpec | None = None  # a nested block (`block`), or each item of a `block_list`
    repeated: bool = False  # `block_list` / `block_set`


@dataclass(frozen=True)
class ConfigSpec:
    """The attributes of an HCL object spec, by name."""

    fields: Mapping[str, ConfigField] = field(default_factory=dict)

    @classmethod
    def from_pb(cls, spec: hpb.Spec) -> ConfigSpec:
        """The spec a plugin's `ConfigSchema` returned; an unset spec takes no config."""
        which = spec.WhichOneof("block")
        if which is None:
            return cls()
        if which != "object":
            raise InvalidRequestError(f"config schema: the top level must be an object, not {which}")
        return cls({name: _field(name, item) for name, item in sorted(spec.object.attributes.items())})


def _field(name: str, spec: hpb.Spec) -> ConfigField:
    which = spec.WhichOneof("block")
    if which == "Attr":
        return ConfigField(spec.Attr.name or name, _check_type(spec.Attr.type), spec.Attr.required)
    if which == "default":
        primary = _field(name, spec.default.primary)
        if spec.default.default.WhichOneof("block") != "literal":
            raise InvalidRequestError(f"config schema: {name}: a default must be a literal")
        value = _literal(name, spec.default.default.literal.value)
        return ConfigField(**{**primary.__dict__, "default": _convert(value, primary.type, name)})
    if which == "block_value":
        nested = ConfigSpec.from_pb(spec.block_value.nested)
        return ConfigField(spec.block_value.name or name, "any", spec.block_value.required, block=nested)
    if which in ("block_list", "block_set"):
        msg = getattr(spec, which)
        return ConfigField(msg.name or name, "any", block=ConfigSpec.from_pb(msg.nested), repeated=True)
    raise InvalidRequestError(f"config schema: {name}: {which or 'an empty spec'} is not supported")


def _check_type(text: str) -> str:
    kind = text.replace(" ", "")
    inner = _COLLECTION.match(kind)
    if inner:
        _check_type(inner.group(2))
    elif kind not in _PRIMITIVES:
        raise InvalidRequestError(f"config schema: unsupported type {text!r}")
    return kind


def _literal(name: str, text: str) -> Any:
    """An HCL literal expression of the JSON-compatible kind (what plugins use for defaults)."""
    try:
        return json.loads(text)
    except ValueError:
        raise InvalidRequestError(f"config schema: {name}: unsupported default {clip(text)}") from None


def _number_text(value: int | float) -> str:
    """A number as cty converts it to a string (no exponent, no trailing `.0`)."""
    if isinstance(value, int) or value.is_integer():
        return str(int(value))
    return format(Decimal(repr(value)), "f")


def _convert(value: Any, kind: str, path: str) -> Any:
    """`value` converted to the HCL type `kind` as cty's `convert` does; nulls stay null.

    Numbers must be finite (cty has no NaN or infinity; a NaN timeout would stall the event loop)
    and map keys strings (cty's are), wherever they are, so every plugin's config is refused here
    with one line rather than deep inside the plugin.
    """
    if value is None:
        return value
    if kind == "any":
        return _plain(value, path)
    if kind == "string":
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int | float):
            return _number_text(value)
        if isinstance(value, str):
            return value
    elif kind == "number":
        if isinstance(value, int | float) and not isinstance(value, bool):
            if not finite(value):
                raise InvalidRequestError(f"config: {path}: must be a finite number, got {shown(value)}")
            return value
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                raise InvalidRequestError(
                    f"config: {path}: a number is required, got {clip(value)!r}"
                ) from None
            if not finite(number):
                raise InvalidRequestError(f"config: {path}: must be a finite number, got {clip(value)!r}")
            whole = number.is_integer() and not any(c in value.lower() for c in ".e")
            return int(number) if whole else number
    elif kind == "bool":
        if isinstance(value, bool):
            return value
        if value in ("true", "false"):
            return value == "true"
    else:
        match = _COLLECTION.match(kind)
        assert match is not None
        outer, inner = match.groups()
        if outer in ("list", "set") and isinstance(value, list | tuple):
            items = [_convert(v, inner, f"{path}[{i}]") for i, v in enumerate(value)]
            if outer == "set":  # a set has no order and no duplicates; cty sends it sorted
                items = sorted({json.dumps(v, sort_keys=True): v for v in items}.items())
                items = [v for _, v in items]
            return items
        if outer == "map" and isinstance(value, Mapping):
            _string_keys(value, path)
            return {str(k): _convert(v, inner, f"{path}.{k}") for k, v in sorted(value.items())}
    raise InvalidRequestError(f"config: {path}: expected {kind}, got {json_type(value)}")


def _string_keys(value: Mapping[Any, Any], path: str) -> None:
    odd = next((k for k in value if not isinstance(k, str)), None)
    if odd is not None:
        got = f"{json_type(odd)} {clip(repr(odd))}"
        raise InvalidRequestError(f"config: {path}: keys must be strings, got {got}")


def _plain(value: Any, path: str) -> Any:
    """A value of type `any` as it is, when it is JSON-like: string keys, finite numbers."""
    if isinstance(value, Mapping):
        _string_keys(value, path)
        for key, item in value.items():
            _plain(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _plain(item, f"{path}[{index}]")
    elif isinstance(value, float) and not finite(value):
        raise InvalidRequestError(f"config: {path}: must be a finite number, got {shown(value)}")
    elif value is not None and not isinstance(value, str | int | float):
        # msgpack's bin (bytes), an extension type, a date from TOML: nothing cty's `any` holds
        kind = "bytes" if isinstance(value, bytes | bytearray) else type(value).__name__
        raise InvalidRequestError(f"config: {path}: expected a string, number, bool, list or map, got {kind}")
    return value


def decode_config(spec: ConfigSpec, raw: Any, *, where: str = "") -> dict[str, Any]:
    """Config as the spec decodes it: every attribute present, defaults applied, types converted.

    `raw` is the operator's config (JSON/TOML) or what arrived in msgpack (nulls: not set).
    Raises `InvalidRequestError` naming the first problem: an unknown argument, a missing
    required one, or a value of the wrong type.
    """
    if raw is None:
        raw = {}
    at = f"{where}." if where else ""
    if not isinstance(raw, Mapping):
        raise InvalidRequestError(f"config: {where or 'config'}: expected an object, got {json_type(raw)}")
    unknown = sorted(repr(k) if not isinstance(k, str) else k for k in raw if k not in spec.fields)
    if unknown:
        takes = ", ".join(spec.fields) or "none"
        names = ", ".join(at + u for u in unknown)
        raise InvalidRequestError(f"config: unsupported argument(s) {names} (this plugin takes: {takes})")
    out: dict[str, Any] = {}
    for name, f in spec.fields.items():
        value = raw.get(name)
        path = at + name
        if f.block is not None:
            out[name] = _decode_block(f, value, path)
            continue
        value = _convert(value, f.type, path)
        if value is None:
            if f.required and f.default is None:
                raise InvalidRequestError(f"config: the argument {path!r} is required, but was not set")
            value = f.default
        out[name] = value
    return out


def _decode_block(f: ConfigField, value: Any, path: str) -> Any:
    assert f.block is not None
    if not f.repeated:
        if value is None:
            if f.required:
                raise InvalidRequestError(f"config: a block {path!r} is required")
            return None
        return decode_config(f.block, value, where=path)
    items = [] if value is None else value if isinstance(value, list | tuple) else [value]
    return [decode_config(f.block, item, where=f"{path}[{i}]") for i, item in enumerate(items)]


def _canonical(value: Any) -> Any:
    """What cty's msgpack writes: maps with sorted keys, whole numbers as integers."""
    if isinstance(value, Mapping):
        return {str(k): _canonical(value[k]) for k in sorted(value)}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return value


def encode_config(config: Mapping[str, Any]) -> bytes:
    """A decoded config as msgpack, the way a Nomad client encodes it for SetConfig."""
    return msgpack.packb(_canonical(config))


def unpack_config(spec: ConfigSpec, data: bytes) -> dict[str, Any]:
    """SetConfig's msgpack as the plugin sees it: decoded with the spec (nulls: not set)."""
    try:
        raw = msgpack.unpackb(data, raw=False, strict_map_key=False) if data else {}
    except (ValueError, TypeError, msgpack.UnpackException) as exc:  # TypeError: a list as a map key
        raise InvalidRequestError(f"config is not valid msgpack: {clip(str(exc))}") from None
    return decode_config(spec, raw)


def settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes that have a value (set, or defaulted): what a plugin's `set_config` gets."""
    return {k: v for k, v in config.items() if v is not None}


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str, what: str) -> float:
    """Seconds in a Go duration ("1m", "1m30s", "500ms"), the form Nomad plugins take periods in."""
    body = text.strip()
    if body == "0":
        return 0.0
    parts = _DURATION.findall(body)
    if not parts or "".join(n + u for n, u in parts) != body:
        raise InvalidRequestError(f"config: {what}: {clip(text)!r} is not a duration (e.g. 30s, 1m, 1m30s)")
    return sum(float(n) * _SECONDS[u] for n, u in parts)
