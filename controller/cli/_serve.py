"""`devicectl serve`: the effective settings from the config file and the flags, and the
controller's run loop. Its own module because `agent` runs it too."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from controller.cli._click import server_tls_options
from controller.cli._errors import check_sqlite_directory
from controller.cli._options import Options
from controller.cli._render import print_error, print_json

if TYPE_CHECKING:  # loaded when `serve` or `agent` runs, not by every command line
    from controller.config import Settings

#: the agent flags `serve` shares (serve --agent-server runs both transports, one journal)
AGENT_OPTIONS = (
    click.option("--agent-server", help="topology server to dial out to (AgentService); TLS: --callback-*"),
    click.option("--agent-id", help="agent id on a plaintext loopback stream (else the certificate's CN)"),
    click.option("--agent-devices", help="devices served over the agent stream (patterns, default *)"),
)


def settings_options(f: Any) -> Any:
    """The flags that override the config file's settings (`serve`, `agent`); a flag not given
    (None) leaves the file's value alone."""
    flag: dict[str, Any] = {"is_flag": True, "default": None}
    decorators: list[Callable[[Any], Any]] = [
        click.option("--config", help="TOML config file (env DEVICECTL_CONFIG)"),
        click.option("--listen", help="gRPC address for DeviceController, admin API and health (HOST:PORT)"),
        click.option("--database-url", help="sqlite:///PATH or postgresql+psycopg://USER@HOST/DB"),
        click.option("--callback", help="topology callback address (TopologyCallback service)"),
        click.option("--inventory", help="device inventory TOML file"),
        click.option("--secrets-dir", help="directory with one file per BMC secret name"),
        click.option("--ca-bundle", help="CA bundle for every device that does not name its own"),
        click.option("--device-call-timeout", type=float, help="deadline (s) of a request without its own"),
        click.option("--max-concurrency", type=int, help="most requests running at once across all devices"),
        click.option("--queue-limit", type=int, help="most requests waiting per device"),
        click.option("--instance-id", help="this process's identity in the journal (default: host name)"),
        click.option(
            "--role",
            type=click.Choice(["all", "frontend", "executor"]),
            help="accept and execute (all), or one",
        ),
        click.option("--workers", type=int, help="a front end plus N executor processes (PostgreSQL only)"),
        click.option("--auto-upgrade", **flag, help="upgrade the database schema at start"),
        click.option(
            "--shadow",
            **flag,
            help="shadow mode: validate, plan and record every request; send no write to any device",
        ),
        click.option("--log-level", help="DEBUG, INFO, WARNING or ERROR"),
        click.option("--log-format", type=click.Choice(["text", "json"]), help="log lines as text or JSON"),
        click.option("--metrics-listen", help="HOST:PORT for /metrics, /healthz, /readyz (default: off)"),
        server_tls_options,
        click.option("--roles", help="certificate identity -> role: identity=role[+role],..."),
        click.option("--reflection", **flag, help="serve gRPC reflection"),
        click.option("--callback-ca-cert", help="CA that verifies the topology callback (enables TLS)"),
        click.option("--callback-cert", help="client certificate for the topology callback"),
        click.option("--callback-key", help="its private key"),
        *AGENT_OPTIONS,
        click.option("--callback-server-name", help="name expected in the callback's certificate"),
        click.option("--callback-tls", **flag, help="TLS to the callback"),
        click.option(
            "--secrets-allow-readable", **flag, help="accept group- or other-readable secret files (warns)"
        ),
    ]
    for decorator in reversed(decorators):  # listed in --help in the order above
        f = decorator(f)
    return f


def settings_from(args: Options) -> Settings:
    from controller.config import Settings, load_settings

    names = set(Settings.__dataclass_fields__)
    overrides = {k: v for k, v in vars(args).items() if k in names and v is not None}
    return load_settings(getattr(args, "config", None), overrides=overrides)


def cmd_serve(args: Options) -> int:
    settings = settings_from(args)
    check_sqlite_directory(settings.database_url)
    if args.print_config:
        print_json(settings.display())
        return 0
    # one of several processes (`--workers`: they share one output): each line says which
    several = settings.workers > 0 or settings.role != "all"
    from controller.observability import logs

    logs.setup(settings.log_level, settings.log_format, instance=settings.instance_id if several else "")
    from controller.app import Controller, SchemaOutdatedError
    from controller.process import runtime
    from controller.process.writer import WriterConflictError

    runtime.tune_process()

    async def main() -> int:
        controller = Controller(settings)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def stop_on_signals() -> None:
            # just before the gRPC server takes calls (`Controller.start`): a SIGTERM from then on
            # stops a started controller gracefully; one before it ends the process as it always
            # did (nothing was acknowledged yet, and a wait at start, for the database's writer lock
            # or a migration, stays interruptible)
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)

        try:
            await controller.start(before_accepting=stop_on_signals)
        except SchemaOutdatedError as exc:
            print_error(str(exc))  # one line, however wide the terminal
            return 2
        except WriterConflictError as exc:
            print_error(str(exc))
            return 1
        runtime.freeze_startup_objects()
        await stop.wait()
        await controller.stop()
        return 0

    return asyncio.run(main())
