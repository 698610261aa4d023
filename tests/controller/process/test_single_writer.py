"""One writer per BMC: a second `devicectl serve` on one SQLite file, or with a live process's
instance id on PostgreSQL, is refused with one line naming the holder; the first keeps serving, and
a dead holder never blocks a restart (real processes)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
import sqlalchemy as sa
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from controller.process.writer import (
    WriterConflictError,
    WriterLock,
    _advisory_key,
    _pg_key_holder,
    schema_change_lock,
)
from drills.proxy import TcpProxy
from tests.conftest import pg_admin_url
from tests.serve_process import ROOT, free_port, start_serving

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _args(db_url: str, port: int, instance: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "controller",
        "serve",
        "--listen",
        f"127.0.0.1:{port}",
        "--database-url",
        db_url,
        "--callback",
        "127.0.0.1:9",  # nothing is delivered in these tests
        "--instance-id",
        instance,
        "--auto-upgrade",
    ]


def _refused(db_url: str, instance: str) -> str:
    """Run a second `serve` to its exit: it must fail at once with one line; its stderr."""
    done = subprocess.run(
        _args(db_url, free_port(), instance), cwd=ROOT, env=ENV, capture_output=True, timeout=120
    )
    err = done.stderr.decode()
    assert done.returncode == 1, (done.returncode, err)
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


async def _serving(port: int) -> bool:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def test_a_second_serve_on_one_sqlite_file_is_refused_and_the_first_keeps_serving(
    tmp_path: Path,
) -> None:
    db_url = f"sqlite:///{tmp_path / 'devicectl.db'}"
    port = free_port()
    first = await start_serving(_args(db_url, port, "ctl-a"), ENV, tmp_path / "a.log", port, tries=300)
    try:
        # the same instance id (the host name by default) and another one: both refused
        for instance in ("ctl-a", "ctl-b"):
            err = _refused(db_url, instance)
            assert f"the database {tmp_path / 'devicectl.db'} is in use by another live devicectl" in err
            assert f"(pid {first.pid} on host {socket.gethostname()}, instance id 'ctl-a', started " in err
        assert await _serving(port) and first.poll() is None
        # a holder that dies (SIGKILL: nothing cleaned up) never blocks the next start
        _stop(first, signal.SIGKILL)
        port = free_port()
        again = await start_serving(_args(db_url, port, "ctl-a"), ENV, tmp_path / "b.log", port, tries=300)
        _stop(again)
        assert again.returncode == 0
    finally:
        _stop(first)


@pytest.mark.postgres
async def test_a_live_instance_id_on_postgresql_is_refused(tmp_path: Path, pg_database: URL) -> None:
    db_url = pg_database.render_as_string(hide_password=False)
    port = free_port()
    first = await start_serving(_args(db_url, port, "ctl-a"), ENV, tmp_path / "a.log", port, tries=300)
    other: subprocess.Popen[bytes] | None = None
    try:
        err = _refused(db_url, "ctl-a")
        assert "instance id 'ctl-a' is held by another live devicectl on this database" in err
        assert f"devicectl pid={first.pid} host={socket.gethostname()}" in err
        assert await _serving(port) and first.poll() is None
        # another instance id on the same database is a peer, not a second writer of ours
        other_port = free_port()
        other = await start_serving(
            _args(db_url, other_port, "ctl-b"), ENV, tmp_path / "b.log", other_port, tries=300
        )
        assert await _serving(other_port)
        # the holder dies: its connection ends and the id is free again at once
        _stop(first, signal.SIGKILL)
        port = free_port()
        again = await start_serving(_args(db_url, port, "ctl-a"), ENV, tmp_path / "c.log", port, tries=300)
        _stop(again)
    finally:
        _stop(first)
        if other is not None:
            _stop(other)


@pytest.mark.postgres
def test_a_lost_lock_connection_takes_the_instance_id_again(
    pg_database: URL, caplog: pytest.LogCaptureFixture
) -> None:
    db_url = pg_database.render_as_string(hide_password=False)
    admin = sa.create_engine(pg_database, poolclass=NullPool)

    def cut(lock: WriterLock) -> None:
        """The server ends the lock's connection (a restart, a network cut): the lock is gone."""
        assert lock._pg is not None
        pid = lock._pg.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
        lock._pg.commit()
        with admin.connect() as conn:
            assert conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar_one()
            _wait_until_gone(conn, pid)

    lock = WriterLock(db_url, "ctl-a")
    lock.acquire()
    try:
        cut(lock)
        lock.check()  # lost, and taken again at once
        with pytest.raises(WriterConflictError, match="instance id 'ctl-a' is held"):
            WriterLock(db_url, "ctl-a").acquire(grace=0)
        cut(lock)
        other = WriterLock(db_url, "ctl-a")
        other.acquire(grace=0)  # another process took the id while ours was lost
        with caplog.at_level(logging.ERROR, logger="controller.process.writer"):
            lock.check()
        assert "two live processes use it now; stop one of them" in caplog.text
        other.release()
        lock.check()
        with pytest.raises(WriterConflictError):
            WriterLock(db_url, "ctl-a").acquire(grace=0)
    finally:
        lock.release()
        admin.dispose()


