"""The ack path apart from execution: ack latency at a fixed offered rate while every request is
also run and delivered, with one `serve` process (role all) and with `serve --workers N` (a front
end that only validates, journals and acks, plus N executor processes), on PostgreSQL.

    python -m bench.scaleout_ingest --workers 2 --rate 1000 --requests 10000

The controller serves no-op devices (`bench.noop_plugin`); the load generator (`bench.loadgen`) is
its own process and the topology sink runs here, as in the ingest benchmark (bench/ingest.py, whose
fixed-rate scenario this reuses). Controller CPU is the sum over the process tree (front end and
executors). Prints one JSON object; `--markdown` also prints the table rows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from bench import procstats
from bench.ingest import IngestConfig, _scenario
from bench.loadgen import device_ids
from bench.ports import free_port_run
from bench.processes import (
    ControllerProcess,
    database,
    postgres_problem,
    write_noop_inventory,
)
from bench.responses import ResponseTracker
from bench.util import ROOT, say


def child_pids(pid: int) -> list[int]:
    """The pids whose parent is `pid` (from /proc; Linux)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:  # field 4 of proc(5): the parent
            out.append(int(entry.name))
    return out


class ProcessTree(ControllerProcess):
    """A controller whose CPU and memory are counted over its children too (`serve --workers`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: CPU seconds of the front end alone at each `sample()`
        self.front_cpu: list[float] = []

    def sample(self) -> procstats.ProcSample:
        samples = [procstats.sample(self.pid)]
        self.front_cpu.append(samples[0].cpu_seconds)
        for pid in child_pids(self.pid):
            try:
                samples.append(procstats.sample(pid))
            except ProcessLookupError:
                continue
        self.last_sample = procstats.ProcSample(
            cpu_seconds=sum(s.cpu_seconds for s in samples),
            rss_bytes=sum(s.rss_bytes for s in samples),
            peak_rss_bytes=sum(s.peak_rss_bytes for s in samples),
        )
        return self.last_sample

    async def wait_executors(self, url: str, count: int, timeout: float = 120.0) -> None:
        """Wait until `count` executors share the shards evenly (`shard_leases`), so no start-up
        or rebalancing falls into the measurement."""
        engine = sa.create_engine(url, poolclass=NullPool)
        query = sa.text("SELECT owner, count(*) FROM shard_leases WHERE expires_at > now() GROUP BY owner")
        try:
            async with asyncio.timeout(timeout):
                while True:
                    held = await asyncio.to_thread(_rows, engine, query)
                    if len(held) == count and max(held.values()) - min(held.values()) <= 1:
                        return
                    await asyncio.sleep(0.2)
        finally:
            engine.dispose()


def ack_histogram(metrics_port: int) -> dict[float, float]:
    """The acking process's own ack-latency histogram (receipt to journal commit, inside the
    server): cumulative count per upper bound in seconds."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    out: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith("devicectl_ack_duration_seconds_bucket{"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            out[float("inf") if bound == "+Inf" else float(bound)] = float(line.rsplit(" ", 1)[1])
    return out


def server_side(before: dict[float, float], after: dict[float, float]) -> dict[str, Any]:
    """The bucket bounds holding the p50 and p99 of the acks between two scrapes, and the share
    acknowledged within 25 ms, all measured inside the acking process."""
    counts = {le: after[le] - before.get(le, 0.0) for le in sorted(after)}
    total = counts.get(float("inf"), 0.0)

    def bound(q: float) -> float | None:
        return next((le * 1000 for le, n in counts.items() if total and n >= q * total), None)

    return {
        "acks": total,
        "p50_at_most_ms": bound(0.5),
        "p99_at_most_ms": bound(0.99),
        "within_25ms": counts.get(0.025, 0.0) / total if total else 0.0,
    }


def raise_priority(pid: int, niceness: int) -> None:
    """Set every thread of `pid` to `niceness` (negative needs root): the front end then gets a
    CPU whenever it is runnable, as if it had a core of its own on a busy machine."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        os.setpriority(os.PRIO_PROCESS, int(task.name), niceness)


def _rows(engine: sa.Engine, query: sa.TextClause) -> dict[str, int]:
    with engine.connect() as conn:
        return {str(owner): int(n) for owner, n in conn.execute(query)}


async def run(
    workers: Sequence[int], config: IngestConfig, workdir: Path, front_niceness: int | None = None
) -> dict[str, Any]:
    """The fixed-rate scenario once per layout (0 = one process, role all); `front_niceness`
    re-nices the acking process (the front end, or the one process) once it serves."""
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    inventory = workdir / "scaleout-ingest-inventory.toml"
    write_noop_inventory(inventory, device_ids("bench", config.devices))
    out: dict[str, Any] = {
        "config": {**config.__dict__, "workers": list(workers), "front_niceness": front_niceness},
        "layouts": {},
    }
    for n in workers:
        label = f"--workers {n}" if n else "one process"
        tracker = ResponseTracker()
        callback = await tracker.start()
        try:
            with database("postgres", workdir) as url:
                metrics = free_port_run(n + 1)
                controller = ProcessTree(
                    workdir,
                    database_url=url,
                    callback=callback,
                    inventory=inventory,
                    log_level=config.log_level,
                    name=f"scaleout-ingest-w{n}",
                    extra_args=(
                        "--metrics-listen",
                        f"127.0.0.1:{metrics}",
                        *(("--workers", str(n)) if n else ()),
                    ),
                )
                try:
                    startup = await controller.start()
                    if n:
                        await controller.wait_executors(url, n)
                    if front_niceness is not None:
                        raise_priority(controller.pid, front_niceness)
                    say(f"ack path {label}: serving after {startup:.1f} s")
                    before = await asyncio.to_thread(ack_histogram, metrics)
                    result = await _scenario(
                        controller,
                        tracker,
                        config,
                        f"postgres {label}",
                        "fixed",
                        config.fixed_requests,
                        config.rate,
                        controller.address,
                    )
                    # the process that acks (the front end, or the one process) apart from the others
                    front = controller.front_cpu[-1] - controller.front_cpu[-2]
                    inside = server_side(before, await asyncio.to_thread(ack_histogram, metrics))
                finally:
                    await controller.stop()
        finally:
            await tracker.stop()
        handled = result["responses"] + config.warmup
        result["front_cpu_ms_per_request"] = front / handled * 1000 if handled else 0.0
        result["server_side"] = inside
        out["layouts"][label] = result
    return out


def markdown_rows(result: dict[str, Any]) -> list[str]:
    """The table for BENCHMARKS.md ("Scale-out: ack path")."""
    rows = [
        "| layout | offered | acked/s | ack p50 | ack p99 | ack max | responses/s | "
        "controller CPU/request | of it the acking process | refused | duplicates | "
        "in the server: p50 ≤, p99 ≤, acks ≤ 25 ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, r in result["layouts"].items():
        lat, inside = r["latency_ms"], r["server_side"]
        rows.append(
            f"| {label} | {r['offered_rate']:.0f}/s | {r['acks_per_s']:.0f} | {lat['p50']:.1f} ms | "
            f"{lat['p99']:.1f} ms | {lat['max']:.0f} ms | {r['responses_per_s']:.0f} | "
            f"{r['controller_cpu_ms_per_request']:.2f} ms | {r['front_cpu_ms_per_request']:.2f} ms | "
            f"{r['refused']} | {r['duplicates']} | {_ms(inside['p50_at_most_ms'])}, "
            f"{_ms(inside['p99_at_most_ms'])}, {inside['within_25ms']:.0%} |"
        )
    return rows


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:g} ms"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.scaleout_ingest", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--workers", default="0,2", help="layouts, comma-separated: 0 = one process, N = serve --workers N"
    )
    p.add_argument("--rate", type=float, default=1000.0, help="offered requests/s")
    p.add_argument("--requests", type=int, default=10_000, help="measured requests per layout")
    p.add_argument("--devices", type=int, default=1000, help="no-op devices the requests are spread over")
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument(
        "--front-niceness",
        type=int,
        help="re-nice the acking process (e.g. -10, as root): as if it had a core of its own",
    )
    p.add_argument("--workdir", type=Path, default=ROOT / "bench" / "out" / "scaleout-ingest")
    p.add_argument("--out", type=Path, help="also write the JSON result here")
    p.add_argument("--markdown", action="store_true", help="print the BENCHMARKS.md table too")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    problem = postgres_problem()
    if problem:
        print(f"error: PostgreSQL unreachable ({problem}); set DEVICECTL_BENCH_PG_URL", file=sys.stderr)
        return 2
    layouts = [int(part) for part in args.workers.split(",") if part.strip()]
    config = IngestConfig(
        backends=("postgres",),
        devices=args.devices,
        rate=args.rate,
        fixed_requests=args.requests,
        warmup=args.warmup,
    )
    result = asyncio.run(run(layouts, config, args.workdir, args.front_niceness))
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    if args.markdown:
        print("\n".join(markdown_rows(result)), file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
