"""The controller as a separate process, its database, and small process helpers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import grpc
import sqlalchemy as sa
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from bench import procstats
from bench.ports import free_port
from bench.util import ROOT, child_env

#: PostgreSQL admin connection used to create and drop one throw-away database per run
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
NOOP_PLUGIN = "bench.noop_plugin:NoopPlugin"


def write_noop_inventory(path: Path, devices: Sequence[str], **model: Any) -> None:
    """An inventory of no-op devices; `model` entries go into each device's model JSON."""
    fields = ", ".join(f"{key} = {json.dumps(value)}" for key, value in {"Model": "BENCH", **model}.items())
    lines = []
    for device in devices:
        lines += [
            "[[device]]",
            f'id = "{device}"',
            f'plugin = "{NOOP_PLUGIN}"',
            f"model = {{ {fields} }}",
            "",
        ]
    path.write_text("\n".join(lines))


class ControllerProcess:
    """`python -m controller serve` in its own process, with its log in `workdir`."""

    def __init__(
        self,
        workdir: Path,
        *,
        database_url: str,
        callback: str,
        inventory: Path,
        secrets_dir: Path | None = None,
        max_concurrency: int | None = None,
        device_call_timeout: float = 600.0,
        instance_id: str = "bench",
        log_level: str = "INFO",
        name: str = "controller",
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = free_port()
        #: environment added to the child's (settings as DEVICECTL_<NAME>)
        self.env = dict(env or {})
        self.address = f"127.0.0.1:{self.port}"
        self.log_path = workdir / f"{name}.log"
        self.args = [
            sys.executable,
            "-m",
            "controller",
            "serve",
            "--listen",
            self.address,
            "--database-url",
            database_url,
            "--callback",
            callback,
            "--inventory",
            str(inventory),
            "--device-call-timeout",
            str(device_call_timeout),
            "--instance-id",
            instance_id,
            "--log-level",
            log_level,
            "--auto-upgrade",
        ]
        if secrets_dir is not None:
            self.args += ["--secrets-dir", str(secrets_dir)]
        if max_concurrency is not None:
            self.args += ["--max-concurrency", str(max_concurrency)]
        self.args += list(extra_args)
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.last_sample: procstats.ProcSample | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None, "controller not started"
        return self.proc.pid

    def spawn(self) -> None:
        """Start the process (without waiting for it to serve)."""
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.args, cwd=ROOT, env=child_env(**self.env), stdout=self._log, stderr=subprocess.STDOUT
        )

    async def wait_serving(self, timeout: float = 120.0) -> float:
        """Wait until the health service says SERVING; returns that moment (time.monotonic())."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        # Reconnect quickly: gRPC's default back-off (1 s and up) would blur the moment it serves.
        options = [
            ("grpc.initial_reconnect_backoff_ms", 20),
            ("grpc.min_reconnect_backoff_ms", 20),
            ("grpc.max_reconnect_backoff_ms", 100),
        ]
        async with grpc.aio.insecure_channel(self.address, options=options) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"controller exited with {self.proc.returncode}:\n{self.log_tail()}")
                with contextlib.suppress(grpc.aio.AioRpcError):
                    reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=0.5)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return time.monotonic()
                await asyncio.sleep(0.02)
        raise TimeoutError(f"controller not serving after {timeout:.0f} s:\n{self.log_tail()}")

    async def start(self, timeout: float = 120.0) -> float:
        """Spawn and wait until serving; returns the seconds that took."""
        began = time.monotonic()
        self.spawn()
        return await self.wait_serving(timeout) - began

    def sample(self) -> procstats.ProcSample:
        """CPU and memory counters now (kept as `last_sample`, for after the process is gone)."""
        self.last_sample = procstats.sample(self.pid)
        return self.last_sample

    async def stop(self, timeout: float = 60.0) -> procstats.ProcSample | None:
        """Sample the counters, then SIGTERM and wait (SIGKILL after `timeout`)."""
        if self.proc is None or self.proc.poll() is not None:
            self._close_log()
            return self.last_sample
        with contextlib.suppress(ProcessLookupError):
            self.sample()
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(self.proc.wait, timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            await asyncio.to_thread(self.proc.wait)
        self._close_log()
        return self.last_sample

    def kill(self) -> None:
        """SIGKILL: a crash, as far as the journal is concerned."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the controller's log, for error messages."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"


