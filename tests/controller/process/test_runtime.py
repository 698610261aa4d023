"""Process tuning for `devicectl serve` (in a child process: it changes process-wide settings)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from typing import Any

import pytest

from controller.process import runtime

PROBE = """
import asyncio.sslproto, gc, json, platform, sys
from controller.process import runtime
before = {"gc": gc.get_threshold(), "tls": asyncio.sslproto.SSLProtocol.max_size,
          "switch": sys.getswitchinterval()}
runtime.tune_process()
arenas = runtime.limit_malloc_arenas(runtime.MALLOC_ARENAS)
runtime.freeze_startup_objects()
after = {"gc": gc.get_threshold(), "tls": asyncio.sslproto.SSLProtocol.max_size,
         "switch": sys.getswitchinterval(), "frozen": gc.get_freeze_count(), "arenas": arenas,
         "glibc": platform.libc_ver()[0] == "glibc"}
print(json.dumps({"before": before, "after": after}))
"""


def test_tune_process_sets_gc_thresholds_tls_buffer_switch_interval_and_freezes_startup_objects() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60, env=env
    ).stdout
    result = json.loads(out)
    assert result["before"]["gc"] != list(runtime.GC_THRESHOLDS)
    assert result["before"]["tls"] == 256 * 1024
    assert result["after"]["gc"] == list(runtime.GC_THRESHOLDS)
    assert result["after"]["tls"] == runtime.TLS_READ_BUFFER
    assert result["before"]["switch"] == 0.005
    assert result["after"]["switch"] == runtime.SWITCH_INTERVAL
    assert result["after"]["frozen"] > 1000  # the imported modules' objects at least
    assert result["after"]["arenas"] == (runtime.MALLOC_ARENAS if result["after"]["glibc"] else None)


GC_PROBE = """
import gc, json
from controller.observability import metrics
from controller.process import runtime
runtime.tune_process()
runtime.tune_process()  # once per process however often it is called
timers = sum(isinstance(c, metrics.GcTimer) for c in gc.callbacks)
seconds = lambda g: metrics.GC_SECONDS.labels(str(g))._value.get()
before = seconds(2)
garbage = [[] for _ in range(200_000)]
for item in garbage:
    item.append(item)  # a cycle each: only the collector frees them
del garbage, item
collected = gc.collect()
print(json.dumps({"timers": timers, "before": before, "after": seconds(2), "collected": collected}))
"""


def test_the_collectors_cpu_time_is_counted_by_generation() -> None:
    out = subprocess.run(
        [sys.executable, "-c", GC_PROBE], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    result = json.loads(out)
    assert result["timers"] == 1
    assert result["collected"] >= 200_000
    assert result["after"] > result["before"]  # a full collection of 200,000 cycles took CPU


def test_an_operators_malloc_arena_max_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert runtime.limit_malloc_arenas(2) is None


async def test_a_listen_address_taken_by_another_process_is_one_clear_error(
    start_controller: Any, tmp_path: Any
) -> None:
    """grpc refuses a port another process holds; the bind policy tries again for a few seconds (a
    crashed predecessor's port lingers) and then says which address, not a grpc RuntimeError."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        with pytest.raises(
            OSError, match=rf"cannot listen on 127\.0\.0\.1:{port}: address in use or invalid"
        ):
            await start_controller(listen=f"127.0.0.1:{port}")
    finally:
        holder.close()


DEFERRAL_PROBE = """
import gc, json
from controller.process import runtime
now = [0.0]
deferral = runtime.CollectionDeferral(busy_at=8, longest=30.0, clock=lambda: now[0])
seen = []
deferral.running(7); seen.append(gc.isenabled())          # below the mark: collecting
deferral.running(8); seen.append(gc.isenabled())          # a wave: deferred
deferral.running(3); seen.append(gc.isenabled())          # still a quarter or more running
before = gc.get_count()[0]
now[0] = 31.0
deferral.running(5); seen.append(gc.isenabled())          # too long: one young collection, still deferred
after = gc.get_count()[0]
deferral.running(1); seen.append(gc.isenabled())          # the wave has passed: collecting again
gc.disable()                                              # someone else's choice
deferral.running(100); deferral.running(0); seen.append(gc.isenabled())
print(json.dumps({"seen": seen, "young_before": before, "young_after": after}))
"""


def test_the_collector_waits_while_a_wave_runs_and_collects_after_it() -> None:
    out = subprocess.run(
        [sys.executable, "-c", DEFERRAL_PROBE], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    result = json.loads(out)
    assert result["seen"] == [True, False, False, False, True, False]
    assert result["young_after"] < result["young_before"]  # the overdue young collection ran


def test_a_dispatcher_tells_the_process_how_many_jobs_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio
    from datetime import UTC, datetime

    from controller.execution.dispatch import Dispatcher, Job
    from plugins.base import RequestKind

    counts: list[int] = []
    monkeypatch.setattr(runtime, "jobs_running", counts.append)

    async def scenario() -> None:
        release, all_running = asyncio.Event(), asyncio.Event()

        async def execute(job: Job) -> bool:
            if len(counts) == 3:
                all_running.set()
            await release.wait()
            return True

        dispatcher = Dispatcher(execute, max_concurrency=8, queue_limit=4)
        for i in range(3):
            job = Job(i, f"r{i}", f"d{i}", RequestKind.PING, b"", "t", datetime.now(UTC))
            assert dispatcher.submit(job)
        await asyncio.wait_for(all_running.wait(), 5)
        release.set()
        assert await dispatcher.drain(5)

    asyncio.run(scenario())
    assert counts[:3] == [1, 2, 3]
    assert sorted(counts[3:], reverse=True) == [2, 1, 0]
