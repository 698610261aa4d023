"""Recovery: from a restart to the first delivered response, with many journaled unfinished requests.

1. A controller serves no-op devices whose model says `delay = 3600`: every request is journaled
   and acknowledged, then held (running or queued) instead of finishing.
2. The load generator sends `requests` of them; all are acknowledged, so all are durable, and none
   has been answered (the sink checks).
3. The controller is killed with SIGKILL: a crash, as far as the journal knows.
4. A new controller process starts on the same database and instance id, with the same devices
   minus the delay. The clock starts when the process is spawned; reported are the moments it
   answered health checks as SERVING, delivered the first response, and delivered the last.

Recovery at start (`Controller.recover`) claims the unfinished rows and queues them before the
server starts listening, so "serving" already includes the claim.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.loadgen import device_ids, loadgen_command, request_ids
from bench.processes import (
    ControllerProcess,
    database,
    postgres_problem,
    run_json,
    write_noop_inventory,
)
from bench.responses import ResponseTracker
from bench.util import say


@dataclass(frozen=True)
class RecoveryConfig:
    """Sizes of the recovery benchmark."""

    backends: tuple[str, ...] = ("sqlite", "postgres")
    requests: int = 10_000
    devices: int = 1000
    log_level: str = "INFO"


QUICK_RECOVERY = RecoveryConfig(requests=200, devices=20)


async def run_recovery(config: RecoveryConfig, workdir: Path) -> dict[str, Any]:
    """The restart on every backend; a backend that cannot be reached is reported as skipped."""
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    out: dict[str, Any] = {"config": asdict(config), "backends": {}}
    for backend in config.backends:
        problem = postgres_problem() if backend == "postgres" else None
        if problem:
            say(f"recovery {backend}: skipped ({problem})")
            out["backends"][backend] = {"skipped": problem}
            continue
        out["backends"][backend] = await _backend(backend, config, workdir)
    return out


async def _backend(backend: str, config: RecoveryConfig, workdir: Path) -> dict[str, Any]:
    label = f"recovery {backend}"
    devices = device_ids("bench", config.devices)
    stuck, healthy = workdir / "recovery-stuck.toml", workdir / "recovery-healthy.toml"
    write_noop_inventory(stuck, devices, delay=3600.0)
    write_noop_inventory(healthy, devices)
    prefix = f"rec-{backend}-{int(time.time() * 1000) % 10**8}"
    ids = request_ids(prefix, config.requests)
    tracker = ResponseTracker()
    callback = await tracker.start()
    common: dict[str, Any] = {
        "callback": callback,
        "instance_id": f"bench-recovery-{backend}",
        "log_level": config.log_level,
        # deadlines far away: the held requests must still be worth running after the restart
        "device_call_timeout": 3600.0,
        "max_concurrency": 1024,
    }
    try:
        with database(backend, workdir) as url:
            first = ControllerProcess(
                workdir, database_url=url, inventory=stuck, name=f"recovery-{backend}-1", **common
            )
            second = ControllerProcess(
                workdir, database_url=url, inventory=healthy, name=f"recovery-{backend}-2", **common
            )
            try:
                await first.start()
                tracker.expect(ids)
                say(f"{label}: journaling {config.requests} requests that cannot finish")
                sent = await run_json(
                    loadgen_command(
                        first.address, config.requests, devices=config.devices, id_prefix=prefix, warmup=0
                    ),
                    label=label,
                    timeout=120 + config.requests / 50,
                )
                if sent["acked"] != config.requests:
                    raise RuntimeError(
                        f"{label}: {sent['acked']} of {config.requests} acknowledged: {sent['errors']}"
                    )
                await asyncio.sleep(0.5)
                answered_before = tracker.received
                first.kill()
                say(f"{label}: {config.requests} journaled, {answered_before} answered; killed; restarting")
                spawned = time.monotonic()
                second.spawn()
                serving = await second.wait_serving()
                say(f"{label}: serving after {serving - spawned:.2f} s")
                last = await tracker.wait(120 + config.requests / 50, label)
                first_at = min(tracker.arrivals.values())
            finally:
                first.kill()
                final = await second.stop()
    finally:
        await tracker.stop()
    result = {
        "requests": config.requests,
        "answered_before_restart": answered_before,
        "serving_s": serving - spawned,
        "first_response_s": first_at - spawned,
        "all_responses_s": last - spawned,
        "responses_per_s": config.requests / (last - first_at) if last > first_at else 0.0,
        "failures": len(tracker.failures),
        "failure_examples": sorted(set(tracker.failures.values()))[:3],
        "duplicates": tracker.duplicates,
        "unexpected": tracker.unexpected,
        "peak_rss_mb": final.peak_rss_bytes / 2**20 if final else 0.0,
    }
    problems = []
    if answered_before:
        problems.append(f"{answered_before} answered before the restart: they were not unfinished")
    if result["failures"]:
        problems.append(f"{result['failures']} failed responses: {result['failure_examples']}")
    if result["duplicates"] or result["unexpected"]:
        problems.append(f"{result['duplicates']} duplicate and {result['unexpected']} unexpected responses")
    result["problems"] = problems
    say(
        f"{label}: first response {result['first_response_s']:.2f} s after the restart, all "
        f"{config.requests} after {result['all_responses_s']:.2f} s"
        + (f"; PROBLEMS: {problems}" if problems else "")
    )
    return result
