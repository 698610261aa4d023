"""Crash drill: the controller is SIGKILLed again and again while requests keep arriving.

Load runs throughout (senders retry until acknowledged, as a topology service would). After each
kill a new controller process starts on the same database and port; recovery must re-queue what
was journaled and unfinished, in order. At the end: nothing lost or stuck, per-device order kept,
no request failed on a Redfish session table full of the controller's own sessions, at most one
session per BMC (one live controller), every GPU cap equal to what the responses say it is (a
failed request included: it says which GPUs it wrote), and no more duplicates than the kills
explain. A kill repeats the responses sent and not yet recorded as delivered: one per process, and
while a backlog is delivered one per device (controller/delivery/outbox.py, which logs when a
backlog's delivery starts and ends; each life's log slice tells the drill which bound its kill had).
Every repeat is matched to a kill between its previous copy and itself, within each kill's bound
(`drills.crash_figures.duplicates_per_kill`); what no kill explains is a problem.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from drills.common import per_backend, problems_of
from drills.crash_figures import (
    bmc_sessions,
    caps_against_responses,
    duplicates_per_kill,
    failure_reasons,
    repeat_bounds,
    repeats,
)
from drills.load import Load
from drills.stack import Stack
from drills.verdict import verdict


@dataclass(frozen=True)
class CrashConfig:
    backends: tuple[str, ...] = ("sqlite", "postgres")
    kills: int = 20
    devices: int = 4
    #: seconds each simulated BMC adds to every request
    latency: float = 0.0
    #: requests per device (0: until the last kill, then `up_max` more seconds)
    per_device: int = 0
    #: seconds each sender waits between requests
    interval: float = 0.05
    #: the controller runs this long (uniform, seeded) under load before each kill
    up_min: float = 0.2
    up_max: float = 0.7
    drain_limit: float = 90.0
    seed: int = 9
    #: each request's deadline (`timeout_seconds`), longer than the whole drill. A request journaled
    #: before a kill waits for a later life to run it; on a slow or busy host (restarts of up to
    #: 6 s, lives of 0.2-0.7 s) 41 of 59 requests waited past a 60 s deadline and were answered
    #: "deadline passed before the request could run". That answer is honest, but it would stand in
    #: for the failures this drill looks for
    request_timeout: int = 600
    #: a life lasts until it has acknowledged a request, up to this long past its drawn time: on a
    #: busy host (two busy loops beside the suite) lives of 0.2-0.7 s on PostgreSQL acknowledged
    #: nothing in a whole drill, which then checked nothing
    progress_limit: float = 30.0


REDUCED = CrashConfig()
#: the issue's drill: 50 GB200 BMCs at 50 ms, 600 paced requests, 20 kills while they are sent
FULL = CrashConfig(
    kills=20, devices=50, latency=0.05, per_device=12, interval=7.0, up_min=1.0, up_max=3.0, drain_limit=300.0
)


async def run(config: CrashConfig, workdir: Path) -> dict[str, Any]:
    async def one(backend: str, url: str, where: Path) -> list[dict[str, Any]]:
        return [await run_backend(config, backend, url, where)]

    rows = await per_backend("crash", config.backends, workdir, one)
    return {"drill": "crash", "config": asdict(config), "rows": rows}


async def run_backend(config: CrashConfig, backend: str, url: str, workdir: Path) -> dict[str, Any]:
    stack = Stack(
        workdir, bmcs=config.devices, database_url=url, name=f"crash-{backend}", latency=config.latency
    )
    rng = random.Random(config.seed)
    restarts: list[float] = []
    kills_at: list[float] = []
    log_at_kill: list[int] = [0]  # the controller log's size when each life ended
    try:
        await stack.start()
        load = Load(
            stack.ctl.address,
            stack.devices,
            prefix=f"crash-{backend}",
            interval=config.interval,
            per_device=config.per_device or 1_000_000,
            timeout_seconds=config.request_timeout,
        )
        load.start()
        poller = asyncio.create_task(_poll(stack))  # arrival times, for duplicates per kill
        began = time.monotonic()
        try:
            for _ in range(config.kills):
                acked_before = len(load.acked)
                await asyncio.sleep(rng.uniform(config.up_min, config.up_max))
                await _progress(load, acked_before, config.progress_limit)
                stack.sink.poll()
                kills_at.append(time.monotonic())
                stack.ctl.kill()
                log_at_kill.append(_log_size(stack))
                restarts.append(await stack.ctl.start())
            if config.per_device:
                await load.wait()
            else:
                await asyncio.sleep(config.up_max)  # traffic after the last restart too
        finally:
            await load.stop()
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
        loaded_s = time.monotonic() - began
        result = await verdict(
            stack, load.acked, database_url=url, drain_limit=config.drain_limit, check_caps=False
        )
        held = {d: await stack.gpu_caps(i) for i, d in enumerate(stack.devices)}
        arrivals = stack.sink.arrivals
        result.update(caps_against_responses(load.acked, arrivals, held, load.unsettled))
        result.update(await bmc_sessions(stack))
        bounds = repeat_bounds(_lives(stack, log_at_kill), len(stack.devices))
        # a copy read from the sink up to this long after a kill may have been sent before it;
        # half the quickest restart: the kill before a copy's sender started never fits
        lag = min(0.5 * min(restarts, default=1.0), 1.0)
        per_kill, unexplained = duplicates_per_kill(load.acked, arrivals, kills_at, bounds=bounds, lag=lag)
        first_kill = kills_at[0] if kills_at else float("inf")
        before_any = sum(1 for a, _ in repeats(load.acked, arrivals) if a.seen_at < first_kill)
        reasons, session_failures = failure_reasons(load.acked, arrivals)
    finally:
        await stack.close()
    result.update(
        backend=backend,
        kills=len(restarts),
        load_s=round(loaded_s, 1),
        restart_s_max=round(max(restarts, default=0.0), 2),
        unacked=len(load.unacked),
        refused=len(load.refused),
        client_retries=dict(load.retries),
        duplicates_max_per_kill=max(per_kill, default=0),
        duplicates_per_kill=per_kill,
        duplicates_unexplained=unexplained,
        duplicates_before_any_kill=before_any,
        kills_during_backlog=sum(1 for b in bounds if b > 1),
        failure_reasons=reasons,
        failed_on_session_table=session_failures,
    )
    problems = problems_of(result, allow_failed=True)
    if session_failures:
        problems.append(f"{session_failures} requests failed on a session table full of our own sessions")
    if result["caps_wrong"]:
        problems.append(
            f"{result['caps_wrong']} GPU caps differ from the responses: {result['caps_examples']}"
        )
    if result["sessions_open_max_per_bmc"] > 1:
        problems.append(f"a BMC holds {result['sessions_open_max_per_bmc']} sessions (one live controller)")
    if result["duplicates_before_any_kill"]:
        problems.append(f"{result['duplicates_before_any_kill']} duplicates before any kill (none may be)")
    if result["duplicates_unexplained"]:
        problems.append(
            f"{result['duplicates_unexplained']} of {result['duplicates']} duplicates after "
            f"{len(restarts)} kills are more than the kills explain (one per kill; while a backlog "
            f"is delivered, one per device)"
        )
    if load.refused:
        problems.append(f"{len(load.refused)} refused: {list(load.refused.values())[:2]}")
    result["problems"] = problems
    return result


async def _progress(load: Load, acked_before: int, limit: float) -> None:
    """Wait, `limit` seconds at most, until the load has an acknowledgement past `acked_before`."""
    deadline = time.monotonic() + limit
    while len(load.acked) <= acked_before and time.monotonic() < deadline:  # noqa: ASYNC110 (no event)
        await asyncio.sleep(0.05)


def _log_size(stack: Stack) -> int:
    try:
        return stack.ctl.log_path.stat().st_size
    except OSError:
        return 0


def _lives(stack: Stack, log_at_kill: list[int]) -> list[str]:
    """The controller log of each life that a kill ended, in kill order."""
    try:
        text = stack.ctl.log_path.read_bytes()
    except OSError:
        text = b""
    return [text[start:end].decode(errors="replace") for start, end in itertools.pairwise(log_at_kill)]


async def _poll(stack: Stack) -> None:
    while True:
        stack.sink.poll()
        await asyncio.sleep(0.1)
