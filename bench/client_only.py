"""The Redfish connection layer alone: controller-free CPU per HTTPS call against simulated BMCs.

`python -m bench.client_only --bmcs 1000` drives `plugins.redfish`'s `BmcPool`/`BmcClient` (their
kept-alive connections, per-BMC concurrency 2, sessions, ETags) directly, with no journal,
dispatch or delivery around it, so the HTTP path's own cost can be profiled and compared before
and after a change. Every phase makes the fan-out benchmark's 8 cap changes per BMC (GET, PATCH
with `If-Match`, read-back GET); the first phase also logs in. Options reproduce the process
tuning's effect (`--untuned`: CPython's default GC thresholds and 256 KiB TLS buffers; `--gc-young`:
another young-generation threshold), the keep-alive's (`--idle`: seconds of silence between
phases, `--keepalive-timeout`) and an event loop's (`--uvloop`).

The figures printed per phase: wall and CPU seconds of this process, calls the simulators counted,
CPU per call, new TCP connections, garbage collections (count and seconds, per generation) and RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import procstats
from bench.baseline import GB200_CAPS
from bench.fanout_plan import PHASES
from bench.simulators import PASSWORD, USERNAME, SimulatorProcesses
from bench.util import ROOT, jsonable, say
from controller.process import runtime
from plugins.redfish import ConnectionSettings, RedfishSettings
from plugins.redfish._client.client import BmcClient
from plugins.redfish._client.pool import BmcPool

#: calls one BMC takes per phase once logged in: 8 caps x (GET, PATCH, GET)
CALLS_PER_PHASE = 3 * sum(len(paths) for paths in GB200_CAPS.values())


class GcClock:
    """Counts garbage collections and the CPU seconds they take, per generation.

    CPU (this thread's), not wall time: on a loaded machine a collection's wall time mostly
    measures the other processes.
    """

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._started = 0.0

    def __enter__(self) -> GcClock:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.thread_time()
            return
        generation = info["generation"]
        self.count[generation] += 1
        self.seconds[generation] += time.thread_time() - self._started


async def _set_cap(client: BmcClient, path: str, watts: int) -> None:
    doc = await client.get(path, deadline=time.monotonic() + 120)
    await client.patch(
        path, {"PowerLimitWatts": {"SetPoint": watts}}, deadline=time.monotonic() + 120, etag=doc.etag
    )
    after = await client.get(path, deadline=time.monotonic() + 120)
    if after.body["PowerLimitWatts"]["SetPoint"] != watts:
        raise RuntimeError(f"{client.origin}{path}: asked for {watts} W, read back {after.body}")


async def _bmc(client: BmcClient, watts: dict[str, int]) -> None:
    await asyncio.gather(
        *(_set_cap(client, path, watts[kind]) for kind, paths in GB200_CAPS.items() for path in paths)
    )


async def run(
    bmcs: int, *, latency: float, phases: int, idle: float, keepalive_timeout: float, workdir: Path
) -> list[dict[str, Any]]:
    """Measure `phases` rounds of cap changes on `bmcs` simulated GB200 BMCs."""
    sims = SimulatorProcesses(workdir, bmcs, latency=latency)
    await sims.start()
    results = []
    pool = BmcPool(RedfishSettings(keepalive_timeout=keepalive_timeout))
    try:
        settings = [
            ConnectionSettings(url=url, username=USERNAME, password=PASSWORD, ca_bundle=str(sims.ca_bundle))
            for url in sims.urls
        ]
        clients = [await pool.client(s) for s in settings]
        for index in range(phases):
            if index and idle:
                say(f"idle for {idle:g} s")
                await asyncio.sleep(idle)
            phase = PHASES[index % len(PHASES)]
            await sims.reset()
            with GcClock() as clock:
                cpu, started = time.process_time(), time.monotonic()
                await asyncio.gather(*(_bmc(c, phase.per_component) for c in clients))
                cpu, wall = time.process_time() - cpu, time.monotonic() - started
            stats = await sims.stats()
            calls = sum(int(b["total_calls"]) for b in stats)
            writes = sum(int(b["writes_applied"]) for b in stats)
            result = {
                "phase": index + 1,
                "wall_s": wall,
                "cpu_s": cpu,
                "calls": calls,
                "writes": writes,
                "cpu_ms_per_call": cpu / calls * 1000 if calls else 0.0,
                "connections_opened": sum(int(b["connections_opened"]) for b in stats),
                "gc_count": clock.count,
                "gc_seconds": [round(s, 3) for s in clock.seconds],
                "rss_mb": procstats.sample(os.getpid()).rss_bytes / 2**20,
            }
            say(
                f"phase {index + 1}: {wall:.2f} s, {calls} calls, "
                f"{result['cpu_ms_per_call']:.3f} ms CPU/call, "
                f"{result['connections_opened']} new connections, GC {clock.count} in "
                f"{sum(clock.seconds):.2f} s CPU, RSS {result['rss_mb']:.0f} MB"
            )
            results.append(result)
    finally:
        await pool.close()
        await sims.stop()
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.client_only", description=__doc__.split("\n")[0])
    parser.add_argument("--bmcs", type=int, default=1000, help="simulated BMCs (default 1000)")
    parser.add_argument("--latency", type=float, default=0.05, help="per-call latency, s (default 0.05)")
    parser.add_argument("--phases", type=int, default=3, help="rounds of 8 cap changes (default 3)")
    parser.add_argument("--idle", type=float, default=0.0, help="seconds between phases (default 0)")
    parser.add_argument(
        "--keepalive-timeout", type=float, default=RedfishSettings.keepalive_timeout, help="plugin setting"
    )
    parser.add_argument("--untuned", action="store_true", help="skip `controller.process.runtime` tuning")
    parser.add_argument(
        "--gc-young", type=int, help="young-generation GC threshold instead of the tuned one (0: GC off)"
    )
    parser.add_argument(
        "--uvloop", action="store_true", help="run on uvloop's event loop (if installed; not a dependency)"
    )
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench" / "out" / "client-only")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if not args.untuned:
        runtime.tune_process()
    if args.gc_young is not None:
        if args.gc_young:
            gc.set_threshold(args.gc_young, *gc.get_threshold()[1:])
        else:
            gc.disable()
    loop_factory = None
    if args.uvloop:
        try:
            import uvloop  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            parser.error("--uvloop: uvloop is not installed (pip install uvloop)")
        loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        results = runner.run(
            run(
                args.bmcs,
                latency=args.latency,
                phases=args.phases,
                idle=args.idle,
                keepalive_timeout=args.keepalive_timeout,
                workdir=args.workdir,
            )
        )
    if args.json:
        args.json.write_text(json.dumps(jsonable({"args": vars(args), "phases": results}), indent=1))
    bad = [r["phase"] for r in results if r["writes"] != args.bmcs * CALLS_PER_PHASE // 3]
    if bad:
        print(f"phases {bad}: not every cap was written", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
