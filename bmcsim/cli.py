"""Command line of the BMC simulator (`devicectl bmc-sim` delegates here).

Runs a fleet of simulated HTTPS BMCs until interrupted (or for `--duration` seconds), optionally writing
a TOML inventory plus secrets for the controller, and a ready file with the URLs for scripts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from bmcsim._bmcweb import DPS_ALLOW_LIST
from bmcsim._config import DEFAULT_PASSWORD, PROFILES
from bmcsim._fleet import SimulatorFleet
from bmcsim._platforms import MODELS, REAL_LAYOUTS, get_platform
from bmcsim._replay import is_replay

log = logging.getLogger("devicectl.bmc_sim")

#: environment variable read for the BMC password, so it need not appear on a command line
PASSWORD_ENV = "BMC_SIM_PASSWORD"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed so `devicectl bmc-sim` can reuse its help)."""
    parser = argparse.ArgumentParser(
        prog="devicectl bmc-sim",
        description="Serve simulated Redfish BMCs over HTTPS (one port per BMC).",
    )
    add = parser.add_argument
    add("--count", type=int, default=4, help="number of BMCs (default 4)")
    add(
        "--model",
        default="gb200",
        help=f"BMC model, or a comma-separated list used round-robin: {', '.join(MODELS)}, a real BMC "
        f"layout ({', '.join(REAL_LAYOUTS)}), capture:DIR (a `devicectl bmc-capture` directory) or "
        "mockup:DIR (a DMTF-style mockup) (default gb200)",
    )
    add("--host", default="127.0.0.1", help="listening address (default 127.0.0.1)")
    add("--base-port", type=int, default=0, help="BMC i listens on BASE_PORT+i; 0 picks free ports")
    add("--latency", type=float, default=0.0, help="seconds added to every request (default 0)")
    add("--cert-dir", default="var/bmc-sim/tls", help="CA and certificate directory (reused if present)")
    add("--session-limit", type=int, default=4, help="Redfish sessions per BMC (default 4)")
    add("--session-timeout", type=float, default=1800.0, help="session inactivity timeout, seconds")
    add("--control-port", type=int, default=None, help="plain-HTTP control endpoint port (0 picks one)")
    add("--username", default="admin", help="BMC user name (default admin)")
    add(
        "--password",
        default=None,
        help=f"BMC password (default: ${PASSWORD_ENV}, else a built-in simulator password)",
    )
    add("--unique-passwords", action="store_true", help="give every BMC its own password and secret")
    add("--async-writes", action="store_true", help="answer cap PATCHes with 202 and a task")
    add("--task-delay", type=float, default=1.0, help="seconds until an async write completes")
    add(
        "--profile",
        choices=PROFILES,
        default="default",
        help="behaviour profile: bmcweb = body-hash ETags over live readings, task monitors with "
        "Retry-After: 30 (default: default)",
    )
    add("--dps-proxy", action="store_true", help="answer 403 to paths off the DPS proxy's allow-list")
    add("--inventory-out", type=Path, default=None, help="write a TOML inventory of the fleet here")
    add("--secrets-dir", type=Path, default=None, help="secrets directory (default: next to the inventory)")
    add("--secret-name", default="bmc-sim", help="secret name in the inventory (default bmc-sim)")
    add("--id-prefix", default="node", help="device id prefix in the inventory (default node)")
    add("--ready-file", type=Path, default=None, help="write a JSON file with URLs once serving")
    add("--duration", type=float, default=None, help="stop after this many seconds (default: run until ^C)")
    add("--log-level", default="INFO", help="logging level (default INFO)")
    add("--json", action="store_true", help="print JSON lines (ready, stopped) instead of text")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the simulator; returns the process exit status."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    models = [m.strip() for m in args.model.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS and m not in REAL_LAYOUTS and not is_replay(m)]
    if unknown or not models:
        known = ", ".join((*MODELS, *REAL_LAYOUTS))
        print(f"bmc-sim: unknown model(s) {unknown}; choose from {known}", file=sys.stderr)
        return 2
    for model in (m for m in models if is_replay(m) or m in REAL_LAYOUTS):
        try:
            get_platform(model)
        except (ValueError, OSError) as exc:
            print(f"bmc-sim: cannot load {model}: {exc}", file=sys.stderr)
            return 2
    if args.count < 1:
        print("bmc-sim: --count must be at least 1", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_run(args, models))
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        print(f"bmc-sim: cannot start: {exc}", file=sys.stderr)
        return 1