async def test_the_sqlite_lock_follows_the_file_not_its_name(tmp_path: Path) -> None:
    """A hard link (another name, another `-wal`: two writers and a corrupt database), a symlink and
    a relative path to a held database are all refused, each naming the live holder."""
    db = tmp_path / "devicectl.db"
    port = free_port()
    first = await start_serving(
        _args(f"sqlite:///{db}", port, "ctl-a"), ENV, tmp_path / "a.log", port, tries=300
    )
    try:
        other = tmp_path / "elsewhere"
        other.mkdir()
        os.link(db, other / "linked.db")
        (other / "symlinked.db").symlink_to(db)
        relative = Path(os.path.relpath(db, ROOT))  # noqa: ASYNC240 (a path computation, no I/O)
        for url in (
            f"sqlite:///{other / 'linked.db'}",
            f"sqlite:///{other / 'symlinked.db'}",
            f"sqlite:///{relative}",
        ):
            err = _refused(url, "ctl-b")
            assert "is in use by another live devicectl" in err, (url, err)
            assert f"pid {first.pid}" in err, (url, err)
        assert await _serving(port) and first.poll() is None
    finally:
        _stop(first)


def _devicectl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controller", *args],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        input=stdin,
        timeout=120,
    )


async def _schema_changes_are_refused_under_a_live_serve(db_url: str, tmp_path: Path, holder: str) -> None:
    port = free_port()
    first = await start_serving(_args(db_url, port, "ctl-a"), ENV, tmp_path / "a.log", port, tries=300)
    try:
        for command in (["db", "downgrade", "0003"], ["db", "upgrade"], ["db", "downgrade", "base", "--yes"]):
            done = _devicectl(*command, "--database-url", db_url)
            assert done.returncode == 1, (command, done.stdout, done.stderr)
            assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
            assert "a live devicectl serves this database" in done.stderr, done.stderr
            assert holder.format(pid=first.pid) in done.stderr, done.stderr
        status = _devicectl("db", "status", "--database-url", db_url)
        assert status.returncode == 0 and "up to date" in status.stdout, status.stdout  # nothing dropped
        assert await _serving(port) and first.poll() is None
    finally:
        _stop(first)
    # with the holder gone the same downgrade goes through; `base` asks first and a "no" keeps all
    assert _devicectl("db", "downgrade", "0003", "--database-url", db_url).returncode == 0
    refused = _devicectl("db", "downgrade", "base", "--database-url", db_url, stdin="")
    assert refused.returncode == 1 and "drops every table" in refused.stderr, refused.stderr
    after = _devicectl("db", "status", "--database-url", db_url)
    assert "schema 0003" in after.stdout, after.stdout
    assert _devicectl("db", "downgrade", "base", "--yes", "--database-url", db_url).returncode == 0


async def test_db_upgrade_and_downgrade_refuse_while_serve_holds_a_sqlite_database(tmp_path: Path) -> None:
    await _schema_changes_are_refused_under_a_live_serve(
        f"sqlite:///{tmp_path / 'devicectl.db'}", tmp_path, "pid {pid} on host"
    )


@pytest.mark.postgres
async def test_db_upgrade_and_downgrade_refuse_while_serve_holds_a_postgresql_database(
    tmp_path: Path, pg_database: URL
) -> None:
    await _schema_changes_are_refused_under_a_live_serve(
        pg_database.render_as_string(hide_password=False), tmp_path, "devicectl pid={pid} host="
    )


def test_a_sqlite_uri_filename_is_locked_like_its_path(tmp_path: Path) -> None:
    """`sqlite:///file:PATH?uri=true` opens the same file: it takes (and meets) the same lock."""
    db = tmp_path / "devicectl.db"
    first = WriterLock(f"sqlite:///{db}", "ctl-a")
    first.acquire(grace=0)
    try:
        with pytest.raises(WriterConflictError, match="is in use by another live devicectl"):
            WriterLock(f"sqlite:///file:{db}?uri=true", "ctl-b").acquire(grace=0)
    finally:
        first.release()
    memory = WriterLock(f"sqlite:///file:{tmp_path / 'scratch'}?mode=memory&uri=true", "ctl-c")
    memory.acquire(grace=0)  # a private in-memory database: nothing to lock, no file made
    memory.release()
    assert not (tmp_path / "scratch").exists() and not (tmp_path / "scratch.lock").exists()


