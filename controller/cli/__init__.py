"""The `devicectl` command line: serve, send, inspect, migrate, and local helpers."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from controller import logs
from controller.cli import _agent, _inspect, _plugin, _preflight, _query, _send
from controller.cli._channel import add_client_flags
from controller.cli._errors import UsageError, check_sqlite_directory, explain, normalise_argv
from controller.cli._render import console, err_console, print_json
from controller.config import Settings, load_settings

DEFAULT_SERVER = os.environ.get("DEVICECTL_SERVER", "127.0.0.1:50051")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="devicectl", description="Datacenter power-control device controller."
    )
    parser.add_argument(
        "--server",
        default=DEFAULT_SERVER,
        help="controller address for client commands (env DEVICECTL_SERVER)",
    )
    parser.add_argument(
        "--json", action="store_true", help="machine-readable output (also -o json; anywhere on the line)"
    )
    parser.add_argument("-o", "--output", choices=["table", "json"], help="output format (table or json)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    parser.add_argument("--version", action="version", version=f"devicectl {_version()}")
    add_client_flags(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", help="run the controller")
    _settings_flags(p)
    p.add_argument("--print-config", action="store_true", help="print the effective settings and exit")
    p.set_defaults(func=cmd_serve)

    db = sub.add_parser("db", help="database schema").add_subparsers(dest="action", required=True)
    p = db.add_parser("upgrade", help="apply migrations up to the newest schema")
    p.add_argument("--config")
    p.add_argument("--database-url")
    p.set_defaults(func=cmd_db_upgrade)
    p = db.add_parser("status", help="show the schema revision")
    p.add_argument("--config")
    p.add_argument("--database-url")
    p.set_defaults(func=cmd_db_status)
    p = db.add_parser("prune", help="delete old finished rows now (the retention_* settings)")
    p.add_argument("--config")
    p.add_argument("--database-url")
    for table in ("journal", "outbox", "dead-letter", "audit"):
        p.add_argument(
            f"--{table}-days", type=float, help=f"override retention_{table.replace('-', '_')}_days"
        )
    p.set_defaults(func=cmd_db_prune)

    _send.add_parser(sub)
    _query.add_parsers(sub)
    _inspect.add_parsers(sub)
    _plugin.add_parser(sub)
    _preflight.add_parser(sub)
    _agent.add_parsers(sub, _settings_flags)

    p = sub.add_parser("topology-sink", help="receive and print responses (a local TopologyCallback)")
    p.add_argument("--listen", default="127.0.0.1:50052")
    p.add_argument("--record", help="append each response as a JSON line to this file")
    p.add_argument("--routes", help="agent routing file: a JSON object of device id -> agent id")
    _server_tls_flags(p)
    p.set_defaults(func=cmd_sink)

    p = sub.add_parser("certs", help="a local test CA and certificates for TLS, mutual TLS and roles")
    p.add_argument("action", choices=["init"])
    p.add_argument("--dir", required=True, help="directory for the CA, server and client certificates")
    p.add_argument(
        "--name",
        action="append",
        help="client certificate CN (repeatable; default: topology, operator, admin)",
    )
    p.set_defaults(func=cmd_certs)

    # Dispatched before parsing (see main); listed here for --help.
    sub.add_parser("bmc-sim", help="run simulated Redfish BMCs over HTTPS (devicectl bmc-sim --help)")
    sub.add_parser("bmc-capture", help="capture a BMC read-only for bmc-sim replay (bmc-capture --help)")

    p = sub.add_parser("demo", help="simulated fleet + controller + sink: activate, show, deactivate")
    p.add_argument("--nodes", type=int, default=16)
    p.add_argument("--workdir", default="var/demo")
    p.add_argument("--mtls", action="store_true", help="run it over mutual TLS with roles (test CA)")
    p.add_argument("--agent", action="store_true", help="agent mode: the controller dials out to the sink")
    p.add_argument("--verbose", action="store_true", help="a row per component instead of a line per node")
    p.set_defaults(func=cmd_demo)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("devicectl")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _settings_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML config file (env DEVICECTL_CONFIG)")
    p.add_argument("--listen")
    p.add_argument("--database-url")
    p.add_argument("--callback", help="topology callback address (TopologyCallback service)")
    p.add_argument("--inventory", help="device inventory TOML file")
    p.add_argument("--secrets-dir")
    p.add_argument("--ca-bundle")
    p.add_argument("--device-call-timeout", type=float)
    p.add_argument("--max-concurrency", type=int)
    p.add_argument("--queue-limit", type=int)
    p.add_argument("--instance-id")
    p.add_argument("--role", choices=["all", "frontend", "executor"], help="accept and execute (all), or one")
    p.add_argument("--workers", type=int, help="a front end plus N executor processes (PostgreSQL only)")
    p.add_argument("--auto-upgrade", action="store_true", default=None)
    p.add_argument("--log-level")
    p.add_argument("--log-format", choices=["text", "json"], help="log lines as text (default) or JSON")
    p.add_argument("--metrics-listen", help="HOST:PORT for /metrics, /healthz, /readyz (default: off)")
    _server_tls_flags(p)
    p.add_argument("--roles", help="certificate identity -> role: identity=role[+role],...")
    p.add_argument("--reflection", action="store_true", default=None, help="serve gRPC reflection")
    p.add_argument("--callback-ca-cert", help="CA that verifies the topology callback (enables TLS)")
    p.add_argument("--callback-cert", help="client certificate for the topology callback")
    p.add_argument("--callback-key", help="its private key")
    _agent.settings_flags(p)
    p.add_argument("--callback-server-name", help="name expected in the callback's certificate")
    p.add_argument("--callback-tls", action="store_true", default=None, help="TLS to the callback")
    p.add_argument("--secrets-allow-readable", action="store_true", default=None)


def _server_tls_flags(p: argparse.ArgumentParser) -> None:
    # SUPPRESS: `devicectl --insecure serve` (the main parser's flag) must not be reset here
    p.add_argument("--tls-cert", help="server certificate (PEM); with --tls-key serves TLS")
    p.add_argument("--tls-key", help="server private key (PEM)")
    p.add_argument("--tls-client-ca", help="CA for client certificates: mutual TLS, certificate required")
    p.add_argument(
        "--insecure",
        action="store_true",
        default=argparse.SUPPRESS,
        help="allow plaintext on a non-loopback address (logged as a warning)",
    )


def settings_from(args: argparse.Namespace) -> Settings:
    names = set(Settings.__dataclass_fields__)
    overrides = {k: v for k, v in vars(args).items() if k in names and v is not None}
    return load_settings(getattr(args, "config", None), overrides=overrides)


def cmd_serve(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    check_sqlite_directory(settings.database_url)
    if args.print_config:
        print_json(settings.display())
        return 0
    logs.setup(settings.log_level, settings.log_format)
    from controller import runtime
    from controller.app import Controller, SchemaOutdatedError

    runtime.tune_process()

    async def main() -> int:
        controller = Controller(settings)
        try:
            await controller.start()
        except SchemaOutdatedError as exc:
            err_console.print(f"[red]error[/red]: {exc}")
            return 2
        runtime.freeze_startup_objects()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await controller.stop()
        return 0

    return asyncio.run(main())


def _store(args: argparse.Namespace) -> Any:
    from controller.store import Store

    settings = load_settings(args.config, overrides={"database_url": args.database_url})
    check_sqlite_directory(settings.database_url, create=args.action == "upgrade")
    return Store.from_url(settings.database_url)


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    store = _store(args)
    before = store.schema_status()
    store.upgrade()
    after = store.schema_status()
    if args.json:
        print_json({"database": store.url_for_display, "before": before.current, "after": after.current})
    else:
        console.print(f"{store.url_for_display}: schema {before.current or 'empty'} -> {after.current}")
    return 0


def cmd_db_status(args: argparse.Namespace) -> int:
    status = _store(args).schema_status()
    if args.json:
        print_json({"current": status.current, "head": status.head, "up_to_date": status.up_to_date})
    else:
        state = "up to date" if status.up_to_date else "outdated: run `devicectl db upgrade`"
        console.print(f"schema {status.current or 'empty'} (newest {status.head}): {state}")
    return 0 if status.up_to_date else 1


def cmd_db_prune(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from controller.app import retention_policy
    from controller.store import Store, prune

    overrides = {
        f"retention_{t}_days": getattr(args, f"{t}_days")
        for t in ("journal", "outbox", "dead_letter", "audit")
    }
    s = load_settings(args.config, overrides={"database_url": args.database_url, **overrides})
    check_sqlite_directory(s.database_url, create=False)
    policy = retention_policy(s)
    store = Store.from_url(s.database_url)
    store.ensure_schema()

    async def run() -> Any:
        await store.start()
        try:
            return await prune(store, policy, datetime.now(UTC))
        finally:
            await store.close()

    result = asyncio.run(run())
    if args.json:
        print_json({"deleted": result.deleted})
    else:
        console.print(", ".join(f"{table}: {n} deleted" for table, n in result.deleted.items()))
    return 0


def cmd_sink(args: argparse.Namespace) -> int:
    from controller import translate
    from controller.agent_server import load_routes
    from controller.sink import TopologySink
    from controller.tls import ServerTls

    def show(response: Any) -> None:
        ok, error = translate.success_of(response)
        kind = response.WhichOneof("response")
        text = "ok" if ok else f"FAILED: {error}"
        print(f"{response.device} {kind} {response.request_id}: {text}", flush=True)

    async def main() -> int:
        sink = TopologySink(
            args.listen,
            record=args.record,
            on_response=show,
            tls=ServerTls(args.tls_cert or "", args.tls_key or "", args.tls_client_ca or ""),
            insecure=bool(getattr(args, "insecure", False)),
            routes=load_routes(args.routes) if args.routes else None,
        )
        await sink.start()
        print(f"topology sink listening on {sink.address}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await sink.stop()
        return 0

    return asyncio.run(main())


def cmd_demo(args: argparse.Namespace) -> int:
    from controller.cli._demo import run_demo

    return run_demo(
        nodes=args.nodes,
        workdir=args.workdir,
        mtls=args.mtls,
        verbose=args.verbose,
        as_json=args.json,
        agent=args.agent,
    )


def cmd_certs(args: argparse.Namespace) -> int:
    from controller import certs

    made = certs.init(args.dir, tuple(args.name) if args.name else certs.DEFAULT_CLIENTS)
    if args.json:
        print_json(
            {
                "ca": str(made.ca),
                "server_cert": str(made.server_cert),
                "server_key": str(made.server_key),
                "clients": {n: {"cert": str(c), "key": str(k)} for n, (c, k) in made.clients.items()},
            }
        )
        return 0
    console.print(f"CA          {made.ca}")
    console.print(f"server      {made.server_cert} (key {made.server_key}; SAN localhost, 127.0.0.1, ::1)")
    for name, (cert, key) in made.clients.items():
        console.print(f"client      {cert} (key {key}; CN {name})")
    roles = ",".join(f"{n}={n}" for n in made.clients if n in ("topology", "operator", "admin"))
    console.print(
        f"serve with: --tls-cert {made.server_cert} --tls-key {made.server_key} --tls-client-ca {made.ca}"
        + (f' --roles "{roles}"' if roles else "")
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    try:
        argv, debug = normalise_argv(raw)
    except UsageError as exc:
        err_console.print(f"[red]error[/red]: {exc}", highlight=False, soft_wrap=True)
        return 2
    command = [a for a in argv if a != "--json"]
    if command[:1] == ["bmc-sim"]:  # the simulator owns its own flags (argparse cannot pass them through)
        from plugins.redfish.simulator.cli import main as sim_main

        return int(sim_main(command[1:]))
    if command[:1] == ["bmc-capture"]:  # owns its flags too
        from plugins.redfish.capture import main as capture_main

        return int(capture_main(command[1:]))
    args = _parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        with contextlib.suppress(Exception):
            sys.stdout.close()
        return 0
    except Exception as exc:
        explained = explain(exc, args)
        if explained is None or debug:
            raise
        message, code = explained
        err_console.print(f"[red]error[/red]: {message}", highlight=False, soft_wrap=True)
        return code
