"""The device inventory: which devices exist, their plugin, model and how to reach them.

A TOML file with one `[[device]]` table per device (see docs/operations.md), and optional
`[secrets.<name>] allow = [...]` tables saying where else a secret may be sent (docs/security.md).
Devices not in the inventory can still be served when a request's `device_model_json` says how to
reach them (entity `Redfish.URL` and `Redfish.SecretName`); their plugin must be a registered one
and their secret must be allowed for their URL.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import tomllib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.config import Settings
from controller.security.secrets import SecretPolicy, SecretStore
from plugins import registry
from plugins.base import Endpoint, HostEnvironmentError, PolicyAction, PolicyChange, RequestKind, SystemSpec

_CONNECTION_KEYS = {"url", "secret", "ca_bundle", "insecure"}
#: what an inventory file holds: a typo (`[[devices]]`) would otherwise load as no devices at all
_TOP_LEVEL = ("defaults", "device", "plugin", "secrets")
#: DPS's "retain device limits after topology deactivation": true keeps the limits in force when the
#: topology is deactivated, false restores them; absent: the config setting of the same name
RETAIN_KEY = "retain_limits_on_topology_deactivate"
#: what a `[[device]]` table holds besides its connection table (keyed by its plugin's name)
_DEVICE_KEYS = ("id", "plugin", "model", "connection", "bmc", "bmc_gpus", RETAIN_KEY)


def unknown_name(data: Mapping[str, Any], known: Iterable[str], table: str = "") -> str | None:
    """ "unknown table [[devices]]; did you mean [[device]]?" for the first key of `data` (the
    table `table`, "" at the top level) that is not in `known`; None when every key is known."""
    known = list(known)
    for key, value in data.items():
        if key in known:
            continue
        dotted = f"{table}.{{}}" if table else "{}"
        if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            kind, shape, where = "table", f"[[{dotted}]]", ""
        elif isinstance(value, Mapping):
            kind, shape, where = "table", f"[{dotted}]", ""
        else:
            kind, shape, where = "key", "`{}`", f" in [{table}]" if table else ""
        near = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        hint = f"; did you mean {shape.format(near[0])}?" if near else f" (known: {', '.join(known)})"
        return f"unknown {kind} {shape.format(key)}{where}{hint}"
    return None


@dataclass(frozen=True)
class DeviceEntry:
    """One device: `model` is the model JSON object (a bare model name becomes {"Model": name})."""

    id: str
    plugin: str
    model: Mapping[str, Any] = field(default_factory=dict)
    url: str = ""
    secret: str = ""
    ca_bundle: str = ""
    insecure: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)
    #: its plugin runs out of process (a [[plugin]] table in the same file; controller/plugin_host/launch.py)
    external: bool = False
    #: the same node's BMC device (this one reads its GPUs in-band): drift is checked both ways
    bmc: str = ""
    #: the BMC's GPU index for each in-band GPU index (empty: the same index); docs/desired-state.md
    bmc_gpus: tuple[int, ...] = ()
    #: `retain_limits_on_topology_deactivate` (None: the config setting decides)
    retain_limits_on_topology_deactivate: bool | None = None

    def endpoint(self, secrets: SecretStore, default_ca: str = "", url: str | None = None) -> Endpoint:
        """Resolve the secret now, so rotated credentials apply on the next request.

        `url` (default: the entry's) is where the plugin will connect: the secret is handed out only
        when the operator's policy allows it for that URL.
        """
        url = self.url if url is None else url
        return Endpoint(
            url=url,
            credentials=secrets.credentials(self.secret, for_url=url) if self.secret else None,
            verify_tls=not self.insecure,
            ca_bundle=self.ca_bundle or default_ca or None,
            options=dict(self.options),
        )


class InventoryError(ValueError):
    """The inventory file is invalid; the message names the file, the device and the key."""


def load_inventory(path: str | Path) -> dict[str, DeviceEntry]:
    """Parse and validate an inventory file."""
    where = str(path)
    try:
        with Path(path).open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise InventoryError(f"{where}: inventory file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise InventoryError(f"{where}: not valid TOML: {exc}") from None
    problem = unknown_name(data, _TOP_LEVEL)
    if problem:
        raise InventoryError(f"{where}: {problem}")
    defaults = data.get("defaults", {})
    devices = data.get("device", [])
    if not isinstance(devices, list) or not all(isinstance(d, Mapping) for d in devices):
        raise InventoryError(f"{where}: `device` must be an array of tables ([[device]])")
    if not isinstance(defaults, Mapping):
        raise InventoryError(f"{where}: `defaults` must be a table ([defaults])")
    plugins = {str(d.get("plugin", defaults.get("plugin", ""))) for d in devices}
    # [defaults] may hold the connection table of any plugin a device uses
    problem = unknown_name(defaults, (*_DEVICE_KEYS[1:], *sorted(plugins)), "defaults")
    if problem:
        raise InventoryError(f"{where}: {problem}")
    out: dict[str, DeviceEntry] = {}
    for index, raw in enumerate(devices):
        plugin = str(raw.get("plugin", defaults.get("plugin", "")))
        problem = unknown_name(raw, (*_DEVICE_KEYS, plugin), "device")
        if problem:
            name = f" ({raw['id']})" if isinstance(raw.get("id"), str) else ""
            raise InventoryError(f"{where}: device[{index}]{name}: {problem}")
        entry = _entry({**defaults, **raw}, f"{where}: device[{index}]")
        if entry.id in out:
            raise InventoryError(f"{where}: device[{index}]: duplicate id {entry.id!r}")
        out[entry.id] = entry
    problems = pairing_problems(out)
    if problems:
        raise InventoryError(f"{where}: {problems[0]}")
    external = {p.get("name") for p in data.get("plugin", []) if isinstance(p, Mapping)}
    return {k: dataclasses.replace(e, external=True) if e.plugin in external else e for k, e in out.items()}


def _entry(raw: Mapping[str, Any], where: str) -> DeviceEntry:
    device_id = raw.get("id")
    if not isinstance(device_id, str) or not device_id.strip():
        raise InventoryError(f"{where}: `id` must be a non-empty string")
    where = f"{where} ({device_id})"
    plugin = raw.get("plugin")
    if not isinstance(plugin, str) or not plugin:
        raise InventoryError(f'{where}: `plugin` must name a plugin (e.g. "redfish" or "nvml")')
    model = raw.get("model", {})
    if isinstance(model, str):
        model = {"Model": model}
    elif not isinstance(model, Mapping):
        raise InventoryError(f"{where}: `model` must be a model name or a table")
    conn = dict(raw.get(plugin, {}) if isinstance(raw.get(plugin), Mapping) else {})
    conn.update(raw.get("connection", {}) if isinstance(raw.get("connection"), Mapping) else {})
    for key in ("url", "secret"):
        if key in conn and not isinstance(conn[key], str):
            raise InventoryError(f"{where}: `{key}` must be a string")
    if conn.get("url") and not str(conn["url"]).startswith("https://"):
        # a BMC takes credentials and power caps: never over plaintext http://
        raise InventoryError(f"{where}: url {conn['url']!r} must start with https://")
    insecure = conn.get("insecure", False)
    if not isinstance(insecure, bool):
        raise InventoryError(f"{where}: `insecure` must be true or false")
    bmc = raw.get("bmc", "")
    if not isinstance(bmc, str):
        raise InventoryError(f"{where}: `bmc` must name the device id of the same node's BMC")
    bmc_gpus = raw.get("bmc_gpus", [])
    if not isinstance(bmc_gpus, list) or not all(type(i) is int and i >= 0 for i in bmc_gpus):
        raise InventoryError(f"{where}: `bmc_gpus` must be a list of the BMC's GPU indexes (0, 1, ...)")
    if len(set(bmc_gpus)) != len(bmc_gpus) or (bmc_gpus and not bmc):
        raise InventoryError(f"{where}: `bmc_gpus` needs `bmc` and may name each BMC GPU index once")
    retain = raw.get(RETAIN_KEY)
    if retain is not None and not isinstance(retain, bool):
        raise InventoryError(f"{where}: `{RETAIN_KEY}` must be true or false")
    return DeviceEntry(
        id=device_id,
        plugin=plugin,
        model=dict(model),
        url=str(conn.get("url", "")),
        secret=str(conn.get("secret", "")),
        ca_bundle=str(conn.get("ca_bundle", "")),
        insecure=insecure,
        options={k: v for k, v in conn.items() if k not in _CONNECTION_KEYS},
        bmc=bmc,
        bmc_gpus=tuple(bmc_gpus),
        retain_limits_on_topology_deactivate=retain,
    )


def deactivation_choice(kind: RequestKind, request: Any, entry: DeviceEntry, settings: Settings) -> Any:
    """`request` with the operator's choice for a topology deactivation: retain the limits in force
    (the entry's `retain_limits_on_topology_deactivate`, else the setting), or restore (the default).
    Requests never choose it themselves; every other request is returned as it is."""
    if kind not in (RequestKind.TOPOLOGY_ACTIVATE, RequestKind.TOPOLOGY_DEACTIVATE):
        return request
    if not isinstance(request, PolicyChange) or request.action is not PolicyAction.UNSET:
        return request
    retain = entry.retain_limits_on_topology_deactivate
    retain = settings.retain_limits_on_topology_deactivate if retain is None else retain
    return dataclasses.replace(request, retain_limits=retain)


def pairing_problems(entries: Mapping[str, DeviceEntry]) -> list[str]:
    """What is wrong with the `bmc` links (one in-band device and its node's BMC device)."""
    problems = []
    claimed: dict[str, str] = {}
    for entry in entries.values():
        if not entry.bmc:
            continue
        where = f"device {entry.id!r}: bmc {entry.bmc!r}"
        target = entries.get(entry.bmc)
        if target is None:
            problems.append(f"{where} is not a device in the inventory")
        elif target.id == entry.id or target.bmc:
            problems.append(f"{where} must be another device, the node's BMC (which names no `bmc` itself)")
        elif entry.bmc in claimed:
            problems.append(f"{where} is already the BMC of device {claimed[entry.bmc]!r}")
        claimed.setdefault(entry.bmc, entry.id)
    return problems


def node_partner(entries: Mapping[str, DeviceEntry], device: str) -> DeviceEntry | None:
    """The other device serving the same node: the BMC of an in-band device, or the reverse."""
    entry = entries.get(device)
    if entry is not None and entry.bmc:
        return entries.get(entry.bmc)
    return next((e for e in entries.values() if e.bmc == device), None)


def entry_from_model(device_id: str, model: Mapping[str, Any], default_plugin: str) -> DeviceEntry | None:
    """A device entry from a request's model JSON, when it says how to reach the device."""
    spec = SystemSpec.from_model(model)
    if not spec.redfish_url:
        return None
    plugin = spec.plugin.split("_", 1)[0].split(".", 1)[0] if spec.plugin else default_plugin
    return DeviceEntry(
        id=device_id,
        plugin=plugin or default_plugin,
        model=dict(model),
        url=spec.redfish_url,
        secret=spec.secret_name,
    )


def parse_model_json(data: bytes) -> dict[str, Any]:
    """Model or state JSON bytes as a dict ({} when empty)."""
    if not data:
        return {}
    value = json.loads(data)
    if not isinstance(value, dict):
        raise HostEnvironmentError("model JSON is not an object")
    return value


def load_secret_rules(path: str | Path) -> dict[str, tuple[str, ...]]:
    """The inventory's `[secrets.<name>] allow = ["host", "*.domain", "10.0.0.0/24", ...]` tables."""
    where = str(path)
    try:
        with Path(path).open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise InventoryError(f"{where}: inventory file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise InventoryError(f"{where}: not valid TOML: {exc}") from None
    table = data.get("secrets", {})
    if not isinstance(table, Mapping):
        raise InventoryError(f"{where}: `secrets` must be a table of [secrets.<name>] tables")
    rules: dict[str, tuple[str, ...]] = {}
    for name, body in table.items():
        allow = body.get("allow") if isinstance(body, Mapping) else None
        extra = sorted(set(body) - {"allow"}) if isinstance(body, Mapping) else []
        if not isinstance(allow, list) or not all(isinstance(a, str) and a for a in allow) or extra:
            raise InventoryError(
                f'{where}: [secrets.{name}] must hold only allow = ["host", "*.domain", "10.0.0.0/24", ...]'
            )
        rules[str(name)] = tuple(allow)
    return rules


def secret_policy(entries: Mapping[str, DeviceEntry], rules: Mapping[str, tuple[str, ...]]) -> SecretPolicy:
    """Each inventory device binds its secret to its own BMC URL; `rules` add allowed hosts."""
    bound: dict[str, list[str]] = {}
    for entry in entries.values():
        if entry.secret and entry.url:
            bound.setdefault(entry.secret, []).append(entry.url)
    return SecretPolicy(bound, rules)


def inventory_secrets(settings: Settings, entries: Mapping[str, DeviceEntry]) -> SecretStore:
    """The secrets directory, each secret usable only where the operator's inventory allows it."""
    rules = load_secret_rules(settings.inventory) if settings.inventory else {}
    return SecretStore(
        settings.secrets_dir or None,
        policy=secret_policy(entries, rules),
        allow_readable=settings.secrets_allow_readable,
    )


def plugin_registry(entries: Mapping[str, DeviceEntry], default_plugin: str) -> registry.PluginRegistry:
    """Installed plugins plus the module paths the operator named (inventory, default_plugin)."""
    return registry.PluginRegistry(
        [*(e.plugin for e in entries.values()), default_plugin],
        external=[e.plugin for e in entries.values() if e.external],
    )


def check_inventory(
    entries: Mapping[str, DeviceEntry], plugins: registry.PluginRegistry, secrets: SecretStore
) -> list[str]:
    """Every problem found at start: unknown plugins, options their schema does not accept, secret
    files readable by others (unless allowed). Loads plugin classes; imports only registered names."""
    problems: list[str] = pairing_problems(entries)
    schemas: dict[str, Mapping[str, Any] | None] = {}
    models: dict[str, Collection[str] | None] = {}
    for entry in entries.values():
        if entry.plugin not in plugins:
            known = ", ".join(plugins.names())
            problems.append(f"device {entry.id!r}: unknown plugin {entry.plugin!r} (installed: {known})")
            continue
        if entry.external:  # its schema lives in the plugin's process, which checks its own options
            continue
        if entry.plugin not in schemas:
            try:
                plugin = registry.load_class(entry.plugin)()
                schemas[entry.plugin], models[entry.plugin] = plugin.config_schema(), plugin.known_models()
            except Exception as exc:  # a broken plugin is a start-time problem, named once
                problems.append(f"plugin {entry.plugin!r} cannot be loaded: {exc}")
                schemas[entry.plugin] = models[entry.plugin] = None
        schema = schemas[entry.plugin]
        if schema is not None:
            problems.extend(f"device {entry.id!r}: {p}" for p in option_errors(schema, entry.options))
        problem = model_problem(entry.model, models[entry.plugin])
        if problem:
            problems.append(f"device {entry.id!r}: {problem}")
    seen: set[str] = set()
    if not secrets.allows_readable:
        for entry in entries.values():
            if entry.secret and entry.secret not in seen:
                seen.add(entry.secret)
                problems.extend(secrets.readable_by_others(entry.secret))
    return problems


def model_problem(model: Mapping[str, Any], known: Collection[str] | None) -> str | None:
    """A bare model name (`model = "DGX_GB2OO"`) the plugin does not know, with the nearest it does.

    A model table names whatever it describes (its own components and limits), so only a bare name
    is checked; `known` None means the plugin takes any name."""
    name = model.get("Model")
    if known is None or set(model) != {"Model"} or not isinstance(name, str):
        return None
    upper = {k.upper(): k for k in known}
    if name.upper() in upper:
        return None
    near = difflib.get_close_matches(name.upper(), list(upper), n=1, cutoff=0.6)
    hint = f"did you mean {upper[near[0]]!r}?" if near else f"known: {', '.join(sorted(set(known)))}"
    return f"unknown model {name!r} ({hint}); a model table may describe any other"


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
