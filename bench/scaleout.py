"""Scale-out: throughput and controller CPU per unit of work with 1, 2 and 3 controller processes.

    python -m bench.scaleout                         # ingest and fan-out at 1, 2, 3 processes
    python -m bench.scaleout --only fanout --bmcs 2000 --latency 0.3 --processes 1,3
    python -m bench.scaleout --pin-simulators 1      # the simulators on a fixed budget: CPU 1 only
    python -m bench.scaleout --quick                 # tiny sizes (what the tests run)

Every run uses PostgreSQL: `k` `devicectl serve` processes (`bench.cluster`) on one fresh database
share the shards, and the work is spread over their `k` front doors.

- *ingest*: no-op devices; one load generator per front door (`bench.loadgen`, max rate, the
  in-flight total split between them). Figures: acks/s, responses/s, and requests run and
  delivered per CPU-second of all the controller processes together.
- *fan-out*: one resource-group activation per simulated GB200 BMC (`bench.fanout`: first contact,
  then steady state), sent round robin over the front doors. Figures: time to the last response
  against the floor, and controller CPU (all processes) per BMC call.

Efficiency at `k` processes = work per controller CPU-second at `k` ÷ the same at 1: on a machine
with a core per process, throughput would be about `k x efficiency x` one process's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench.cluster import ControllerGroup, serving_group
from bench.fanout_plan import PHASES
from bench.loadgen import device_ids, loadgen_command, request_ids
from bench.processes import postgres_problem, run_json, write_noop_inventory
from bench.responses import ResponseTracker
from bench.scaleout_config import QUICK, ScaleoutConfig
from bench.scaleout_fanout import run_fanout
from bench.util import ROOT, jsonable, machine, say


async def run_scaleout(config: ScaleoutConfig, workdir: Path) -> dict[str, Any]:
    """Every benchmark at every process count; PostgreSQL must be reachable."""
    problem = postgres_problem()
    if problem:
        raise RuntimeError(f"the scale-out benchmark needs PostgreSQL: {problem}")
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    out: dict[str, Any] = {"config": jsonable(asdict(config)), "machine": machine()}
    if "ingest" in config.benchmarks:
        out["ingest"] = [await _ingest(k, config, workdir / f"ingest-{k}") for k in config.processes]
        _efficiency(out["ingest"], "responses_per_cpu_s")
    if "fanout" in config.benchmarks:
        out["fanout"] = await run_fanout(config, workdir / "fanout")
        for phase in PHASES:
            _efficiency([r for r in out["fanout"] if r["phase"] == phase.name], "calls_per_cpu_s")
    return out


def _efficiency(rows: list[dict[str, Any]], key: str) -> None:
    """Each row's work per controller CPU-second relative to the one-process row."""
    base = next((r[key] for r in rows if r["processes"] == 1), None)
    for row in rows:
        row["efficiency"] = row[key] / base if base else None


# ---- ingest ---------------------------------------------------------------------------------


async def _ingest(k: int, config: ScaleoutConfig, workdir: Path) -> dict[str, Any]:
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    inventory = workdir / "inventory.toml"
    write_noop_inventory(inventory, device_ids("bench", config.devices))
    tracker = ResponseTracker()
    callback = await tracker.start()
    label = f"scale-out ingest, {k} process(es)"
    try:
        async with serving_group(
            workdir,
            k,
            label,
            callback=callback,
            inventory=inventory,
            lease_ttl=config.lease_ttl,
            name="ingest",
            log_level=config.log_level,
        ) as (group, balance):
            row = await _ingest_run(k, config, group, tracker, label)
            row.update(balance)
        row["tracebacks"] = group.tracebacks()
        row["peak_rss_mb"] = group.peak_rss_mb()
    finally:
        await tracker.stop()
    row["problems"] = _ingest_problems(row)
    return row


