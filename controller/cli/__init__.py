"""The `devicectl` command line (Click): serve, send, inspect, migrate, and local helpers.

`main(argv)` returns the exit code and never raises SystemExit: 0 ok, 1 a failure, 2 a usage or
input error, each error one line on stderr (`--debug`: the traceback). Shell completion:
`devicectl completion bash|zsh|fish`, or Click's `_DEVICECTL_COMPLETE=bash_source devicectl`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import click

from controller.cli import _capture, _local
from controller.cli._click import (
    Group,
    LazyGroup,
    PassThrough,
    call,
    client_options,
    options_from,
    output_options,
    pending_args,
    server_tls_options,
)
from controller.cli._options import Options
from controller.cli._render import print_error, print_json, set_output
from controller.cli._serve import cmd_serve, settings_options
from controller.cli._serve import settings_from as settings_from  # the deploy tests load it here
from controller.observability.version import installed_version

SHELLS = ("bash", "zsh", "fish")
_COMPLETE_VAR = "_DEVICECTL_COMPLETE"


_VERSION = "devicectl.version"


def _show_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """Noted here, printed by `main` once the whole line is parsed: `--version -o json` too."""
    if value and not ctx.resilient_parsing:
        ctx.meta[_VERSION] = True


def _print_version(ctx: click.Context) -> int:
    output = ctx.meta.get("devicectl.output", "table")
    if output in ("json", "yaml"):
        set_output(output)
        print_json({"name": "devicectl", "version": installed_version()})
    else:
        click.echo(f"devicectl {installed_version()}")
    return 0


@click.group(
    "devicectl",
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_show_version,
    help="print the version and exit",
)
@output_options
@client_options(env=True)
def cli(**_: Any) -> None:
    """Datacenter power-control device controller.

    -o/--output (table, json, yaml), --json and --debug are accepted anywhere on the line.
    """


@cli.command("serve")
@settings_options
@click.option("--print-config", is_flag=True, default=False, help="print the effective settings and exit")
@output_options
def _serve(**_: Any) -> int:
    """Run the controller."""
    return call(cmd_serve)


@cli.group("db", cls=Group)
@output_options
def _db() -> None:
    """Database schema and retention."""


def _db_options(f: Any) -> Any:
    for decorator in (
        output_options,
        click.option("--database-url", help="sqlite:///PATH or postgresql+psycopg://USER@HOST/DB"),
        click.option("--config", help="TOML config file (env DEVICECTL_CONFIG)"),
    ):
        f = decorator(f)
    return f


_force_option = click.option(
    "--force",
    is_flag=True,
    default=False,
    help="change the schema even while a live `serve` holds the database (it will fail under you)",
)


@_db.command("upgrade")
@_db_options
@_force_option
def _db_upgrade(**_: Any) -> int:
    """Apply migrations up to the newest schema."""
    return call(_local.cmd_db_upgrade, action="upgrade", revision=None)


@_db.command("downgrade")
@_db_options
@_force_option
@click.option("--yes", is_flag=True, default=False, help="do not ask before `base` (which drops every table)")
@click.argument("revision", required=False)
def _db_downgrade(**_: Any) -> int:
    """Undo migrations down to REVISION (default: one step back; `base`: empty), for a rollback to an
    older release: run it with the release that made the schema, before starting the older one.
    Refused while a live `serve` holds the database (stop it first, or --force); `base` asks first."""
    return call(_local.cmd_db_upgrade, action="downgrade")


@_db.command("status")
@_db_options
def _db_status(**_: Any) -> int:
    """Show the schema revision (exit 1 when outdated)."""
    return call(_local.cmd_db_status, action="status")


@_db.command("prune")
@_db_options
@click.option("--journal-days", type=float, help="override retention_journal_days (0: keep forever)")
@click.option("--outbox-days", type=float, help="override retention_outbox_days (0: keep forever)")
@click.option("--dead-letter-days", type=float, help="override retention_dead_letter_days (0: keep forever)")
@click.option("--audit-days", type=float, help="override retention_audit_days (0: keep forever)")
def _db_prune(**_: Any) -> int:
    """Delete old finished rows now (the retention_* settings).

    DAYS is an age: rows older than that go. 0 does not delete everything: it keeps that kind
    forever. Undelivered responses and their requests are never pruned.
    """
    return call(_local.cmd_db_prune, action="prune")


@cli.command("topology-sink")
@click.option("--listen", default="127.0.0.1:50052", show_default=True, help="address to receive on")
@click.option("--record", help="append each response as a JSON line to this file")
@click.option("--routes", help="agent routing file: a JSON object of device id -> agent id")
@server_tls_options
@output_options
def _topology_sink(**_: Any) -> int:
    """Receive and print responses (a local TopologyCallback)."""
    return call(_local.cmd_sink)


@cli.command("certs")
@click.argument("action", type=click.Choice(["init"]))
@click.argument("directory", required=False)
@click.option("--dir", help="directory for the CA, server and client certificates (or give it as DIRECTORY)")
@click.option(
    "--name", multiple=True, help="client certificate CN (repeatable; default: topology, operator, admin)"
)
@output_options
def _certs(**_: Any) -> int:
    """A local test CA and certificates for TLS, mutual TLS and roles: `certs init DIR` (or --dir DIR)."""
    return call(_local.cmd_certs)


@cli.command("demo")
@click.option("--nodes", type=int, default=16, show_default=True, help="simulated nodes (BMCs)")
@click.option("--workdir", default="var/demo", show_default=True, help="where its database and files go")
@click.option("--mtls", is_flag=True, default=False, help="run it over mutual TLS with roles (test CA)")
@click.option("--agent", is_flag=True, default=False, help="agent mode: the controller dials out to the sink")
@click.option("--verbose", is_flag=True, default=False, help="a row per component instead of a line per node")
@output_options
def _demo(**_: Any) -> int:
    """Simulated fleet + controller + sink: activate, show, deactivate."""
    return call(_local.cmd_demo)


#: the simulator parses its own flags (devicectl bmc-sim --help shows them)
_PASS_THROUGH = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}


@cli.command("bmc-sim", cls=PassThrough, context_settings=_PASS_THROUGH)
@click.argument("passed", nargs=-1, type=click.UNPROCESSED)
@output_options
def _bmc_sim(**_: Any) -> int:
    """Run simulated Redfish BMCs over HTTPS (devicectl bmc-sim --help)."""
    from bmcsim.cli import main as sim_main

    def run(args: Options) -> int:
        passed = list(args.passed)
        if args.json:  # -o json: the simulator prints JSON lines instead of its text summary
            passed = ["--json", *passed]
        try:
            return int(sim_main(passed))
        except SystemExit as exc:  # its parser exits on --help and on bad flags
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)

    return call(run)


@cli.command("bmc-capture")
@_capture.capture_options
@output_options
def _bmc_capture(**_: Any) -> int:
    """Capture a BMC's Redfish tree read-only and scrubbed, for `devicectl bmc-sim --model capture:DIR`."""
    return call(_capture.cmd_capture)


