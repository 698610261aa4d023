"""`python -m bench --compare REF`: the fan-out and ingest benchmarks for a git ref and for the
working tree, alternating on the same host, and a table of the ratios.

The ref is checked out into a temporary `git worktree` and its own benchmark code is run there
(`python -m bench` with that checkout first on PYTHONPATH, so its controller, plugins and
simulators are the ones measured, never the working tree's; checked before the first run). Both
sides use this interpreter and its installed packages. The rounds alternate A B, B A, A B, ... so
that a host getting busier or quieter during the comparison weighs on both sides alike.

Everything is measured as the benchmarks always do (`bench.fanout`, `bench.ingest`); the table
shows each side's median over the rounds (every round's value next to it) and working tree ÷ ref.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.util import ROOT, say

#: what a comparison runs unless told otherwise: the production-like steady state, and an ingest
#: run on SQLite short enough to repeat
DEFAULT_SIZES = "500"
DEFAULT_LATENCY = "0.3"
DEFAULT_BACKENDS = "sqlite"
DEFAULT_INGEST_REQUESTS = "3000"
DEFAULT_INGEST_MAX_REQUESTS = "6000"


@dataclass(frozen=True)
class Metric:
    """One row of the table: its label and how to read it from a run's results (None: absent)."""

    label: str
    read: Callable[[dict[str, Any]], float | None]
    digits: int = 2


def _phase(results: dict[str, Any], name: str) -> dict[str, Any] | None:
    sizes = results.get("fanout", {}).get("result", {}).get("sizes") or []
    if not sizes:
        return None
    for phase in sizes[0].get("phases", []):
        if phase.get("phase") == name:
            return dict(phase)
    return None


def _fanout(name: str, key: str) -> Callable[[dict[str, Any]], float | None]:
    def read(results: dict[str, Any]) -> float | None:
        phase = _phase(results, name)
        value = None if phase is None else phase.get(key)  # absent from a ref's older benchmark
        return None if value is None else float(value)

    return read


def _probe_ack(name: str) -> Callable[[dict[str, Any]], float | None]:
    """A phase's probe ack p99: no value for a run that sent no probes (`--no-probes`)."""

    def read(results: dict[str, Any]) -> float | None:
        phase = _phase(results, name)
        if phase is None or not phase.get("probe_acks"):
            return None
        return float(phase["probe_ack_p99_ms"])

    return read


def _calls_per_activation(name: str) -> Callable[[dict[str, Any]], float | None]:
    def read(results: dict[str, Any]) -> float | None:
        phase = _phase(results, name)  # None when fan-out did not run (`--only ingest`)
        return None if phase is None else phase["calls"] / results["fanout"]["result"]["sizes"][0]["n"]

    return read


def _cpu_per_activation(name: str) -> Callable[[dict[str, Any]], float | None]:
    def read(results: dict[str, Any]) -> float | None:
        phase = _phase(results, name)
        if phase is None:
            return None
        return phase["controller_cpu_s"] * 1000 / results["fanout"]["result"]["sizes"][0]["n"]

    return read


def _fanout_rss(results: dict[str, Any]) -> float | None:
    sizes = results.get("fanout", {}).get("result", {}).get("sizes") or []
    return float(sizes[0]["peak_rss_mb"]) if sizes else None


def _ingest(backend: str, scenario: str, *keys: str) -> Callable[[dict[str, Any]], float | None]:
    def read(results: dict[str, Any]) -> float | None:
        value: Any = results.get("ingest", {}).get("result", {}).get("backends", {}).get(backend)
        if not isinstance(value, dict) or "skipped" in value:
            return None
        for key in (scenario, *keys) if scenario else keys:
            value = value[key]
        return float(value)

    return read


