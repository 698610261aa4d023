"""BENCHMARKS.md and the fan-out plot, from the results of the latest run of each benchmark.

The generated part of BENCHMARKS.md sits between two markers and is rewritten on every run; text
after the end marker (analysis, profiling notes) is kept as it is.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.report_cells import fmt, run_line, table
from bench.report_fanout import fanout_section, layouts_of
from bench.report_fanout import plot_fanout as plot_fanout  # `python -m bench` calls it here

BEGIN = "<!-- BEGIN GENERATED: python -m bench rewrites everything up to the END marker -->"
END = "<!-- END GENERATED -->"

#: the numbers the issue asks for on this 2-core machine (the benchmark reports them, never asserts)
ACKS_SQLITE, ACKS_POSTGRES, ACK_P99_MS, FIXED_RATE = 3000.0, 2000.0, 20.0, 1000.0
FANOUT_N, FLOOR_RATIO, SPEEDUP, CPU_MS_PER_CALL, RSS_MB = 2000, 1.5, 5.0, 0.5, 400.0


def _met(ok: bool | None) -> str:
    return "not measured" if ok is None else ("**met**" if ok else "**missed**")


# ---- targets ----------------------------------------------------------------------------------


def _fanout_size(results: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The fan-out run at 2,000 BMCs (or the largest size above it)."""
    sizes = [s for s in results.get("fanout", {}).get("result", {}).get("sizes", []) if s["n"] >= FANOUT_N]
    return min(sizes, key=lambda s: s["n"]) if sizes else None


def targets(results: Mapping[str, Any]) -> list[tuple[str, str, bool | None]]:
    """(target, measured, met) for every target of the issue; met is None when not measured."""
    rows: list[tuple[str, str, bool | None]] = []
    backends = results.get("ingest", {}).get("result", {}).get("backends", {})
    for name, goal in (("sqlite", ACKS_SQLITE), ("postgres", ACKS_POSTGRES)):
        run = backends.get(name, {})
        value = run.get("max", {}).get("acks_per_s")
        rows.append(
            (
                f"Ingest, {name}: ≥ {goal:,.0f} durable acks/s",
                fmt(value, 0, " acks/s"),
                None if value is None else value >= goal,
            )
        )
    for name in ("sqlite", "postgres"):
        fixed = backends.get(name, {}).get("fixed", {})
        p99 = fixed.get("latency_ms", {}).get("p99")
        offered = fixed.get("offered_rate")
        measured = None if p99 is None else f"{p99:,.1f} ms at {offered:,.0f} req/s"
        ok = None if p99 is None or offered != FIXED_RATE else p99 <= ACK_P99_MS
        rows.append(
            (f"Ack p99 ≤ {ACK_P99_MS:.0f} ms at {FIXED_RATE:,.0f} req/s, {name}", measured or "-", ok)
        )
    size = _fanout_size(results)
    phases = size.get("phases", []) if size else []
    for phase in phases:
        where = f"{size['n'] if size else '?'} BMCs, {phase['phase']}"
        rows.append(
            (
                f"Fan-out within {FLOOR_RATIO}x of the floor ({where})",
                f"{phase['ratio_to_floor']:.1f}x ({phase['elapsed']:.1f} s vs {phase['floor']:.2f} s)",
                phase["ratio_to_floor"] <= FLOOR_RATIO,
            )
        )
        if "speedup" in phase:
            rows.append(
                (
                    f"Fan-out ≥ {SPEEDUP:.0f}x faster than the synchronous baseline ({where})",
                    f"{phase['speedup']:.2f}x",
                    phase["speedup"] >= SPEEDUP,
                )
            )
        rows.append(
            (
                f"Controller CPU ≤ {CPU_MS_PER_CALL} ms per BMC HTTP call ({where})",
                f"{phase['cpu_ms_per_call']:.2f} ms",
                phase["cpu_ms_per_call"] <= CPU_MS_PER_CALL,
            )
        )
    if size:
        rows.append(
            (
                f"Controller peak RSS ≤ {RSS_MB:.0f} MB ({size['n']} BMCs in flight)",
                f"{size['peak_rss_mb']:.0f} MB",
                size["peak_rss_mb"] <= RSS_MB,
            )
        )
    else:
        rows.append((f"Fan-out at {FANOUT_N:,} BMCs (floor, baseline, CPU, RSS)", "-", None))
    return rows


