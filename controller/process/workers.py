"""Processes and roles: `serve --workers N` on one machine, and which parts each role runs.

`serve --workers N` (PostgreSQL only): the process the operator started is the front end (role
`frontend`: the DeviceController port, validation, the journal commit and the ack, the admin API and
health). It holds no shards and runs no requests, so an ack never waits behind execution or
delivery. It starts N executor processes, `devicectl serve --role executor --instance-id <id>-w<i>`,
with its own effective settings, and supervises them: an executor that exits is started again after
a back-off, SIGTERM stops them all, and an executor whose parent dies gets SIGTERM from the kernel.
Executors run `executor_niceness` steps nicer than the front end, so a wave's execution yields the
CPU to the acks on a shared host.
Executors lease shards, claim and run the journaled requests of their shards and deliver the
responses (docs/architecture.md, "Several controllers, one PostgreSQL").
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import logging
import os
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from controller.config import ENV_PREFIX, Settings
from controller.process.reports import STATUS_FD, Reports

log = logging.getLogger(__name__)

ROLES = ("all", "frontend", "executor")

#: where an executor started by `--workers` serves its admin API and health: an ephemeral loopback
#: port (logged at its start), since the front end holds the configured `listen` address
EXECUTOR_LISTEN = "127.0.0.1:0"
#: restart back-off of an executor that exited: doubles from the first up to the cap, and starts
#: over once an executor has run for `STABLE_AFTER` seconds
RESTART_FIRST = 0.5
RESTART_MAX = 30.0
STABLE_AFTER = 60.0


class ProcessModelError(ValueError):
    """Settings that ask for several processes where the database or transport serves one."""


def check_process_model(settings: Settings, dialect: str) -> None:
    """Refuse process layouts that cannot work, with a one-line reason.

    Raises:
        ProcessModelError: SQLite with `workers` or a role other than `all`, an unknown role,
            `workers` with a role other than `all`/`frontend`, agent mode with either, or an
            `executor_niceness` outside 0..19.
    """
    if settings.role not in ROLES:
        raise ProcessModelError(f"role must be one of {', '.join(ROLES)}, got {settings.role!r}")
    if settings.workers < 0:
        raise ProcessModelError(f"workers must be 0 or more, got {settings.workers}")
    if not 0 <= settings.executor_niceness <= MAX_NICENESS:
        # a negative one would need privilege and would put execution ahead of the acks
        raise ProcessModelError(
            f"executor_niceness must be 0 to {MAX_NICENESS}, got {settings.executor_niceness}"
        )
    several = settings.workers > 0 or settings.role != "all"
    if several and dialect == "sqlite":
        raise ProcessModelError("SQLite serves one process; use PostgreSQL for several (--workers, --role)")
    if settings.workers > 0 and settings.role not in ("all", "frontend"):
        raise ProcessModelError(
            f"--workers makes this process the front end; it cannot be role {settings.role}"
        )
    if several and settings.agent_server:
        raise ProcessModelError(
            "agent mode runs in one process (role all); it cannot be split by --workers or --role"
        )


def process_role(settings: Settings) -> str:
    """The role this process plays: `frontend` when it supervises executors (`workers` > 0)."""
    return "frontend" if settings.workers > 0 else settings.role


def executes(settings: Settings) -> bool:
    """Whether this process runs requests: leases shards, dispatches, delivers, checks drift."""
    return process_role(settings) != "frontend"


def accepts(settings: Settings) -> bool:
    """Whether this process serves DeviceController (validation, journal, ack)."""
    return process_role(settings) != "executor"


# ---- the executors' settings and command ------------------------------------------------------


def executor_settings(settings: Settings, index: int) -> Settings:
    """Executor `index`'s settings (1-based): the front end's, as role executor, on a loopback port,
    with the metrics port moved up by `index` (the front end keeps the configured one)."""
    metrics_listen = settings.metrics_listen
    if metrics_listen:
        host, _, port = metrics_listen.rpartition(":")
        if port.isdigit() and int(port) > 0:
            metrics_listen = f"{host}:{int(port) + index}"
    return dataclasses.replace(
        settings,
        role="executor",
        workers=0,
        instance_id=f"{settings.instance_id}-w{index}",
        listen=EXECUTOR_LISTEN,
        metrics_listen=metrics_listen,
        auto_upgrade=False,  # the front end brought the schema up to date before starting them
    )


def settings_environment(settings: Settings, base: Mapping[str, str]) -> dict[str, str]:
    """`base` with every setting as DEVICECTL_<NAME> and no config file: the child gets exactly
    these effective settings. The environment, unlike the command line, is not shown to other
    users (`ps`), so a database password in the URL stays private."""
    env = {k: v for k, v in base.items() if k != f"{ENV_PREFIX}CONFIG"}
    for field in dataclasses.fields(Settings):
        value = getattr(settings, field.name)
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        env[f"{ENV_PREFIX}{field.name.upper()}"] = text
    return env


def executor_command(settings: Settings) -> list[str]:
    """The executor's command line; the settings travel in the environment (role and instance id
    are repeated here so `ps` shows which process is which)."""
    return [
        sys.executable,
        "-m",
        "controller",
        "serve",
        "--role",
        "executor",
        "--instance-id",
        settings.instance_id,
    ]


#: set in an executor's environment by its supervisor: the supervisor's pid
SUPERVISOR_PID = "DEVICECTL_SUPERVISOR_PID"
#: the lowest CPU priority Linux gives (higher niceness is taken as this)
MAX_NICENESS = 19
_PR_SET_PDEATHSIG = 1


def follow_supervisor() -> None:
    """In an executor started by `--workers`: ask Linux to SIGTERM this process when its front end
    dies (even by SIGKILL), so no executor outlives it; exit at once if it is already gone.

    Done here, after exec, rather than in a pre-exec hook: a hook forces fork() in the
    multi-threaded front end, where gRPC's fork handlers run; without one Python can use vfork().
    """
    supervisor = os.environ.get(SUPERVISOR_PID)
    if not supervisor or not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
    if str(os.getppid()) != supervisor:
        raise ProcessModelError(f"the front end (pid {supervisor}) that started this executor is gone")


def lower_priority(niceness: int) -> None:
    """In an executor started by `--workers`: run every thread of this process `niceness` steps
    nicer than it started (the front end's niceness), so on a busy host the kernel gives the front
    end the CPU first and its acks never wait behind a wave. Lowering one's own priority needs no
    privilege. Done before the executor starts its work: threads started later inherit it (Linux
    keeps niceness per thread), those already running are set one by one.
    """
    if niceness <= 0 or not os.environ.get(SUPERVISOR_PID):
        return
    tasks = Path("/proc/self/task")
    threads = [int(t.name) for t in tasks.iterdir()] if tasks.is_dir() else [0]
    for thread in threads:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            current = os.getpriority(os.PRIO_PROCESS, thread)
            os.setpriority(os.PRIO_PROCESS, thread, min(current + niceness, MAX_NICENESS))
    log.info("executor running at niceness %d", os.getpriority(os.PRIO_PROCESS, 0))


def _describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-code).name}"
        return f"signal {-code}"
    return f"exit code {code}"


# ---- the supervisor ---------------------------------------------------------------------------


class ExecutorPool:
    """N executor processes kept running until `stop()`."""

    def __init__(self, settings: Settings, *, env: Mapping[str, str] | None = None) -> None:
        self.settings = settings
        self._base_env = dict(os.environ if env is None else env)
        self._procs: dict[int, asyncio.subprocess.Process] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        #: executor index -> how many times it was started
        self.starts: dict[int, int] = {}
        #: what each executor last said about its delivery (`devicectl status`, receiver_up)
        self.reports = Reports()

    @property
    def pids(self) -> dict[int, int]:
        """Executor index -> pid of its live process."""
        return {i: p.pid for i, p in self._procs.items() if p.returncode is None}

    async def start(self) -> None:
        for index in range(1, self.settings.workers + 1):
            await self._spawn(index)
            self._tasks.append(asyncio.create_task(self._keep(index), name=f"executor w{index}"))

    async def _spawn(self, index: int) -> None:
        settings = executor_settings(self.settings, index)
        report_fd = self.reports.pipe(index, settings.instance_id)
        try:
            proc = await asyncio.create_subprocess_exec(
                *executor_command(settings),
                env={
                    **settings_environment(settings, self._base_env),
                    SUPERVISOR_PID: str(os.getpid()),
                    STATUS_FD: str(report_fd),
                },
                stdin=asyncio.subprocess.DEVNULL,
                pass_fds=(report_fd,),
            )
        finally:
            os.close(report_fd)  # the child has its copy
        self._procs[index] = proc
        self.starts[index] = self.starts.get(index, 0) + 1
        log.info("executor %s started (pid %d)", settings.instance_id, proc.pid)

    async def _keep(self, index: int) -> None:
        """Wait for executor `index` to exit; unless stopping, start it again after a back-off."""
        delay = RESTART_FIRST
        while True:
            proc = self._procs[index]
            began = time.monotonic()
            code = await proc.wait()
            if self._stopping.is_set():
                return
            if time.monotonic() - began >= STABLE_AFTER:
                delay = RESTART_FIRST
            name = f"{self.settings.instance_id}-w{index}"
            self.reports.ended(index, _describe_exit(code))
            log.warning(
                "executor %s (pid %d) ended with %s; starting it again in %.1f s",
                name,
                proc.pid,
                _describe_exit(code),
                delay,
            )
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), delay)
                if self._stopping.is_set():
                    return
                delay = min(delay * 2, RESTART_MAX)
                try:
                    await self._spawn(index)
                    break
                except OSError as exc:  # out of processes or memory: try again after a back-off
                    log.error("executor %s could not start: %s", name, exc)

    async def stop(self, timeout: float | None = None) -> None:
        """SIGTERM every executor (each stops gracefully within `shutdown_grace`), SIGKILL what is
        still running after `timeout` (default: the grace plus 15 s), and reap them all."""
        self._stopping.set()
        for task in self._tasks:  # no restart from here on (a cancelled start kills its process)
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        timeout = self.settings.shutdown_grace + 15.0 if timeout is None else timeout
        live = [p for p in self._procs.values() if p.returncode is None]
        for proc in live:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        if live:
            await asyncio.wait([asyncio.ensure_future(p.wait()) for p in live], timeout=timeout)
        for proc in live:
            if proc.returncode is None:
                log.error("executor pid %d did not stop within %.0f s: killed", proc.pid, timeout)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        await self.reports.close()