def metrics(backends: Sequence[str]) -> list[Metric]:
    """The rows: fan-out first contact and steady state, then ingest per backend."""
    rows = [
        Metric("fan-out first contact s", _fanout("first contact", "elapsed")),
        Metric("fan-out steady state s", _fanout("steady state", "elapsed")),
        Metric("CPU ms/BMC call, first contact", _fanout("first contact", "cpu_ms_per_call"), 3),
        Metric("CPU ms/BMC call, steady state", _fanout("steady state", "cpu_ms_per_call"), 3),
        Metric("CPU ms/activation, first contact", _cpu_per_activation("first contact"), 1),
        Metric("CPU ms/activation, steady state", _cpu_per_activation("steady state"), 1),
        Metric("calls per activation, first contact", _calls_per_activation("first contact"), 1),
        Metric("calls per activation, steady state", _calls_per_activation("steady state"), 1),
        Metric("ack p99 ms during the wave, first contact", _fanout("first contact", "ack_p99_ms"), 1),
        Metric("probe ack p99 ms, first contact", _probe_ack("first contact"), 1),
        Metric("probe ack p99 ms, steady state", _probe_ack("steady state"), 1),
        Metric("garbage collector CPU s, first contact", _fanout("first contact", "gc_cpu_s"), 2),
        Metric("garbage collector CPU s, steady state", _fanout("steady state", "gc_cpu_s"), 2),
        Metric("simulator CPU s, steady state", _fanout("steady state", "simulator_cpu_s"), 2),
        Metric("fan-out peak RSS MB", _fanout_rss, 0),
    ]
    for b in backends:
        rows += [
            Metric(f"ingest {b}: acks/s (max rate)", _ingest(b, "max", "acks_per_s"), 0),
            Metric(f"ingest {b}: ack p99 ms (fixed rate)", _ingest(b, "fixed", "latency_ms", "p99"), 1),
            Metric(
                f"ingest {b}: CPU ms/request (max)", _ingest(b, "max", "controller_cpu_ms_per_request"), 3
            ),
            Metric(f"ingest {b}: peak RSS MB", _ingest(b, "", "peak_rss_mb"), 0),
        ]
    return rows


def resolve(ref: str) -> str:
    """The commit `ref` names (a clear error when it names none)."""
    done = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"--compare: {ref!r} names no commit in this repository")
    return done.stdout.strip()


@contextmanager
def checkout(commit: str, parent: Path) -> Iterator[Path]:
    """A detached `git worktree` of `commit` under `parent`, removed afterwards."""
    tree = parent / f"ref-{commit[:12]}"
    subprocess.run(
        ["git", "worktree", "add", "--detach", "--force", str(tree), commit],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    try:
        yield tree
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
        shutil.rmtree(tree, ignore_errors=True)  # its entry went with `remove`; no prune: others untouched


def side_env(tree: Path) -> dict[str, str]:
    """The environment of a run of `tree`'s benchmarks: that tree first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def check_imports(tree: Path) -> None:
    """Fail unless `python -m bench` run in `tree` imports the code of `tree` (not an installed copy)."""
    probe = "import bench, controller, plugins; print(bench.__file__, controller.__file__, plugins.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tree,
        env=side_env(tree),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    stray = [path for path in out if not Path(path).resolve().is_relative_to(tree.resolve())]
    if stray:
        raise SystemExit(f"--compare: the checkout of the ref imports code from elsewhere: {stray}")


def bench_args(args: argparse.Namespace) -> list[str]:
    """The `python -m bench` arguments both sides run with."""
    only = args.only or ["fanout", "ingest"]
    out = [arg for name in only for arg in ("--only", name)]
    if args.quick:
        out.append("--quick")
    backends = args.backends and ",".join(args.backends)
    sizes = args.sizes and ",".join(str(n) for n in args.sizes)
    values = {
        "--sizes": sizes or (None if args.quick else DEFAULT_SIZES),
        "--latency": None if args.latency is None else str(args.latency),
        "--backends": backends or DEFAULT_BACKENDS,
        "--ingest-requests": None if args.ingest_requests is None else str(args.ingest_requests),
        "--ingest-max-requests": None if args.ingest_max_requests is None else str(args.ingest_max_requests),
        "--controller-log-level": args.controller_log_level,
    }
    if not args.quick:
        values["--latency"] = values["--latency"] or DEFAULT_LATENCY
        values["--ingest-requests"] = values["--ingest-requests"] or DEFAULT_INGEST_REQUESTS
        values["--ingest-max-requests"] = values["--ingest-max-requests"] or DEFAULT_INGEST_MAX_REQUESTS
    for flag, value in values.items():
        if value is not None:
            out += [flag, value]
    return [*out, "--no-baseline"]


def probe_args(args: argparse.Namespace, tree: Path) -> list[str]:
    """`--no-probes` for a side whose benchmark takes it, when asked for; a side whose benchmark
    sends probes and cannot be told not to is named (its CPU then includes their acks)."""
    if not getattr(args, "no_probes", False):
        return []
    if "--no-probes" in (tree / "bench" / "__main__.py").read_text():
        return ["--no-probes"]
    fanout = tree / "bench" / "fanout.py"
    if fanout.exists() and "prober" in fanout.read_text():
        say(f"compare: {tree} sends ack probes and has no --no-probes: its CPU includes their acks")
    return []


def run_side(tree: Path, argv: list[str], out: Path) -> dict[str, Any]:
    """One run of `tree`'s benchmarks; its results JSON (plus the load average around it)."""
    out.mkdir(parents=True, exist_ok=True)
    files = [
        *("--results", str(out / "results.json"), "--markdown", str(out / "BENCHMARKS.md")),
        *("--plot", str(out / "fanout.png"), "--workdir", str(out / "work")),
    ]
    before = os.getloadavg()[0]
    with (out / "bench.log").open("w") as log:
        done = subprocess.run(
            [sys.executable, "-m", "bench", *argv, *files],
            cwd=tree,
            env=side_env(tree),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    if done.returncode != 0:
        raise SystemExit(f"--compare: the benchmark run in {tree} failed; see {out / 'bench.log'}")
    results: dict[str, Any] = json.loads((out / "results.json").read_text())
    shutil.rmtree(out / "work", ignore_errors=True)  # databases and logs of the run: large, not needed
    results["load"] = [round(before, 2), round(os.getloadavg()[0], 2)]
    return results


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def table(ref: str, runs: dict[str, list[dict[str, Any]]], rows: list[Metric]) -> list[list[str]]:
    """Rows of [metric, ref median (each round), working tree median (each round), ratio]."""
    out = [["metric", ref, "working tree", "tree ÷ ref"]]
    for metric in rows:
        cells = [metric.label]
        medians = []
        for side in ("ref", "tree"):
            values = [metric.read(r) for r in runs[side]]
            med = _median(values)
            medians.append(med)
            each = ", ".join("-" if v is None else f"{v:.{metric.digits}f}" for v in values)
            cells.append(
                "-" if med is None else f"{med:.{metric.digits}f} ({each})" if len(values) > 1 else each
            )
        a, b = medians
        cells.append(f"{b / a:.2f}" if a and b is not None else "-")
        out.append(cells)
    return out


def render(rows: list[list[str]]) -> str:
    """A plain-text table (aligned columns, no wider than its content)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown(rows: list[list[str]]) -> str:
    """The same table in Markdown (for BENCHMARKS.md)."""
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(lines)


def check_plotting() -> None:
    """Fail at once, in one line, unless matplotlib imports: a ref's benchmark (2bbb083's, for one)
    draws its plot with it after every run and fails there without it."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit(
            "--compare: matplotlib is not installed, and a ref's benchmark needs it to write its report:"
            " make bench (or pip install -e '.[bench]')"
        ) from None


