"""`devicectl fingerprint` and `devicectl stats`: the plugins' Nomad-shaped streams, read locally.

They load the inventory, start each plugin the inventory names, and print the first fingerprint
(inventory and health) or `--samples` rounds of statistics. No controller needs to run.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import defaultdict
from typing import Any

import click

from controller.cli._click import call, output_options
from controller.cli._options import Options
from controller.cli._render import err_console, print_json, table
from controller.config import Settings, load_settings
from controller.inventory import DeviceEntry, inventory_secrets, load_inventory
from controller.plugin_host.host import PluginHost
from controller.plugin_host.launch import load_external_plugins
from plugins.base import DeviceControllerError, DeviceTarget, StatObject, StatValue


def _read_options(f: Any) -> Any:
    for decorator in (
        click.option(
            "--timeout", type=float, default=30.0, show_default=True, help="seconds to wait per plugin"
        ),
        click.option("--secrets-dir", help="directory with one file per BMC secret name"),
        click.option("--inventory", help="device inventory TOML file"),
        click.option("--config", help="TOML config file (env DEVICECTL_CONFIG)"),
        output_options,
    ):
        f = decorator(f)
    return f


def register(cli: click.Group) -> None:
    @cli.command("fingerprint")
    @_read_options
    def _fingerprint(**_: Any) -> int:
        """Devices, health and attributes, from each plugin (no controller needed)."""
        return call(run_fingerprint)

    @cli.command("stats")
    @_read_options
    @click.option("--interval", type=float, default=1.0, show_default=True, help="seconds between samples")
    @click.option("--samples", type=int, default=1, show_default=True, help="rounds of statistics to print")
    def _stats(**_: Any) -> int:
        """Power, energy, limits and more, from each plugin (no controller needed)."""
        return call(run_stats)


def _settings(args: Options) -> Settings:
    settings = load_settings(
        args.config, overrides={"inventory": args.inventory, "secrets_dir": args.secrets_dir}
    )
    if not settings.inventory:
        raise ValueError("give --inventory (or set inventory in the config)")
    return settings


def _targets(settings: Settings) -> dict[str, list[DeviceTarget]]:
    entries = load_inventory(settings.inventory)
    secrets = inventory_secrets(settings, entries)
    by_plugin: dict[str, list[DeviceTarget]] = defaultdict(list)
    entry: DeviceEntry
    for entry in entries.values():
        by_plugin[entry.plugin].append(
            DeviceTarget(
                device_id=entry.id,
                model=dict(entry.model),
                endpoint=entry.endpoint(secrets, settings.ca_bundle),
            )
        )
    return by_plugin


async def _first(stream: Any, count: int, timeout: float) -> list[Any]:
    out: list[Any] = []
    try:
        async with asyncio.timeout(timeout):
            async for item in stream:
                out.append(item)
                if len(out) >= count:
                    break
    finally:
        await stream.aclose()
    return out


async def _collect(args: Options, kind: str) -> tuple[list[tuple[str, Any]], int]:
    """Each plugin's first responses, and how many plugins failed."""
    settings = _settings(args)
    # the inventory's [[plugin]] tables: their plugins run as serve runs them, with their config
    host = PluginHost(load_external_plugins(settings.inventory))
    results: list[tuple[str, Any]] = []
    failures = 0
    try:
        for plugin_name, targets in _targets(settings).items():
            try:
                plugin = await host.get(plugin_name)
                if kind == "fingerprint":
                    items = await _first(plugin.fingerprint(targets), 1, args.timeout)
                else:
                    items = await _first(plugin.stats(targets, args.interval), args.samples, args.timeout)
            except (DeviceControllerError, TimeoutError) as exc:
                err_console.print(f"[red]{plugin_name}[/red]: {exc or 'timed out'}", soft_wrap=True)
                failures += 1
                continue
            results.extend((plugin_name, item) for item in items)
    finally:
        await host.close()
    return results, failures


def _exit_code(results: list[tuple[str, Any]], failures: int) -> int:
    """1 when a plugin failed, a response carries an error, or nothing came back."""
    return 1 if failures or not results or any(r.error is not None for _, r in results) else 0


def _value(v: StatValue) -> str:
    for number, total in ((v.float_numerator, v.float_denominator), (v.int_numerator, v.int_denominator)):
        if number is not None:
            return (
                f"{number:g}"
                + (f" / {total:g}" if total is not None else "")
                + (f" {v.unit}" if v.unit else "")
            )
    if v.string is not None:
        return v.string
    return "" if v.boolean is None else str(v.boolean)


def _flatten(obj: StatObject, prefix: str = "") -> list[tuple[str, str]]:
    rows = [(prefix + name, _value(value)) for name, value in obj.attributes.items()]
    for name, child in obj.nested.items():
        rows.extend(_flatten(child, f"{prefix}{name}."))
    return rows


def run_fingerprint(args: Options) -> int:
    results, failures = asyncio.run(_collect(args, "fingerprint"))
    if args.json:
        print_json([{"plugin": p, **dataclasses.asdict(r)} for p, r in results])
        return _exit_code(results, failures)
    rows = []
    for plugin, response in results:
        if response.error is not None:
            rows.append((plugin, "", "", "error", str(response.error), ""))
        for group in response.groups:
            attrs = ", ".join(f"{k}={a.value}{a.unit}" for k, a in sorted(group.attributes.items()))
            for device in group.devices:
                locality = device.locality.pci_bus_id if device.locality else ""
                health = "healthy" if device.healthy else f"unhealthy: {device.health_description}"
                rows.append(
                    (plugin, f"{group.vendor} {group.type} {group.name}", device.id, health, locality, attrs)
                )
    table("fingerprint", ("plugin", "group", "device", "health", "locality", "attributes"), rows)
    return _exit_code(results, failures)


def run_stats(args: Options) -> int:
    results, failures = asyncio.run(_collect(args, "stats"))
    if args.json:
        print_json([{"plugin": p, **dataclasses.asdict(r)} for p, r in results])
        return _exit_code(results, failures)
    rows = []
    for plugin, response in results:
        if response.error is not None:
            rows.append((plugin, "", "error", str(response.error), ""))
        for group in response.groups:
            for instance, stats in sorted(group.instance_stats.items()):
                for name, value in _flatten(stats.stats):
                    rows.append(
                        (plugin, instance, name, value, stats.timestamp.isoformat(timespec="seconds"))
                    )
    table("stats", ("plugin", "device", "statistic", "value", "at"), rows)
    return _exit_code(results, failures)
