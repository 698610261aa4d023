"""The rollback drill of docs/operations.md, with real processes: a newer release migrates the
database one revision past this one, this (older) release refuses to start with a clear line, the
newer release's `db downgrade` takes the schema back, and this release starts.

The newer release is this code plus one more migration, on its own import path."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2

from controller.store._database import revisions
from tests.serve_process import ROOT, free_port, start_serving

_NEXT = '''"""A newer release's migration (the rollback drill).

Revision ID: {rev}
Revises: {down}
"""

import sqlalchemy as sa
from alembic import op

revision = "{rev}"
down_revision = "{down}"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("drill_newer_release", sa.Column("id", sa.Integer, primary_key=True))


def downgrade() -> None:
    op.drop_table("drill_newer_release")
'''


def _newer_release(tmp_path: Path) -> tuple[Path, str]:
    """A copy of this code with one more migration; returns its folder and the new revision."""
    newer = tmp_path / "newer"
    newer.mkdir()
    for package in ("controller", "plugins"):
        (newer / package).symlink_to(ROOT / package)
    shutil.copytree(ROOT / "migrations", newer / "migrations", ignore=shutil.ignore_patterns("__pycache__"))
    head = revisions()[-1]
    rev = f"{int(head[:4]) + 1:04d}"  # revision ids start with 4 digits
    (newer / "migrations" / "versions" / f"{rev}_drill.py").write_text(_NEXT.format(rev=rev, down=head))
    return newer, rev


def _devicectl(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run(
        [sys.executable, "-m", "controller", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_the_rollback_drill(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'devicectl.db'}"
    newer, rev = _newer_release(tmp_path)
    head = revisions()[-1]
    done = _devicectl(ROOT, "db", "upgrade", "--database-url", url)  # this release
    assert done.returncode == 0 and f"-> {head}" in done.stdout, done.stderr
    done = _devicectl(newer, "db", "upgrade", "--database-url", url)  # the newer release
    assert done.returncode == 0 and f"{head} -> {rev}" in done.stdout, done.stderr

    # the older binary is started again (the rollback): it names what happened and what to do
    port = free_port()
    serve = ("serve", "--database-url", url, "--listen", f"127.0.0.1:{port}", "--log-level", "ERROR")
    for args in (serve, (*serve, "--auto-upgrade"), ("db", "upgrade", "--database-url", url)):
        done = _devicectl(ROOT, *args)
        lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        assert done.returncode in (1, 2), (args, lines)
        assert lines == [
            f"error: the database schema {rev} is newer than this devicectl (newest {head}): "
            f"run the newer release's `devicectl db downgrade {head}`, or upgrade devicectl"
        ], (args, lines)

    done = _devicectl(newer, "db", "downgrade", head, "--database-url", url)
    assert done.returncode == 0 and f"{rev} -> {head}" in done.stdout, done.stderr
    log = tmp_path / "serve.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await start_serving([sys.executable, "-m", "controller", *serve], env, log, port, tries=300)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            check = channel.unary_unary(
                "/grpc.health.v1.Health/Check",
                request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                response_deserializer=health_pb2.HealthCheckResponse.FromString,
            )
            reply = await check(health_pb2.HealthCheckRequest(), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0, log.read_text()[-2000:]