async def test_a_serve_started_during_a_sqlite_schema_change_is_refused(tmp_path: Path) -> None:
    """The schema change's lock (the one `db upgrade`/`db downgrade` hold for their whole run) is
    the serve's own file lock: a real `serve` started meanwhile is refused naming the change, and
    starts once the change is done."""
    db_url = f"sqlite:///{tmp_path / 'devicectl.db'}"
    assert _devicectl("db", "upgrade", "--database-url", db_url).returncode == 0
    with schema_change_lock(db_url, "db upgrade"):
        err = _refused(db_url, "ctl-a")
        assert "is in use by another live devicectl" in err, err
        assert f"(`devicectl db upgrade` running as pid {os.getpid()} on host" in err, err
        other = _devicectl("db", "downgrade", "0003", "--database-url", db_url)  # a second change too
        assert other.returncode == 1 and "`devicectl db upgrade` running as pid" in other.stderr
    port = free_port()
    after = await start_serving(_args(db_url, port, "ctl-a"), ENV, tmp_path / "a.log", port, tries=300)
    try:
        with pytest.raises(WriterConflictError, match="pid"):
            with schema_change_lock(db_url, "db upgrade"):
                raise AssertionError("a schema change went on under a live serve")
    finally:
        _stop(after)


@pytest.mark.postgres
async def test_a_serve_started_during_a_postgresql_migration_waits_out_and_is_refused(
    tmp_path: Path, pg_database: URL
) -> None:
    """A real `db downgrade` blocked half-way (a table it drops is locked by this test) holds the
    schema lock the whole time: a `serve` started meanwhile is refused naming it; once the
    migration ends it exits 0 and a `serve` starts."""
    db_url = pg_database.render_as_string(hide_password=False)
    assert _devicectl("db", "upgrade", "--database-url", db_url).returncode == 0
    engine = sa.create_engine(pg_database, poolclass=NullPool)
    blocker = engine.connect()
    migration: subprocess.Popen[str] | None = None
    try:
        blocker.execute(sa.text("LOCK TABLE bmc_checks IN ACCESS EXCLUSIVE MODE"))  # held until rollback
        migration = subprocess.Popen(
            [sys.executable, "-m", "controller", "db", "downgrade", "0003", "--database-url", db_url],
            cwd=ROOT,
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        with engine.connect() as look:
            for _ in range(600):  # until the migration holds the schema lock (and waits on the table)
                holding = look.execute(
                    sa.text(
                        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                        "WHERE l.locktype = 'advisory' AND l.granted AND l.mode = 'ExclusiveLock' "
                        "AND a.application_name LIKE 'devicectl db downgrade pid=%'"
                    )
                ).scalar_one()
                look.commit()
                if holding:
                    break
                assert migration.poll() is None, migration.communicate()
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("the migration never took the schema lock")
        err = _refused(db_url, "ctl-a")
        assert "the database schema is being changed (devicectl db downgrade pid=" in err, err
        assert migration.poll() is None  # still blocked: the serve came and went meanwhile
        blocker.rollback()
        out, errors = migration.communicate(timeout=120)
        assert migration.returncode == 0, (out, errors)
        assert "-> 0003" in out, out
    finally:
        blocker.close()
        engine.dispose()
        if migration is not None and migration.poll() is None:
            migration.kill()
            migration.wait()
    port = free_port()
    after = await start_serving(_args(db_url, port, "ctl-a"), ENV, tmp_path / "a.log", port, tries=300)
    _stop(after)
    assert after.returncode == 0


def _wait_until_gone(conn: sa.Connection, pid: int) -> None:
    """Until the terminated backend `pid` holds no lock. `pg_terminate_backend` returns once the
    signal is sent, not once the backend has exited: on a busy host the next `acquire` could still
    find the instance id held by it (reproduced by stopping the backend with SIGSTOP before the
    terminate; seen once in the suite, as a `WriterConflictError` naming the lock's own connection)."""
    for _ in range(600):
        if not conn.execute(sa.text("SELECT count(*) FROM pg_locks WHERE pid = :p"), {"p": pid}).scalar_one():
            return
        time.sleep(0.05)
    pytest.fail(f"backend {pid} still holds locks 30 s after pg_terminate_backend")


@pytest.mark.postgres
def test_a_holder_of_the_same_id_on_another_database_is_neither_in_the_way_nor_named(
    pg_database: URL,
) -> None:
    """Another hall's controller with the same instance id, on another database of the same server:
    its advisory lock is that database's, so it neither blocks this one nor is named as the holder."""
    key = _advisory_key("ctl-a")
    elsewhere = sa.create_engine(
        pg_admin_url(),
        poolclass=NullPool,
        connect_args={"application_name": "devicectl pid=1 host=other-hall"},
    )
    here = sa.create_engine(pg_database, poolclass=NullPool)
    lock = WriterLock(pg_database.render_as_string(hide_password=False), "ctl-a")
    try:
        with elsewhere.connect() as other_hall, here.connect() as conn:
            assert other_hall.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar_one()
            assert _pg_key_holder(conn, key) == ""  # nobody on this database
            conn.commit()  # pg_stat_activity is read once per transaction
            lock.acquire(grace=0)  # not in the way
            held = _pg_key_holder(conn, key)
            assert f"devicectl pid={os.getpid()}" in held and "other-hall" not in held
            with pytest.raises(WriterConflictError) as refused:
                WriterLock(pg_database.render_as_string(hide_password=False), "ctl-a").acquire(grace=0)
            assert "other-hall" not in str(refused.value) and f"pid={os.getpid()}" in str(refused.value)
    finally:
        lock.release()
        elsewhere.dispose()
        here.dispose()


@pytest.mark.postgres
async def test_a_lock_connection_lost_on_this_side_only_is_ended_at_the_server_and_the_id_taken_again(
    pg_database: URL, caplog: pytest.LogCaptureFixture
) -> None:
    """A cut that reset only this end: the server keeps the session, idle and holding the instance
    id, until its keepalive gives up on it. The retake ends it (it is this process's own) instead
    of reporting "two live processes"; and the lock's connection asks the server for keepalives
    of about a minute, so a controller that vanished frees its id for a replacement."""
    proxy = TcpProxy(pg_database.host or "127.0.0.1", pg_database.port or 5432)
    await proxy.open()
    via_proxy = pg_database.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    direct = pg_database.render_as_string(hide_password=False)
    admin = sa.create_engine(pg_database, poolclass=NullPool)
    lock = WriterLock(via_proxy, "ctl-a")
    try:
        await asyncio.to_thread(lock.acquire, 0)

        def backend() -> tuple[list[str], int]:  # through the proxy: off the loop that runs it
            assert lock._pg is not None
            keepalive = [
                lock._pg.execute(sa.text(f"SHOW tcp_keepalives_{name}")).scalar_one()
                for name in ("idle", "interval", "count")
            ]
            pid = lock._pg.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
            lock._pg.commit()
            return keepalive, pid

        keepalive, old = await asyncio.to_thread(backend)
        assert [int(v.rstrip("s")) for v in keepalive] == [30, 10, 3]

        await proxy.cut_clients()
        with admin.connect() as conn:  # the server still keeps the session, and its lock
            held = conn.execute(sa.text("SELECT count(*) FROM pg_locks WHERE pid = :p"), {"p": old})
            assert held.scalar_one() > 0
        with caplog.at_level(logging.WARNING, logger="controller.process.writer"):
            await asyncio.to_thread(lock.check)

        assert "two live processes" not in caplog.text
        assert f"ended this process's lost connection at the server (backend pid {old})" in caplog.text
        with admin.connect() as conn:
            gone = conn.execute(sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = :p"), {"p": old})
            assert gone.scalar_one() == 0
        assert lock._pg is not None  # taken again, by this process
        with pytest.raises(WriterConflictError, match=f"pid={os.getpid()}"):
            WriterLock(direct, "ctl-a").acquire(grace=0)
    finally:
        await asyncio.to_thread(lock.release)
        await proxy.close()
        admin.dispose()


@pytest.mark.postgres
async def test_a_lost_session_the_server_could_not_be_asked_about_is_ended_at_the_next_check(
    pg_database: URL, caplog: pytest.LogCaptureFixture
) -> None:
    """The same one-sided cut, with the server out of reach at the first retake: the lost session
    is remembered, and the next check, with the server back, ends it and takes the id."""
    proxy = TcpProxy(pg_database.host or "127.0.0.1", pg_database.port or 5432)
    await proxy.open()
    via_proxy = pg_database.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    lock = WriterLock(via_proxy, "ctl-a")
    try:
        await asyncio.to_thread(lock.acquire, 0)
        assert lock._backend is not None
        old = lock._backend[0]
        await proxy.cut_clients()
        await proxy.stop_listening()  # out of reach; the lingering session stays at the server
        with caplog.at_level(logging.WARNING, logger="controller.process.writer"):
            await asyncio.to_thread(lock.check)
        assert (
            f"could not end this process's lost connection at the server (backend pid {old})" in caplog.text
        )
        assert lock._pg is None

        await proxy.open()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="controller.process.writer"):
            await asyncio.to_thread(lock.check)
        assert f"ended this process's lost connection at the server (backend pid {old})" in caplog.text
        assert "two live processes" not in caplog.text
        assert lock._pg is not None and lock._backend is not None and lock._backend[0] != old
    finally:
        await asyncio.to_thread(lock.release)
        await proxy.close()