# ---- sections ---------------------------------------------------------------------------------


def _machine(results: Mapping[str, Any]) -> list[str]:
    m = results.get("machine", {})
    rows = [
        ["CPU", f"{m.get('cores', '?')} cores, {m.get('cpu', '?')}"],
        ["memory", f"{m.get('memory_gib', '?')} GiB"],
        ["OS", str(m.get("os", "?"))],
        ["Python", str(m.get("python", "?"))],
        ["SQLite", str(m.get("sqlite", "?"))],
        ["PostgreSQL", str(m.get("postgres") or "-")],
        ["open files limit", str(m.get("fd_limit", "?"))],
    ]
    return [
        "## Machine",
        "",
        *table(["", ""], rows),
        "",
        f"Everything runs on these {m.get('cores', '?')} cores at once: the controller, the BMC simulators, "
        "the load generator, the baseline's client and the topology sink. CPU and memory figures are the "
        "controller's own (its process, read from /proc); wall-clock figures include the contention.",
    ]


def _ingest(section: Mapping[str, Any]) -> list[str]:
    result = section["result"]
    cfg = result["config"]
    lines = [
        "## 1. Ingest",
        "",
        run_line(section),
        "",
        f"No-op plugin (`bench.noop_plugin`), {cfg['devices']:,} devices, ping requests round robin; the "
        "load "
        "generator (`bench.loadgen`) is a separate process with one gRPC channel. *Fixed*: "
        f"{cfg['fixed_requests']:,} requests offered at {cfg['rate']:,.0f}/s (open loop). *Max*: "
        f"{cfg['max_requests']:,} requests, {cfg['concurrency']} in flight. An ack means the request is "
        "committed to the journal (SQLite `synchronous=FULL`; PostgreSQL default `synchronous_commit=on`). "
        "Responses/s: measured requests ÷ (last measured response at the sink - first send). *Refused*: "
        "requests the controller's gRPC server answered with CANCELLED (its pending-request limit sheds "
        "load it cannot pick up in time); they never reached the journal and are owed no response.",
        "",
    ]
    rows = []
    for backend, run in result["backends"].items():
        if "skipped" in run:
            rows.append([backend, "skipped", run["skipped"], *["-"] * 8])
            continue
        for key in ("fixed", "max"):
            s = run[key]
            lat = s["latency_ms"]
            offered = (
                f"{s['offered_rate']:,.0f}/s" if s["offered_rate"] else f"max ({s['concurrency']} in flight)"
            )
            rows.append(
                [
                    backend,
                    offered,
                    fmt(s["acks_per_s"], 0),
                    str(s.get("refused", 0)),
                    fmt(lat["p50"], 1),
                    fmt(lat["p99"], 1),
                    fmt(lat["max"], 1),
                    fmt(s["responses_per_s"], 0),
                    fmt(s["controller_cpu_ms_per_request"], 2),
                    f"{run['peak_rss_mb']:.0f}",
                    "ok" if not (s["failures"] or s["duplicates"] or s["unexpected"]) else "**problems**",
                ]
            )
    lines += table(
        [
            "backend",
            "offered",
            "acks/s",
            "refused",
            "ack p50 ms",
            "ack p99 ms",
            "ack max ms",
            "responses/s",
            "controller CPU ms/request",
            "peak RSS MB",
            "every response once",
        ],
        rows,
    )
    return lines


def _recovery(section: Mapping[str, Any]) -> list[str]:
    result = section["result"]
    cfg = result["config"]
    lines = [
        "## 3. Recovery",
        "",
        run_line(section),
        "",
        f"{cfg['requests']:,} requests for {cfg['devices']:,} no-op devices journaled and acknowledged by a "
        "controller whose devices hold every request (none answered), which is then killed with SIGKILL. A "
        "new controller process on the same database answers them. Times are from spawning the new process; "
        "it claims and queues the unfinished requests before it starts serving.",
        "",
    ]
    rows = []
    for backend, run in result["backends"].items():
        if "skipped" in run:
            rows.append([backend, "skipped: " + run["skipped"], "-", "-", "-", "-", "-"])
            continue
        rows.append(
            [
                backend,
                f"{run['requests']:,}",
                fmt(run["serving_s"], 2),
                fmt(run["first_response_s"], 2),
                fmt(run["all_responses_s"], 1),
                fmt(run["responses_per_s"], 0),
                "ok" if not run["problems"] else "**problems**",
            ]
        )
    lines += table(
        ["backend", "journaled", "serving s", "first response s", "all responses s", "responses/s", "checks"],
        rows,
    )
    return lines


