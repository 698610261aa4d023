"""`python -m bench`: run the benchmarks and write BENCHMARKS.md, bench/fanout.png, bench/results.json.

    make bench                                   # everything, full sizes (about 35 minutes)
    python -m bench --only fanout --sizes 100,1000,2000,4000
    python -m bench --only fanout --sizes 2000 --workers 0,2     # one process and serve --workers 2
    python -m bench --quick                      # tiny sizes, seconds; output in bench/out/quick/
    python -m bench --compare f88e5ae            # a ref against the working tree, alternating (bench.compare)

Results of benchmarks not run this time are kept from the results file, so `--only` updates one
section of the report.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import report
from bench.fanout import run_fanout
from bench.fanout_plan import QUICK_FANOUT, FanoutConfig
from bench.ingest import QUICK_INGEST, IngestConfig, run_ingest
from bench.processes import postgres_version
from bench.recovery import QUICK_RECOVERY, RecoveryConfig, run_recovery
from bench.util import ROOT, jsonable, machine, say

BENCHMARKS = ("ingest", "fanout", "recovery")


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part.strip())


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (seconds); output under bench/out/quick/")
    p.add_argument("--only", action="append", choices=BENCHMARKS, help="run only this benchmark (repeatable)")
    p.add_argument(
        "--backends", type=_names, help="databases for ingest and recovery (default sqlite,postgres)"
    )
    p.add_argument("--sizes", type=_ints, help="fan-out fleet sizes (default 100,1000,2000,4000)")
    p.add_argument("--latency", type=float, help="simulated per-call BMC latency, seconds (default 0.05)")
    p.add_argument("--per-sim", type=int, help="BMCs per simulator process (default 1000)")
    p.add_argument("--baseline-workers", type=int, help="baseline thread pool size (default 64)")
    p.add_argument("--no-baseline", action="store_true", help="skip the synchronous-client baseline")
    p.add_argument(
        "--workers",
        type=_ints,
        action="append",
        help="fan-out layouts (repeatable or comma list): 0 = one process (default), "
        "N = serve --workers N on PostgreSQL",
    )
    p.add_argument(
        "--executor-niceness", type=int, help="fan-out --workers layouts: the executors' executor_niceness"
    )
    p.add_argument(
        "--max-concurrency",
        type=int,
        help="fan-out: the controller's max_concurrency (default: the fleet size, at least 1024)",
    )
    p.add_argument(
        "--no-restart", action="store_true", help="fan-out: skip the wave after a restart with warm-up"
    )
    p.add_argument(
        "--no-probes",
        action="store_true",
        help="fan-out: no ack probes while the waves execute (with --compare: on each side whose "
        "benchmark sends them and can be told not to; for CPU like for like against a harness "
        "that sends none)",
    )
    p.add_argument(
        "--plugin-process", action="store_true", help="fan-out with the Redfish plugin as its own process"
    )
    p.add_argument("--ingest-rate", type=float, help="fixed offered rate, requests/s (default 1000)")
    p.add_argument("--ingest-requests", type=int, help="requests in the fixed-rate run (default 10000)")
    p.add_argument("--ingest-max-requests", type=int, help="requests in the max-rate run (default 20000)")
    p.add_argument(
        "--ingest-concurrency", type=int, help="requests in flight in the max-rate run (default 256)"
    )
    p.add_argument("--recovery-requests", type=int, help="journaled unfinished requests (default 10000)")
    p.add_argument("--controller-log-level", help="the controller's --log-level (default INFO, as deployed)")
    p.add_argument(
        "--profile", type=Path, help="write py-spy profiles of the controller's fan-out phases here"
    )
    p.add_argument(
        "--compare",
        metavar="REF",
        help="run fan-out and ingest for git REF and for the working tree, alternating, and print the ratios",
    )
    p.add_argument("--rounds", type=int, default=2, help="with --compare: runs of each side (default 2)")
    p.add_argument(
        "--compare-out", type=Path, help="with --compare: results directory (default bench/out/compare)"
    )
    p.add_argument("--workdir", type=Path, help="scratch directory (default bench/out/work)")
    p.add_argument("--results", type=Path, help="results JSON (default bench/results.json)")
    p.add_argument("--markdown", type=Path, help="report (default BENCHMARKS.md)")
    p.add_argument("--plot", type=Path, help="fan-out plot (default bench/fanout.png)")
    return p


def _configs(args: argparse.Namespace) -> tuple[IngestConfig, FanoutConfig, RecoveryConfig]:
    ingest = QUICK_INGEST if args.quick else IngestConfig()
    fanout = QUICK_FANOUT if args.quick else FanoutConfig()
    recovery = QUICK_RECOVERY if args.quick else RecoveryConfig()
    level = args.controller_log_level
    if args.backends:
        ingest, recovery = replace(ingest, backends=args.backends), replace(recovery, backends=args.backends)
    if level:
        ingest, fanout = replace(ingest, log_level=level), replace(fanout, log_level=level)
        recovery = replace(recovery, log_level=level)
    overrides: dict[str, Any] = {
        "rate": args.ingest_rate,
        "fixed_requests": args.ingest_requests,
        "max_requests": args.ingest_max_requests,
        "concurrency": args.ingest_concurrency,
    }
    ingest = replace(ingest, **{k: v for k, v in overrides.items() if v is not None})
    overrides = {
        "sizes": args.sizes,
        "latency": args.latency,
        "per_process": args.per_sim,
        "baseline_workers": args.baseline_workers,
        "profile_dir": args.profile,
        "workers": tuple(w for group in args.workers for w in group) if args.workers else None,
        "executor_niceness": args.executor_niceness,
        "max_concurrency": args.max_concurrency,
    }
    fanout = replace(fanout, **{k: v for k, v in overrides.items() if v is not None})
    if args.no_baseline:
        fanout = replace(fanout, baseline=False)
    if args.plugin_process:
        fanout = replace(fanout, plugin_process=True)
    if args.no_restart:
        fanout = replace(fanout, after_restart=False)
    if args.no_probes:
        fanout = replace(fanout, probes=False)
    if args.recovery_requests:
        recovery = replace(recovery, requests=args.recovery_requests)
    return ingest, fanout, recovery


async def _run(args: argparse.Namespace, command: str, save: Callable[[dict[str, Any]], None]) -> None:
    out_dir = ROOT / "bench" / "out"
    workdir = args.workdir or out_dir / ("quick-work" if args.quick else "work")
    ingest, fanout, recovery = _configs(args)
    runs = {
        "ingest": lambda: run_ingest(ingest, workdir),
        "fanout": lambda: run_fanout(fanout, workdir),
        "recovery": lambda: run_recovery(recovery, workdir),
    }
    for name in args.only or BENCHMARKS:
        say(f"=== {name} ===")
        # Load averages before and after: anything else running on these cores shows up here.
        load_before = os.getloadavg()
        result = await runs[name]()
        # Saved as each benchmark finishes, so a late failure does not lose the earlier results.
        save(
            {
                name: {
                    "command": command,
                    "quick": bool(args.quick),
                    "finished_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
                    "load_before": [round(x, 2) for x in load_before],
                    "load_after": [round(x, 2) for x in os.getloadavg()],
                    "code": _code_version(),
                    "result": jsonable(result),
                }
            }
        )


def _code_version() -> str:
    """The commit the benchmarked code is at (and whether the tree had local changes)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "controller", "plugins", "migrations"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" with local changes" if dirty else "")


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.compare:
        from bench.compare import compare

        return compare(args)
    quick_dir = ROOT / "bench" / "out" / "quick"
    results_path = args.results or (
        quick_dir / "results.json" if args.quick else ROOT / "bench" / "results.json"
    )
    markdown_path = args.markdown or (quick_dir / "BENCHMARKS.md" if args.quick else ROOT / "BENCHMARKS.md")
    plot_path = args.plot or (quick_dir / "fanout.png" if args.quick else ROOT / "bench" / "fanout.png")
    command = "python -m bench" + (
        "".join(" " + shlex.quote(a) for a in argv)
        if argv is not None
        else "".join(" " + shlex.quote(a) for a in sys.argv[1:])
    )
    results: dict[str, Any] = {}
    if results_path.exists():
        results = json.loads(results_path.read_text())

    def save(fresh: dict[str, Any]) -> None:
        results.update(fresh)
        results["machine"] = {**machine(), "postgres": postgres_version()}
        results_path.parent.mkdir(parents=True, exist_ok=True)
        results_path.write_text(json.dumps(results, indent=1) + "\n")
        report.plot_fanout(results, plot_path)
        report.write_markdown(results, markdown_path, plot_path)
        say(f"wrote {markdown_path}, {plot_path}, {results_path}")

    asyncio.run(_run(args, command, save))
    for target, measured, ok in report.targets(results):
        say(f"{'MET   ' if ok else 'MISSED' if ok is False else '  -   '} {target}: {measured}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