def compare(args: argparse.Namespace) -> int:
    """Run the comparison (see the module docstring); prints the table and writes it as JSON."""
    check_plotting()
    commit = resolve(args.compare)
    label = f"{args.compare} ({commit[:7]})" if not commit.startswith(args.compare) else commit[:7]
    argv = bench_args(args)
    rounds = max(1, args.rounds)
    out_dir = args.compare_out or ROOT / "bench" / "out" / "compare"
    if out_dir.exists():
        shutil.rmtree(out_dir)
    runs: dict[str, list[dict[str, Any]]] = {"ref": [], "tree": []}
    with (
        tempfile.TemporaryDirectory(prefix="devicectl-compare-") as scratch,
        checkout(commit, Path(scratch)) as ref,
    ):
        check_imports(ref)
        check_imports(ROOT)
        trees = {"ref": ref, "tree": ROOT}
        argvs = {side: argv + probe_args(args, tree) for side, tree in trees.items()}
        for n in range(rounds):
            order = ("ref", "tree") if n % 2 == 0 else ("tree", "ref")
            for side in order:
                say(f"compare: round {n + 1}/{rounds}, {label if side == 'ref' else 'working tree'}")
                result = run_side(trees[side], argvs[side], out_dir / f"round{n + 1}-{side}")
                say(f"compare: load average {result['load'][0]} before, {result['load'][1]} after")
                runs[side].append(result)
    backends = (
        [] if args.only and "ingest" not in args.only else (args.backends or DEFAULT_BACKENDS.split(","))
    )
    rows = table(label, runs, metrics(backends))
    text = render(rows)
    print(text, flush=True)
    loads = {side: [r["load"] for r in rs] for side, rs in runs.items()}
    summary = {"ref": label, "commit": commit, "args": argvs, "rounds": rounds, "table": rows, "load": loads}
    (out_dir / "compare.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out_dir / "compare.md").write_text(markdown(rows) + "\n")
    say(f"compare: 1-minute load average before/after each run: {loads}")
    say(f"compare: wrote {out_dir / 'compare.json'} and {out_dir / 'compare.md'}")
    return 0