def _problems(results: Mapping[str, Any]) -> list[str]:
    found = []
    fan = results.get("fanout", {}).get("result", {})
    for failed in fan.get("failed_sizes", []):
        found.append(f"fan-out {failed['n']}: the run failed: {failed['error'][:200]}")
    for size in fan.get("sizes", []):
        for layout in layouts_of(size):
            for phase in layout["phases"]:
                for p in phase["problems"]:
                    where = f"{layout.get('layout', 'one process')} {phase['phase']}"
                    found.append(f"fan-out {size['n']} {where}: {p}")
        for phase in size.get("baseline", []):
            for p in phase["problems"]:
                found.append(f"fan-out {size['n']} baseline {phase['phase']}: {p}")
    rec = results.get("recovery", {}).get("result", {})
    for backend, run in rec.get("backends", {}).items():
        for p in run.get("problems", []):
            found.append(f"recovery {backend}: {p}")
    ing = results.get("ingest", {}).get("result", {})
    for backend, run in ing.get("backends", {}).items():
        for key in ("fixed", "max"):
            s = run.get(key)
            if s and (s["failures"] or s["duplicates"] or s["unexpected"]):
                found.append(f"ingest {backend} {key}: {s['failures']} failed, {s['duplicates']} duplicates")
    return found


def markdown(results: Mapping[str, Any], plot: str) -> str:
    """The generated part of BENCHMARKS.md (between the markers)."""
    m = results.get("machine", {})
    lines = [
        BEGIN,
        "",
        "# Benchmarks",
        "",
        f"Measured on commit {m.get('commit', 'unknown')} at {m.get('measured_at', 'an unrecorded time')}.",
        "",
        "Produced by `make bench` (= `.venv/bin/python -m bench`); `python -m bench --help` lists the sizes "
        "and options, `--only ingest|fanout|recovery` reruns one benchmark (the others' results are kept), "
        "`--quick` runs tiny sizes into `bench/out/quick/` (what the tests do), `make bench COMPARE=REF` "
        "(`--compare REF`) runs fan-out and ingest for a git ref and the working tree, alternating, and "
        'prints the ratios (section "Against the previous release" below). Raw results: '
        "`bench/results.json`. The benchmarks report; they never assert the targets.",
        "",
        *_machine(results),
        "",
        "## Targets",
        "",
        *table(["target", "measured", ""], [[t, m, _met(ok)] for t, m, ok in targets(results)]),
        "",
    ]
    if "ingest" in results:
        lines += [*_ingest(results["ingest"]), ""]
    if "fanout" in results:
        lines += [*fanout_section(results["fanout"], plot), ""]
    if "recovery" in results:
        lines += [*_recovery(results["recovery"]), ""]
    problems = _problems(results)
    lines += [
        "## Self-checks",
        "",
        "Each run checks that it measured the intended work: every response arrived exactly once and "
        "reported success, the simulators counted 8 cap writes on every BMC in every phase, no BMC saw more "
        "calls in flight than the per-BMC limit, and no time beat its floor.",
        "",
        *(["All passed."] if not problems else [f"- {p}" for p in problems]),
        "",
        END,
    ]
    return "\n".join(lines) + "\n"


def write_markdown(results: Mapping[str, Any], path: Path, plot_path: Path) -> None:
    """Rewrite the generated part of `path`, keeping whatever follows the end marker."""
    plot = os.path.relpath(plot_path, path.parent)
    tail = ""
    if path.exists():
        text = path.read_text()
        if END in text:
            tail = text.split(END, 1)[1].lstrip("\n")
    body = markdown(results, plot)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body + ("\n" + tail if tail else ""))