async def _run(args: argparse.Namespace, models: list[str]) -> int:
    password = args.password or os.environ.get(PASSWORD_ENV) or DEFAULT_PASSWORD
    fleet = SimulatorFleet(
        n=args.count,
        model=models,
        latency=args.latency,
        cert_dir=args.cert_dir,
        base_port=args.base_port,
        host=args.host,
        username=args.username,
        password=password,
        unique_passwords=args.unique_passwords,
        session_limit=args.session_limit,
        session_timeout=args.session_timeout,
        async_writes=args.async_writes,
        task_delay=args.task_delay,
        control_port=args.control_port,
        profile=args.profile,
        allow_list=DPS_ALLOW_LIST if args.dps_proxy else None,
    )
    async with fleet:
        secrets_dir = None
        if args.inventory_out is not None:
            secrets_dir = fleet.write_inventory(
                args.inventory_out, args.secrets_dir, id_prefix=args.id_prefix, secret_name=args.secret_name
            )
        if args.json:
            ready = {"event": "ready", "bmcs": len(fleet), "models": models}
            print(json.dumps(ready | _ready_info(fleet, args.inventory_out, secrets_dir)), flush=True)
        else:
            _print_summary(fleet, args, models, secrets_dir)
        if args.ready_file is not None:
            _write_ready(args.ready_file, fleet, args.inventory_out, secrets_dir)
        await _wait(args.duration)
    print(json.dumps({"event": "stopped"}) if args.json else "bmc-sim: stopped", flush=True)
    return 0


def _print_summary(
    fleet: SimulatorFleet, args: argparse.Namespace, models: list[str], secrets_dir: Path | None
) -> None:
    ports = [b.port for b in fleet.bmcs]
    contiguous = ports == list(range(ports[0], ports[0] + len(ports)))
    where = f"ports {ports[0]}-{ports[-1]}" if contiguous else f"ports {', '.join(map(str, ports[:8]))}"
    lines = [
        f"bmc-sim: {len(fleet)} BMC(s) ({', '.join(models)}) on https://{args.host} {where}"
        + ("" if contiguous or len(ports) <= 8 else ", ..."),
        f"  CA bundle: {fleet.ca_bundle.resolve()}",
        f"  user: {args.username} (password from --password, ${PASSWORD_ENV} or the built-in default)",
    ]
    if fleet.control_url:
        lines.append(f"  control: {fleet.control_url}")
    if args.inventory_out is not None:
        lines.append(f"  inventory: {args.inventory_out} (secrets in {secrets_dir})")
    lines.append("ready" + ("" if args.duration is not None else " (Ctrl-C to stop)"))
    print("\n".join(lines), flush=True)


def _ready_info(fleet: SimulatorFleet, inventory: Path | None, secrets_dir: Path | None) -> dict[str, Any]:
    return {
        "urls": fleet.urls,
        "ca_bundle": str(fleet.ca_bundle.resolve()),
        "control_url": fleet.control_url,
        "inventory": str(inventory) if inventory else None,
        "secrets_dir": str(secrets_dir) if secrets_dir else None,
    }


def _write_ready(path: Path, fleet: SimulatorFleet, inventory: Path | None, secrets_dir: Path | None) -> None:
    info = _ready_info(fleet, inventory, secrets_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(info, indent=2) + "\n")
    tmp.replace(path)


async def _wait(duration: float | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        # not available off the main thread or on some platforms: then ^C raises KeyboardInterrupt
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    try:
        if duration is None:
            await stop.wait()
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=duration)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)


if __name__ == "__main__":
    sys.exit(main())
