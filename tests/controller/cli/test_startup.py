"""What a command line loads before it runs: a client command (send, status, the lists, verify)
talks gRPC to a controller and loads neither the store nor SQLAlchemy and Alembic; only the commands
that open a database (serve, agent, db, demo) load them, when they run. Each `devicectl` starts a new
interpreter, so what the command line imports is paid on every call an operator or a script makes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
#: the database layer: a module whose name starts with one of these
DATABASE_LAYER = ("sqlalchemy", "alembic", "controller.store")

_REPORT = (
    "import json, sys\n{code}\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith({layer!r}))))\n"
)


def _loaded(code: str) -> list[str]:
    """The database-layer modules loaded in a new interpreter once `code` has run."""
    script = _REPORT.format(code=code, layer=DATABASE_LAYER)
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
