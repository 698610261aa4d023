"""What a command line loads before it runs: a client command (send, status, the lists, verify)
talks gRPC to a controller and loads neither the store nor SQLAlchemy and Alembic; only the commands
that open a database (serve, agent, db, demo) load them, when they run. A command's module is loaded
when the command line names it (`LazyGroup`), so `status` does not load what `fingerprint` or
`serve` need. Each `devicectl` starts a new interpreter, so what the command line imports is paid
on every call an operator or a script makes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[3]
#: the database layer: a module whose name starts with one of these
DATABASE_LAYER = ("sqlalchemy", "alembic", "controller.store")

#: what only other commands need: their modules, the plugin host, the inventory, the settings
OTHER_COMMANDS = (
    "controller.cli._inspect",
    "controller.cli._preflight",
    "controller.cli._plugin",
    "controller.cli._support",
    "controller.cli._agent",
    "controller.plugin_host",
    "controller.inventory",
    "controller.config",
)

_REPORT = (
    "import json, sys\n{code}\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith({layer!r}))))\n"
)


def _loaded(code: str, layer: tuple[str, ...] = DATABASE_LAYER) -> list[str]:
    """The modules of `layer` loaded in a new interpreter once `code` has run."""
    script = _REPORT.format(code=code, layer=layer)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.splitlines()[-1]))


def test_a_client_command_line_loads_no_database_layer() -> None:
    code = (
        "from controller.cli import parse\n"
        "parse(['--server', '127.0.0.1:1', 'send', 'ping', '--device', 'node001'])\n"
        "parse(['--server', '127.0.0.1:1', 'status'])\n"
        "parse(['--server', '127.0.0.1:1', 'verify', 'list'])"
    )
    assert _loaded(code) == []


def test_a_database_command_loads_it_when_it_runs(tmp_path: Path) -> None:
    """The check above sees the layer where a command does load it."""
    url = f"sqlite:///{tmp_path / 'devicectl.db'}"
    loaded = _loaded(f"from controller.cli import main\nmain(['db', 'status', '--database-url', {url!r}])")
    assert "sqlalchemy" in loaded and "alembic" in loaded and "controller.store" in loaded, loaded


def test_a_command_line_loads_its_own_commands_module_and_not_the_others() -> None:
    status = _loaded(
        "from controller.cli import parse\nparse(['--server', '127.0.0.1:1', 'status'])",
        ("controller.cli._query", *OTHER_COMMANDS),
    )
    assert status == ["controller.cli._query"]
    send = _loaded(
        "from controller.cli import parse\nparse(['send', 'ping', '--device', 'node001'])",
        ("controller.cli._send", "controller.cli._query", *OTHER_COMMANDS),
    )
    assert send == ["controller.cli._send"]
    # the check can see them: a command of another module loads it
    stats = _loaded("from controller.cli import parse\nparse(['stats'])", OTHER_COMMANDS)
    assert "controller.cli._inspect" in stats and "controller.plugin_host" in stats, stats


def test_help_lists_every_command_in_its_order_and_each_resolves() -> None:
    """Each module named for a command registers it (a wrong name there would hide the command)."""
    from controller.cli import cli

    ctx = click.Context(cli)
    names = cli.list_commands(ctx)
    assert names == [
        "serve",
        "db",
        "topology-sink",
        "certs",
        "demo",
        "bmc-sim",
        "bmc-capture",
        "completion",
        "send",
        "requests",
        "devices",
        "verifications",
        "status",
        "plugins",
        "fingerprint",
        "stats",
        "plugin",
        "inventory",
        "verify",
        "support-bundle",
        "agent",
        "sink",
    ]
    assert [getattr(cli.get_command(ctx, name), "name", None) for name in names] == names
    help_text = cli.get_help(ctx)
    assert all(f"  {name} " in help_text for name in names), help_text