# ---- databases ------------------------------------------------------------------------------


def pg_admin_url() -> str:
    """The PostgreSQL admin URL: DEVICECTL_BENCH_PG_URL, else DEVICECTL_TEST_PG_URL, else local."""
    raw = (
        os.environ.get("DEVICECTL_BENCH_PG_URL") or os.environ.get("DEVICECTL_TEST_PG_URL") or DEFAULT_PG_URL
    )
    url = make_url(raw)
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    return url.render_as_string(hide_password=False)


def _admin_engine() -> sa.Engine:
    # CREATE/DROP DATABASE cannot run inside a transaction.
    return sa.create_engine(
        pg_admin_url(), isolation_level="AUTOCOMMIT", poolclass=NullPool, connect_args={"connect_timeout": 3}
    )


def postgres_problem() -> str | None:
    """Why PostgreSQL cannot be used (None when it can)."""
    engine = _admin_engine()
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    finally:
        engine.dispose()
    return None


def postgres_version() -> str:
    """The server's version string (e.g. "15.20"), or "" when unreachable."""
    engine = _admin_engine()
    try:
        with engine.connect() as conn:
            return str(conn.exec_driver_sql("SHOW server_version").scalar() or "").split()[0]
    except Exception:
        return ""
    finally:
        engine.dispose()


@contextlib.contextmanager
def database(backend: str, workdir: Path) -> Iterator[str]:
    """A fresh, empty database for one run: a new SQLite file, or a PostgreSQL database created
    here and dropped afterwards. Yields its SQLAlchemy URL."""
    if backend == "sqlite":
        path = workdir / f"devicectl-{uuid.uuid4().hex[:8]}.db"
        try:
            yield f"sqlite:///{path}"
        finally:
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        return
    if backend != "postgres":
        raise ValueError(f"unknown backend {backend!r}")
    name = f"devicectl_bench_{uuid.uuid4().hex[:12]}"
    engine = _admin_engine()
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        yield make_url(pg_admin_url()).set(database=name).render_as_string(hide_password=False)
    finally:
        with engine.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        engine.dispose()


async def run_json(
    args: Sequence[str],
    *,
    label: str,
    timeout: float,
    progress: Any = None,
    env: Mapping[str, str] | None = None,
    every: float = 2.0,
) -> dict[str, Any]:
    """Run a child Python process that prints one JSON object on its last stdout line.

    `progress` (a callable returning a line, or None) is printed every `every` seconds meanwhile.

    Raises:
        RuntimeError: the child failed without printing its result (its stderr is in the message).
    """
    from bench.util import say

    proc = await asyncio.create_subprocess_exec(
        *args,
        cwd=ROOT,
        env=dict(env) if env is not None else child_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    waiter = asyncio.ensure_future(proc.communicate())
    deadline = time.monotonic() + timeout
    while not waiter.done():
        done, _ = await asyncio.wait({waiter}, timeout=min(every, max(0.0, deadline - time.monotonic())))
        if done:
            break
        if time.monotonic() >= deadline:
            proc.kill()
            await waiter
            raise TimeoutError(f"{label}: no result after {timeout:.0f} s")
        if progress is not None:
            say(f"{label}: {progress()}")
    out, err = waiter.result()
    lines = [line for line in out.decode().splitlines() if line.strip()]
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise RuntimeError(
            f"{label}: exited with {proc.returncode} and no JSON result:\n{err.decode()[-3000:]}"
        ) from None
    if not isinstance(result, dict):
        raise RuntimeError(f"{label}: result is not a JSON object")
    return result
