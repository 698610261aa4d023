"""Database fault drill: the journal's database misbehaves while requests keep arriving.

PostgreSQL (the controller reaches it through `TcpProxy`, so the drill can cut it off):
- backend termination: `pg_terminate_backend` on every connection of the controller, repeatedly;
- connections refused: the proxy closes (open connections reset, new ones refused), then reopens;
- table lock: another connection holds `LOCK TABLE requests IN ACCESS EXCLUSIVE MODE`.
SQLite: another process holds `BEGIN EXCLUSIVE` on the database file.

Each fault is one row: its own load, then a drain and the usual counts. Health is sampled while
the fault lasts (it should say NOT_SERVING while the journal cannot commit; under a lock writes
hang rather than fail, so the controller runs with `journal_stall_seconds` below the lock's length).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from grpc_health.v1 import health_pb2
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from drills.common import per_backend, problems_of
from drills.load import Load
from drills.proxy import TcpProxy
from drills.stack import Stack
from drills.verdict import verdict


@dataclass(frozen=True)
class DbFaultConfig:
    backends: tuple[str, ...] = ("postgres", "sqlite")
    devices: int = 3
    interval: float = 0.05
    #: load before and after each fault
    settle: float = 1.0
    terminations: int = 3
    termination_period: float = 1.0
    refused: float = 5.0
    lock: float = 4.0
    drain_limit: float = 90.0
    #: the controller's `journal_stall_seconds` (shorter than `lock`, so the lock shows in health)
    journal_stall: float = 1.0


REDUCED = DbFaultConfig()
FULL = DbFaultConfig(devices=16, interval=0.02, settle=5.0, terminations=10, refused=20.0, lock=30.0)

Fault = Callable[[], Coroutine[Any, Any, None]]


async def run(config: DbFaultConfig, workdir: Path) -> dict[str, Any]:
    async def one(backend: str, url: str, where: Path) -> list[dict[str, Any]]:
        if backend == "postgres":
            return await postgres_rows(config, url, where)
        return await sqlite_rows(config, url, where)

    rows = await per_backend("dbfaults", config.backends, workdir, one)
    return {"drill": "dbfaults", "config": asdict(config), "rows": rows}


POSTGRES_FAULTS = ("terminate", "refuse", "lock")


async def postgres_rows(
    config: DbFaultConfig, url: str, workdir: Path, which: tuple[str, ...] = POSTGRES_FAULTS
) -> list[dict[str, Any]]:
    """The PostgreSQL faults named in `which` (see `POSTGRES_FAULTS`), one row each, in that order."""
    real = make_url(url)
    proxy = TcpProxy(real.host or "127.0.0.1", real.port or 5432)
    await proxy.open()
    proxied = real.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    stack = Stack(
        workdir,
        bmcs=config.devices,
        database_url=proxied,
        name="dbfaults-postgres",
        extra_args=_args(config, workdir),
    )

    async def terminate() -> None:
        for _ in range(config.terminations):
            await asyncio.to_thread(_terminate_backends, url)
            await asyncio.sleep(config.termination_period)

    async def refuse() -> None:
        await proxy.close()
        await asyncio.sleep(config.refused)
        await proxy.open()

    async def lock() -> None:
        await asyncio.to_thread(_hold_lock, url, config.lock)

    known: dict[str, tuple[str, Fault]] = {
        "terminate": (f"postgres: {config.terminations} backend terminations", terminate),
        "refuse": (f"postgres: connections refused {config.refused:g} s", refuse),
        "lock": (f"postgres: requests table locked {config.lock:g} s", lock),
    }
    faults = [known[name] for name in which]
    try:
        await stack.start()
        return [await _phase(stack, config, name, fault, url) for name, fault in faults]
    finally:
        await stack.close()
        await proxy.close()


async def sqlite_rows(config: DbFaultConfig, url: str, workdir: Path) -> list[dict[str, Any]]:
    """SQLite locked by another process: one row."""
    stack = Stack(
        workdir,
        bmcs=config.devices,
        database_url=url,
        name="dbfaults-sqlite",
        extra_args=_args(config, workdir),
    )
    path = make_url(url).database or ""

    async def lock() -> None:
        # another process, as an operator's sqlite3 shell or a backup tool would be
        code = (
            "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); time.sleep(float(sys.argv[2])); "
            "c.execute('ROLLBACK')"
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, path, str(config.lock), stdout=subprocess.PIPE
        )
        try:
            await asyncio.wait_for(proc.communicate(), config.lock + 60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()

    try:
        await stack.start()
        return [
            await _phase(stack, config, f"sqlite: locked by another process {config.lock:g} s", lock, url)
        ]
    finally:
        await stack.close()


def _args(config: DbFaultConfig, workdir: Path) -> tuple[str, ...]:
    """The controller's extra flags: a config file with the drill's `journal_stall_seconds`."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "dbfaults.toml"
    path.write_text(f"journal_stall_seconds = {config.journal_stall}\n")
    return ("--config", str(path))


