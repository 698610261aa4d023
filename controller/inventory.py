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
import tomllib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.api.selectors import label_problem
from controller.config import Settings
from controller.plugin_host.options import option_errors
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
_DEVICE_KEYS = ("id", "plugin", "model", "connection", "bmc", "bmc_gpus", "labels", RETAIN_KEY)


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
    #: the operator's labels (`rack = "r12"`), selected with `-l rack=r12` (`controller.api.selectors`)
    labels: Mapping[str, str] = field(default_factory=dict)

    def all_labels(self) -> dict[str, str]:
        """The labels a selector matches: the operator's, with `model` and `plugin` unless set."""
        model = self.model.get("Model")
        implicit = {"plugin": self.plugin, **({"model": model} if isinstance(model, str) and model else {})}
        return {**implicit, **self.labels}

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
    external = {p.get("name") for p in data.get("plugin", []) if isinstance(p, Mapping)}
    problems: list[str] = []
    # [defaults] may hold the connection table of any plugin a device uses
    problem = unknown_name(defaults, (*_DEVICE_KEYS[1:], *sorted(plugins)), "defaults")
    if problem:
        problems.append(problem)
    out: dict[str, DeviceEntry] = {}
    urls: dict[str, str] = {}
    installed = None
    for index, raw in enumerate(devices):
        plugin = str(raw.get("plugin", defaults.get("plugin", "")))
        name = f" ({raw['id']})" if isinstance(raw.get("id"), str) else ""
        if installed is None:
            installed = {s.name for s in registry.available()} | {str(e) for e in external}
        problem = plugin_typo(raw, plugin, installed) or unknown_name(raw, (*_DEVICE_KEYS, plugin), "device")
        if problem:
            problems.append(f"device[{index}]{name}: {problem}")
            continue
        try:
            entry = _entry({**defaults, **raw, "labels": _merged_labels(defaults, raw)}, f"device[{index}]")
        except InventoryError as exc:
            problems.append(str(exc))
            continue
        if entry.id in out:
            problems.append(f"device[{index}]: duplicate id {entry.id!r}")
            continue
        bmc_url = _bmc_key(entry.url, entry.options.get("system"))
        if bmc_url and bmc_url in urls:
            problems.append(
                f"device[{index}] ({entry.id}): url {entry.url!r} is already device {urls[bmc_url]!r}'s; "
                "one BMC is one device (two ids would cap the same node twice), unless `system` "
                "names another of its systems"
            )
            continue
        if bmc_url:
            urls[bmc_url] = entry.id
        out[entry.id] = entry
    problems.extend(pairing_problems(out))
    if len(problems) == 1:
        raise InventoryError(f"{where}: {problems[0]}")
    if problems:
        listed = "".join(f"\n  {p}" for p in problems)
        raise InventoryError(f"{where}: {len(problems)} problems:{listed}")
    return {k: dataclasses.replace(e, external=True) if e.plugin in external else e for k, e in out.items()}


def plugin_typo(raw: Mapping[str, Any], plugin: str, installed: Collection[str]) -> str | None:
    """`plugin = "redfsh"` beside a `[device.redfish]` table: the plugin name is the typo, not the
    table; None when the plugin is installed, a module path, or nothing near it is."""
    if not plugin or plugin in installed or "." in plugin or ":" in plugin:
        return None
    tables = [k for k, v in raw.items() if isinstance(v, Mapping) and k not in _DEVICE_KEYS]
    near = difflib.get_close_matches(plugin, tables, n=1, cutoff=0.6)
    if not near:
        return None  # no table to be confused by: the start-time check names the unknown plugin
    return (
        f"unknown plugin {plugin!r}; did you mean {near[0]!r} (its [device.{near[0]}] table is here)? "
        f"(installed: {', '.join(sorted(installed))})"
    )


def _bmc_key(url: str, system: Any) -> str:
    """A BMC URL compared as one (scheme and host in lower case, no trailing slash), with the
    system it serves when one BMC serves several nodes (`system = "Node0"`)."""
    if not url:
        return ""
    scheme, sep, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme.lower()}{sep}{host.lower()}{slash}{path}".rstrip("/") + f" {system or ''}"


def _merged_labels(defaults: Mapping[str, Any], raw: Mapping[str, Any]) -> Any:
    """[defaults] labels under the device's own (a device's `labels` adds to them, key by key)."""
    base, own = defaults.get("labels", {}), raw.get("labels", {})
    if isinstance(base, Mapping) and isinstance(own, Mapping):
        return {**base, **own}
    return own if "labels" in raw else base


def _labels(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise InventoryError(f'{where}: `labels` must be a table (labels = {{ rack = "r12", row = "b" }})')
    for key, label in value.items():
        problem = label_problem(key, label)
        if problem:
            raise InventoryError(f"{where}: {problem}")
    return {str(k): str(v) for k, v in value.items()}


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
    labels = _labels(raw.get("labels", {}), where)
    return DeviceEntry(
        id=device_id,
        plugin=plugin,
        labels=labels,
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
            others = [n for n in plugins.names() if n != entry.plugin]
            near = difflib.get_close_matches(entry.plugin, others, n=1, cutoff=0.6)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            unknown = f"unknown plugin {entry.plugin!r} (installed: {known}){hint}"
            problems.append(f"device {entry.id!r}: {unknown}")
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