async def _ingest_run(
    k: int, config: ScaleoutConfig, group: ControllerGroup, tracker: ResponseTracker, label: str
) -> dict[str, Any]:
    per_door = config.requests // k
    prefixes = [f"k{k}-door{i}" for i in range(k)]
    measured = [rid for p in prefixes for rid in request_ids(p, per_door)]
    warmups = [rid for p in prefixes for rid in request_ids(p + "-warmup", config.warmup)]
    tracker.expect(measured + warmups)
    cpu_before = group.cpu_seconds()
    say(f"{label}: {per_door * k} requests over {k} front door(s), {config.concurrency} in flight")
    results = await asyncio.gather(
        *(
            run_json(
                loadgen_command(
                    door,
                    per_door,
                    devices=config.devices,
                    id_prefix=prefix,
                    warmup=config.warmup,
                    rate=0,
                    concurrency=max(1, config.concurrency // k),
                ),
                label=f"{label} loadgen {i}",
                timeout=120 + config.requests / 50,
                progress=None,
            )
            for i, (door, prefix) in enumerate(zip(group.addresses, prefixes, strict=True))
        )
    )
    refused = {rid for r in results for rid in r["failed_ids"]}
    tracker.drop(refused)
    measured = [r for r in measured if r not in refused]
    await tracker.wait(120 + config.requests / 50, label)
    cpu = [after - before for after, before in zip(group.cpu_seconds(), cpu_before, strict=True)]
    started = min(float(r["started"]) for r in results)
    last_ack = max(float(r["last_ack"] or r["finished"]) for r in results)
    last = max((tracker.arrivals[r] for r in measured), default=time.monotonic())
    acked = sum(int(r["acked"]) for r in results)
    handled = len(measured) + len(warmups)
    total_cpu = sum(cpu)
    row = {
        "processes": k,
        "requests": len(measured),
        "acked": acked,
        "refused": len(refused),
        "acks_per_s": acked / (last_ack - started) if last_ack > started else 0.0,
        "responses": sum(1 for r in measured if r in tracker.arrivals),
        "responses_per_s": len(measured) / (last - started) if last > started else 0.0,
        "failures": len(tracker.failures),
        "duplicates": tracker.duplicates,
        "unexpected": tracker.unexpected,
        "controller_cpu_s": total_cpu,
        "controller_cpu_s_each": [round(c, 2) for c in cpu],
        "controller_cpu_ms_per_request": total_cpu / handled * 1000 if handled else 0.0,
        "responses_per_cpu_s": handled / total_cpu if total_cpu else 0.0,
        "loadgen_cpu_s": sum(float(r["cpu_seconds"]) for r in results),
        "ack_p99_ms": max(float(r["latency_ms"]["p99"]) for r in results),
    }
    say(
        f"{label}: {row['acks_per_s']:.0f} acks/s, {row['responses_per_s']:.0f} responses/s, "
        f"{row['controller_cpu_ms_per_request']:.2f} ms controller CPU/request (all processes)"
    )
    return row


def _ingest_problems(row: dict[str, Any]) -> list[str]:
    problems = []
    if row["responses"] != row["requests"] or row["acked"] != row["requests"]:
        problems.append(f"{row['acked']} acked, {row['responses']} answered of {row['requests']}")
    if row["failures"] or row["duplicates"] or row["unexpected"]:
        problems.append(
            f"{row['failures']} failed, {row['duplicates']} duplicate, {row['unexpected']} unexpected"
        )
    if row["tracebacks"]:
        problems.append(f"{row['tracebacks']} tracebacks in the controllers' logs")
    if row.get("balanced_s") is None:
        problems.append(f"shards not shared out: {row.get('problem', '?')}")
    return problems


# ---- command line ----------------------------------------------------------------------------


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part.strip())


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.scaleout", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (seconds)")
    p.add_argument("--only", choices=("ingest", "fanout"), help="run only this benchmark")
    p.add_argument("--processes", type=_ints, help="controller process counts (default 1,2,3)")
    p.add_argument("--requests", type=int, help="ingest requests per process count (default 12000)")
    p.add_argument("--bmcs", type=int, help="fan-out fleet size (default 1000)")
    p.add_argument("--latency", type=float, help="simulated per-call BMC latency, seconds (default 0.05)")
    p.add_argument(
        "--pin-simulators", type=_ints, metavar="CPUS", help="confine the simulators to these CPUs"
    )
    p.add_argument("--lease-ttl", type=float, help="the controllers' lease_ttl (default 30)")
    p.add_argument("--workdir", type=Path, default=ROOT / "bench" / "out" / "scaleout-work")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "scaleout" / "results.json")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from bench.scaleout_report import markdown

    args = parser().parse_args(argv)
    config = QUICK if args.quick else ScaleoutConfig()
    overrides = {
        "processes": args.processes,
        "requests": args.requests,
        "bmcs": args.bmcs,
        "latency": args.latency,
        "pin_simulators": args.pin_simulators,
        "lease_ttl": args.lease_ttl,
        "benchmarks": (args.only,) if args.only else None,
    }
    config = replace(config, **{k: v for k, v in overrides.items() if v is not None})
    try:
        result = asyncio.run(run_scaleout(config, args.workdir))
    except RuntimeError as exc:
        print(f"python -m bench.scaleout: {exc}", file=sys.stderr)
        return 1
    result["command"] = "python -m bench.scaleout" + "".join(f" {a}" for a in (argv or sys.argv[1:]))
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(jsonable(result), indent=1) + "\n")
    print(markdown([result]))
    problems = [p for key in ("ingest", "fanout") for row in result.get(key, []) for p in row["problems"]]
    say(f"wrote {args.out}" + (f"; PROBLEMS: {problems}" if problems else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
