"""`devicectl inventory check [--login]`: the start-time checks of `serve`, as a table, before a
deployment; with `--login` each device's BMC is logged into and read (a `std_metrics` request:
read-only), so wrong credentials or an unreachable BMC show up before traffic does."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import Any

import click

from controller.cli._click import Group, call, output_options
from controller.cli._options import Options
from controller.cli._render import print_json, table
from controller.config import Settings, load_settings
from controller.inventory import (
    DeviceEntry,
    check_inventory,
    inventory_secrets,
    load_inventory,
    plugin_registry,
)
from controller.plugin_host.host import PluginHost
from controller.plugin_host.launch import load_external_plugins
from controller.security import tls
from controller.security.secrets import SecretStore
from plugins.base import DeviceContext, Empty, RequestKind, run_operation


def register(cli: click.Group) -> None:
    @cli.group("inventory", cls=Group)
    @output_options
    def inventory() -> None:
        """Check the inventory before serving it."""

    @inventory.command("check")
    @click.option("--config", help="TOML config file (env DEVICECTL_CONFIG)")
    @click.option("--inventory", help="device inventory TOML file")
    @click.option("--secrets-dir", help="directory with one file per BMC secret name")
    @click.option("--login", is_flag=True, default=False, help="log into each device and read it (read-only)")
    @click.option(
        "--timeout", type=float, default=20.0, show_default=True, help="seconds per device with --login"
    )
    @output_options
    def _check(**_: Any) -> int:
        """Plugins, options, CA files, secrets; with --login each BMC."""
        return call(run_check)


def run_check(args: Options) -> int:
    settings = load_settings(
        args.config, overrides={"inventory": args.inventory, "secrets_dir": args.secrets_dir}
    )
    if not settings.inventory:
        raise ValueError("give --inventory (or set inventory in the config)")
    entries = load_inventory(settings.inventory)
    secrets = inventory_secrets(settings, entries)
    general: list[str] = []
    try:
        tls.check_settings(settings)
    except (ValueError, OSError) as exc:
        general.append(f"settings: {exc}")
    problems = check_inventory(entries, plugin_registry(entries, settings.default_plugin), secrets)
    rows: dict[str, dict[str, Any]] = {}
    for entry in entries.values():
        mine = [p for p in problems if p.startswith(f"device {entry.id!r}")]
        rows[entry.id] = {
            "device": entry.id,
            "plugin": entry.plugin,
            "problems": [p.split(": ", 1)[1] for p in mine] + _offline(entry, settings, secrets),
            "login": "",
        }
    # problems naming no device (a plugin that cannot load, a readable secret file) apply to all
    general += [p for p in problems if not any(p.startswith(f"device {d!r}") for d in entries)]
    if args.login:
        asyncio.run(_login_all(entries, settings, secrets, rows, args.timeout))
    failed = bool(general) or any(r["problems"] or r["login"].startswith("FAILED") for r in rows.values())
    if args.json:
        print_json({"ok": not failed, "problems": general, "devices": list(rows.values())})
    else:
        for problem in general:
            print(f"problem: {problem}")
        columns = ["device", "plugin", "checks"] + (["login"] if args.login else [])
        table(
            f"inventory {settings.inventory}: " + ("problems found" if failed else "ok"),
            columns,
            (
                [r["device"], r["plugin"], "; ".join(r["problems"]) or "ok"]
                + ([r["login"]] if args.login else [])
                for r in rows.values()
            ),
        )
        for r in rows.values():
            if r.get("caps"):
                print(f"\n{r['device']}: which resource carries each cap")
                for line in r["caps"]:
                    print(f"  {line}")
    return 1 if failed else 0


def _offline(entry: DeviceEntry, settings: Settings, secrets: SecretStore) -> list[str]:
    """CA file readable and the secret resolves for the device's own URL (never printed)."""
    out = []
    ca = entry.ca_bundle or settings.ca_bundle
    if ca and not os.access(ca, os.R_OK):
        out.append(f"CA bundle {ca} is not readable")
    if entry.secret:
        try:
            entry.endpoint(secrets, settings.ca_bundle)
        except Exception as exc:
            out.append(str(exc))
    return out


async def _login_all(
    entries: dict[str, DeviceEntry],
    settings: Settings,
    secrets: SecretStore,
    rows: dict[str, dict[str, Any]],
    timeout: float,
) -> None:
    host = PluginHost(load_external_plugins(settings.inventory))
    try:
        await asyncio.gather(
            *(
                _login(e, settings, secrets, host, rows[e.id], timeout)
                for e in entries.values()
                if not rows[e.id]["problems"]
            )
        )
    finally:
        await host.close()


async def _login(
    entry: DeviceEntry,
    settings: Settings,
    secrets: SecretStore,
    host: PluginHost,
    row: dict[str, Any],
    timeout: float,
) -> None:
    started = time.monotonic()
    try:
        plugin = await host.get(entry.plugin)
        model = dict(entry.model)
        plugin.check_model(model)
        ctx = DeviceContext(
            device_id=entry.id,
            model=model,
            endpoint=entry.endpoint(secrets, settings.ca_bundle),
            request_id=f"preflight-{uuid.uuid4().hex[:8]}",
            trace_id="",
            deadline=time.monotonic() + timeout,
            state=plugin.load_state({}),
        )
        outcome = await asyncio.wait_for(
            run_operation(plugin, RequestKind.STD_METRICS, ctx, Empty()), timeout
        )
        row["login"] = f"ok ({time.monotonic() - started:.1f} s)"
        # which resource would carry each cap, and why (plugins that can say so)
        plan = getattr(plugin, "cap_plan", None)
        if callable(plan) and outcome.state is not None:
            row["caps"] = list(plan(outcome.state))
    except TimeoutError:
        row["login"] = f"FAILED: no answer within {timeout:g} s"
    except Exception as exc:
        row["login"] = f"FAILED: {exc}"