@cli.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
def _completion(shell: str) -> int:
    """Print the shell completion script for bash, zsh or fish.

    Install: `eval "$(devicectl completion bash)"` in ~/.bashrc (zsh: ~/.zshrc), or
    `devicectl completion fish > ~/.config/fish/completions/devicectl.fish`.
    """
    from click.shell_completion import get_completion_class

    completion = get_completion_class(shell)
    assert completion is not None  # the Choice above admits only shells Click knows
    click.echo(completion(cli, {}, "devicectl", _COMPLETE_VAR).source())
    return 0


assert isinstance(cli, LazyGroup)
# each module is imported when a command line names one of its commands (listed in this order)
cli.add_lazy("controller.cli._send", "send")
cli.add_lazy("controller.cli._query", "requests", "devices", "verifications", "status", "plugins")
cli.add_lazy("controller.cli._inspect", "fingerprint", "stats")
cli.add_lazy("controller.cli._plugin", "plugin")
cli.add_lazy("controller.cli._preflight", "inventory")
cli.add_lazy("controller.cli._verify", "verify")
cli.add_lazy("controller.cli._support", "support-bundle")
cli.add_lazy("controller.cli._agent", "agent", "sink")


class _Parsed:
    """`_parser().parse_args(argv)`: a command line as its handler sees it, without running it
    (the deploy tests check the container's and the systemd unit's command lines with it)."""

    def parse_args(self, argv: Sequence[str]) -> Options:
        return parse(argv)


def _parser() -> _Parsed:
    return _Parsed()


def parse(argv: Sequence[str]) -> Options:
    """A command line parsed into its handler's options (Click's errors propagate)."""
    ctx = cli.make_context("devicectl", list(argv))
    while isinstance(ctx.command, click.Group):
        rest = pending_args(ctx)
        if not rest:
            break
        name, command, remaining = ctx.command.resolve_command(ctx, rest)
        assert name is not None and command is not None
        ctx = command.make_context(name, remaining, parent=ctx)
    return options_from(ctx)


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None and os.environ.get(_COMPLETE_VAR):  # the shell asking for completions
        from click.shell_completion import shell_complete

        return shell_complete(cli, {}, "devicectl", _COMPLETE_VAR, os.environ[_COMPLETE_VAR])
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        with cli.make_context("devicectl", args) as ctx:
            if ctx.meta.get(_VERSION):
                return _print_version(ctx)
            return int(cli.invoke(ctx) or 0)
    except click.exceptions.Exit as exc:  # --version, --help
        return exc.exit_code
    except click.UsageError as exc:
        print_error(_usage_message(exc))
        return 2
    except click.ClickException as exc:
        print_error(exc.format_message())
        return exc.exit_code
    except (click.Abort, KeyboardInterrupt):
        return 130


def _usage_message(exc: click.UsageError) -> str:
    """Click's message on one line, after the command it is about: `send rg-activate:
    --resource-group is required (devicectl send rg-activate --help)`."""
    if isinstance(exc, click.MissingParameter) and isinstance(exc.param, click.Option):
        message = f"{exc.param.opts[0]} is required"
    else:
        message = " ".join(exc.format_message().split())
    path = exc.ctx.command_path if exc.ctx is not None else "devicectl"
    where = path.partition(" ")[2]
    return f"{where}: {message} ({path} --help)" if where else f"{message} (devicectl --help)"
