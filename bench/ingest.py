"""Ingest: how fast the controller journals and acknowledges requests, and how fast it answers them.

The controller serves `--devices` no-op devices (`bench.noop_plugin`), so nothing but the controller's
own path is measured: gRPC, validation, the durable journal write (group commit) before the ack,
dispatch, completion (result + outbox in one transaction) and delivery to the topology sink.
A backend named `sqlite+agent` (or `postgres+agent`) runs the controller in agent mode: the load
generator sends to the sink, which routes each request over the agent's stream (the ack is the
agent's RequestAck after its journal commit) and receives the responses on that stream. The
load generator is a separate process (`bench.loadgen`). Two scenarios per database backend, on one
controller, one after the other (the second starts once every response of the first has arrived):

- fixed rate: `rate` requests/s offered on an open-loop schedule; ack latency is the figure of merit;
- max rate: `concurrency` requests kept in flight; acks/s is the figure of merit.

"Responses/s" counts completed-and-delivered responses: measured requests divided by the time from
the first send to the arrival of the last measured response at the sink.
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
    postgres_version,
    run_json,
    write_noop_inventory,
)
from bench.responses import ResponseTracker
from bench.util import say


@dataclass(frozen=True)
class IngestConfig:
    """Sizes of the ingest benchmark."""

    backends: tuple[str, ...] = ("sqlite", "postgres")
    devices: int = 1000
    rate: float = 1000.0
    fixed_requests: int = 10_000
    max_requests: int = 20_000
    concurrency: int = 256
    warmup: int = 200
    log_level: str = "INFO"


QUICK_INGEST = IngestConfig(
    devices=20, rate=200.0, fixed_requests=100, max_requests=300, concurrency=32, warmup=10
)


async def run_ingest(config: IngestConfig, workdir: Path) -> dict[str, Any]:
    """Both scenarios on every backend; a backend that cannot be reached is reported as skipped."""
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    out: dict[str, Any] = {"config": asdict(config), "backends": {}}
    for backend in config.backends:
        if backend.partition("+")[0] == "postgres":
            problem = postgres_problem()
            if problem:
                say(f"ingest postgres: skipped ({problem})")
                out["backends"][backend] = {"skipped": problem}
                continue
            out["postgres_version"] = postgres_version()
        out["backends"][backend] = await _backend(backend, config, workdir)
    return out


async def _backend(backend: str, config: IngestConfig, workdir: Path) -> dict[str, Any]:
    inventory = workdir / "ingest-inventory.toml"
    write_noop_inventory(inventory, device_ids("bench", config.devices))
    tracker = ResponseTracker()
    callback = await tracker.start()
    db_backend, _, mode = backend.partition("+")
    agent = mode == "agent"
    extra = ("--agent-server", callback, "--agent-id", "bench") if agent else ()
    try:
        with database(db_backend, workdir) as url:
            controller = ControllerProcess(
                workdir,
                database_url=url,
                callback="" if agent else callback,
                inventory=inventory,
                log_level=config.log_level,
                name=f"ingest-{backend.replace('+', '-')}",
                extra_args=extra,
            )
            try:
                startup = await controller.start()
                say(f"ingest {backend}: controller serving after {startup:.1f} s")
                target = controller.address
                if agent:  # requests go through the sink, which routes them over the stream
                    await tracker.agent_connected("bench", 60.0)
                    target = callback
                fixed = await _scenario(
                    controller, tracker, config, backend, "fixed", config.fixed_requests, config.rate, target
                )
                peak = await _scenario(
                    controller, tracker, config, backend, "max", config.max_requests, 0.0, target
                )
            finally:
                final = await controller.stop()
    finally:
        await tracker.stop()
    return {
        "fixed": fixed,
        "max": peak,
        "peak_rss_mb": final.peak_rss_bytes / 2**20 if final else 0.0,
    }


async def _scenario(
    controller: ControllerProcess,
    tracker: ResponseTracker,
    config: IngestConfig,
    backend: str,
    mode: str,
    requests: int,
    rate: float,
    target: str,
) -> dict[str, Any]:
    label = f"ingest {backend} {mode}-rate"
    prefix = f"{backend}-{mode}-{int(time.time() * 1000) % 10**8}"
    measured = request_ids(prefix, requests)
    tracker.expect(measured + request_ids(prefix + "-warmup", config.warmup))
    before, own_before = controller.sample(), time.process_time()
    what = f"{rate:g} req/s offered" if rate > 0 else f"max rate, {config.concurrency} in flight"
    say(f"{label}: {requests} requests, {what}")
    result = await run_json(
        loadgen_command(
            target,
            requests,
            devices=config.devices,
            id_prefix=prefix,
            warmup=config.warmup,
            rate=rate,
            concurrency=config.concurrency,
        ),
        label=label,
        timeout=120 + requests / 50,
        progress=lambda: f"{tracker.received} responses so far",
    )
    if result["failed_ids"]:
        # Over capacity, gRPC sheds requests (CANCELLED) before they reach the journal: only the
        # acknowledged ones are owed a response. The refusals are reported with the results.
        say(
            f"{label}: {len(result['failed_ids'])} requests refused: "
            f"{result['errors']} {result['error_details']}"
        )
        failed = set(result["failed_ids"])
        measured = [r for r in measured if r not in failed]
        tracker.drop(failed)
    await tracker.wait(120 + requests / 100, label)
    after, own_cpu = controller.sample(), time.process_time() - own_before
    last = max((tracker.arrivals[r] for r in measured), default=time.monotonic())
    span = last - float(result["started"])
    cpu = after.cpu_seconds - before.cpu_seconds
    handled = len(measured) + config.warmup  # refused requests never reached the Python handler
    summary = {
        "requests": requests,
        "offered_rate": rate,
        "concurrency": config.concurrency if rate <= 0 else None,
        "acked": result["acked"],
        "refused": len(result["failed_ids"]),
        "errors": result["errors"],
        "error_details": result["error_details"],
        "acks_per_s": result["acks_per_s"],
        "latency_ms": result["latency_ms"],
        "send_lag_max_ms": result["send_lag_max_ms"],
        "responses": len(measured),
        "responses_per_s": len(measured) / span if span > 0 else 0.0,
        "failures": len(tracker.failures),
        "duplicates": tracker.duplicates,
        "unexpected": tracker.unexpected,
        "controller_cpu_s": cpu,
        "controller_cpu_ms_per_request": cpu / handled * 1000 if handled else 0.0,
        # the other processes on the same cores: the load generator and the sink (this process)
        "loadgen_cpu_s": result["cpu_seconds"],
        "sink_cpu_s": own_cpu,
        "wall_s": last - float(result["started"]),
    }
    lat = result["latency_ms"]
    say(
        f"{label}: {summary['acks_per_s']:.0f} acks/s, ack p50 {lat['p50']:.1f} ms p99 {lat['p99']:.1f} ms "
        f"max {lat['max']:.1f} ms, {summary['responses_per_s']:.0f} responses/s, "
        f"controller {summary['controller_cpu_ms_per_request']:.2f} ms CPU/request"
    )
    return summary