async def _phase(stack: Stack, config: DbFaultConfig, name: str, fault: Fault, url: str) -> dict[str, Any]:
    prefix = "db-" + "".join(c for c in name.split(":")[1] if c.isalnum())[:16]
    load = Load(stack.ctl.address, stack.devices, prefix=prefix, interval=config.interval)
    load.start()
    health: set[str] = set()
    try:
        await asyncio.sleep(config.settle)
        began = time.monotonic()
        task = asyncio.create_task(fault())
        while not task.done():
            health.add(await _health(stack))
            await asyncio.wait({task}, timeout=0.5)
        await task
        fault_s = time.monotonic() - began
        await asyncio.sleep(config.settle)
    finally:
        await load.stop()
    result = await verdict(stack, load.acked, database_url=url, drain_limit=config.drain_limit)
    result.update(
        fault=name,
        fault_s=round(fault_s, 1),
        health_during_fault=sorted(health),
        health_after=await _health_settled(stack),
        unacked=len(load.unacked),
        client_retries=dict(load.retries),
        controller_alive=stack.ctl.proc is not None and stack.ctl.proc.poll() is None,
    )
    result["problems"] = problems_of(result)
    if not result["controller_alive"]:
        result["problems"].append("the controller exited")
    return result


async def _health(stack: Stack) -> str:
    import grpc
    from grpc_health.v1 import health_pb2_grpc

    try:
        async with grpc.aio.insecure_channel(stack.ctl.address) as channel:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=1.0
            )
            return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
    except grpc.aio.AioRpcError as exc:
        return f"no answer ({exc.code().name})"


async def _health_settled(stack: Stack, limit: float = 20.0) -> str:
    """Health once it says SERVING, or what it says after `limit` seconds.

    The controller re-probes a journal that failed with a capped back-off (5 s), so health comes
    back a few seconds after the fault clears: sampling it once at the end would race that probe.
    """
    deadline = time.monotonic() + limit
    status = await _health(stack)
    while status != "SERVING" and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        status = await _health(stack)
    return status


def _engine(url: str) -> sa.Engine:
    return sa.create_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT")


def _terminate_backends(url: str) -> int:
    """Terminate every connection to the drill's database except this one; returns how many."""
    engine = _engine(url)
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    sa.text(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE datname = :db AND pid <> pg_backend_pid()"
                    ),
                    {"db": make_url(url).database},
                ).scalar()
                or 0
            )
    finally:
        engine.dispose()


def _hold_lock(url: str, seconds: float) -> None:
    """Hold an ACCESS EXCLUSIVE lock on the journal for `seconds` from another connection."""
    engine = sa.create_engine(url, poolclass=NullPool)
    done = threading.Event()
    try:
        with engine.connect() as conn, conn.begin():
            conn.exec_driver_sql("SET LOCAL lock_timeout = '30s'")  # bounded, even behind a long transaction
            conn.exec_driver_sql("LOCK TABLE requests IN ACCESS EXCLUSIVE MODE")
            done.wait(seconds)
            with contextlib.suppress(Exception):
                conn.exec_driver_sql("SELECT 1")
    finally:
        engine.dispose()
