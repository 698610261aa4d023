"""Drain after a topology outage: how fast a backlog of responses leaves once the receiver is back.

1. A controller (`devicectl serve`, no-op devices) starts with its topology callback pointing at a
   port where nothing listens: the outage begins.
2. The load generator sends `requests` requests over `devices` devices; each is acknowledged, run
   and answered into the outbox, where the responses wait (the delivery probes the receiver).
3. Once every response is in the outbox and the outage has lasted `outage` seconds, the sink
   starts listening on that port. Reported: the first response after that, the last, and the
   drain rate (responses / seconds from the receiver's return to the last response), plus the
   controller's CPU seconds per delivered response during the drain.

`python -m drills outage --full` measures the same drain from the other side: its load is paced
in time (20 no-op devices, a 60 s outage), so its backlog depends on the machine and it checks the
targets (≥ 8,000 backlog, first response ≤ 1 s, ≥ 500/s); here the backlog is a fixed number of
responses, the same on every machine and database.

    python -m bench.drain                       # 10,000 responses, 16 devices, 60 s, both databases
    python -m bench.drain --quick               # 500 responses, 3 s
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from bench.loadgen import device_ids, loadgen_command, request_ids
from bench.processes import (
    ControllerProcess,
    database,
    free_port,
    postgres_problem,
    run_json,
    write_noop_inventory,
)
from bench.responses import ResponseTracker
from bench.util import ROOT, say


@dataclass(frozen=True)
class DrainConfig:
    """Sizes of the drain benchmark."""

    backends: tuple[str, ...] = ("sqlite", "postgres")
    requests: int = 10_000
    devices: int = 16
    outage: float = 60.0


QUICK_DRAIN = DrainConfig(requests=500, outage=3.0)


async def run_drain(config: DrainConfig, workdir: Path) -> dict[str, Any]:
    """The drain on every backend; a backend that cannot be reached is reported as skipped."""
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    out: dict[str, Any] = {"config": asdict(config), "load_before": os.getloadavg()[0], "backends": {}}
    for backend in config.backends:
        problem = postgres_problem() if backend == "postgres" else None
        if problem:
            say(f"drain {backend}: skipped ({problem})")
            out["backends"][backend] = {"skipped": problem}
            continue
        out["backends"][backend] = await _backend(backend, config, workdir)
    out["load_after"] = os.getloadavg()[0]
    return out


def _undelivered(url: str) -> int:
    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            query = "SELECT count(*) FROM outbox WHERE delivered_at IS NULL"
            return int(conn.exec_driver_sql(query).scalar_one())
    finally:
        engine.dispose()


async def _backend(backend: str, config: DrainConfig, workdir: Path) -> dict[str, Any]:
    label = f"drain {backend}"
    inventory = workdir / "drain.toml"
    write_noop_inventory(inventory, device_ids("bench", config.devices))
    prefix = f"drain-{backend}-{int(time.time() * 1000) % 10**8}"
    ids = request_ids(prefix, config.requests)
    port = free_port()
    tracker = ResponseTracker()
    tracker.sink.listen = f"127.0.0.1:{port}"
    with database(backend, workdir) as url:
        ctl = ControllerProcess(
            workdir,
            database_url=url,
            callback=tracker.sink.listen,
            inventory=inventory,
            name=f"drain-{backend}",
            instance_id=f"bench-drain-{backend}",
        )
        try:
            await ctl.start()
            down_at = time.monotonic()  # nothing listens at the callback address yet
            say(f"{label}: receiver down; sending {config.requests} requests")
            sent = await run_json(
                loadgen_command(
                    ctl.address, config.requests, devices=config.devices, id_prefix=prefix, warmup=0
                ),
                label=label,
                timeout=120 + config.requests / 50,
            )
            if sent["acked"] != config.requests:
                raise RuntimeError(
                    f"{label}: {sent['acked']} of {config.requests} acknowledged: {sent['errors']}"
                )
            while (backlog := await asyncio.to_thread(_undelivered, url)) < config.requests:
                if time.monotonic() - down_at > config.outage + 120:
                    raise RuntimeError(f"{label}: only {backlog} responses in the outbox")
                await asyncio.sleep(0.5)
            await asyncio.sleep(max(0.0, down_at + config.outage - time.monotonic()))
            outage = time.monotonic() - down_at
            say(f"{label}: {backlog} responses waiting after {outage:.1f} s; the receiver comes back")
            cpu_before = ctl.sample().cpu_seconds
            tracker.expect(ids)
            back = time.monotonic()
            await tracker.start()
            last = await tracker.wait(120 + config.requests / 20, label)
            cpu = ctl.sample().cpu_seconds - cpu_before
            first = min(tracker.arrivals.values())
        finally:
            await ctl.stop()
            await tracker.stop()
    drain = last - back
    result = {
        "backlog": backlog,
        "outage_s": round(outage, 1),
        "first_response_s": round(first - back, 3),
        "drain_s": round(drain, 2),
        "responses_per_s": round(backlog / drain) if drain > 0 else None,
        "controller_cpu_ms_per_response": round(cpu * 1000 / backlog, 3),
        "failures": len(tracker.failures),
        "duplicates": tracker.duplicates,
        "unexpected": tracker.unexpected,
    }
    say(f"{label}: {json.dumps(result)}")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.drain", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="500 responses after a 3 s outage")
    p.add_argument("--backends", help="comma-separated (default sqlite,postgres)")
    p.add_argument("--requests", type=int, help="backlog size (default 10000)")
    p.add_argument("--outage", type=float, help="seconds the receiver is down (default 60)")
    p.add_argument("--workdir", type=Path, default=ROOT / "bench" / "out" / "drain")
    args = p.parse_args(argv)
    config = QUICK_DRAIN if args.quick else DrainConfig()
    if args.backends:
        config = replace(config, backends=tuple(args.backends.split(",")))
    if args.requests:
        config = replace(config, requests=args.requests)
    if args.outage is not None:
        config = replace(config, outage=args.outage)
    result = asyncio.run(run_drain(config, args.workdir))
    print(json.dumps(result, indent=2))
    problems = [b for b, r in result["backends"].items() if r.get("failures") or r.get("unexpected")]
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
