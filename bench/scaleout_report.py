"""Markdown tables for the "Scale-out" section of BENCHMARKS.md, from `python -m bench.scaleout` results.

    python -m bench.scaleout_report bench/out/scaleout/results.json [MORE.json ...]

Projection to C cores (one controller process per core, the BMCs, load and PostgreSQL elsewhere):
throughput(C) = C x (work per controller CPU-second at 1 process) x efficiency, with the efficiency
measured at the most processes run held for all C processes. That is optimistic: the table also
gives the loss per added process, which, if it continued, would make C processes no faster.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CORES = (16, 64)


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _checks(row: dict[str, Any]) -> str:
    return "ok" if not row.get("problems") else "; ".join(row["problems"])


def ingest_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    header = [
        "processes",
        "requests",
        "acks/s",
        "responses/s",
        "ack p99 ms",
        "controller CPU s (each)",
        "CPU ms/request",
        "requests per CPU-s",
        "efficiency",
        "checks",
    ]
    body = [
        [
            str(r["processes"]),
            f"{r['requests']:,}",
            _f(r["acks_per_s"], 0),
            _f(r["responses_per_s"], 0),
            _f(r["ack_p99_ms"], 0),
            f"{r['controller_cpu_s']:.1f} ({', '.join(f'{c:.1f}' for c in r['controller_cpu_s_each'])})",
            _f(r["controller_cpu_ms_per_request"], 2),
            _f(r["responses_per_cpu_s"], 0),
            _f(r["efficiency"], 2),
            _checks(r),
        ]
        for r in rows
    ]
    return _table(header, body)


def fanout_table(rows: Sequence[dict[str, Any]], latency: float, pinned: Sequence[int]) -> list[str]:
    header = [
        "BMCs",
        "latency s",
        "simulators",
        "processes",
        "phase",
        "floor s",
        "time s",
        "÷ floor",
        "controller CPU s",
        "CPU ms/BMC call",
        "calls per CPU-s",
        "efficiency",
        "simulator CPU s",
        "max in flight/BMC",
        "BMCs with 2 controllers",
        "checks",
    ]
    where = f"CPU {','.join(map(str, pinned))}" if pinned else "any CPU"
    body = [
        [
            f"{r['bmcs']:,}",
            f"{latency:g}",
            where,
            str(r["processes"]),
            r["phase"],
            _f(r["floor"], 2),
            _f(r["elapsed"], 2),
            f"{r['ratio_to_floor']:.1f}x",
            _f(r["controller_cpu_s"], 1),
            _f(r["cpu_ms_per_call"], 2),
            _f(r["calls_per_cpu_s"], 0),
            _f(r["efficiency"], 2),
            _f(r["simulator_cpu_s"], 1),
            str(r["max_in_flight_per_bmc"]),
            str(r["bmcs_two_controllers"]),
            _checks(r),
        ]
        for r in rows
    ]
    return _table(header, body)


def projection(rows: Sequence[dict[str, Any]], key: str) -> dict[str, Any] | None:
    """Work per second on `CORES` cores from measured rows (see the module docstring)."""
    measured = sorted((r for r in rows if r.get("efficiency") is not None), key=lambda r: r["processes"])
    if len(measured) < 2 or measured[0]["processes"] != 1:
        return None
    base, last = measured[0][key], measured[-1]
    loss = (1.0 - last["efficiency"]) / (last["processes"] - 1)
    out: dict[str, Any] = {
        "per_cpu_s_at_1": base,
        "measured_up_to": last["processes"],
        "efficiency": last["efficiency"],
        "loss": loss,
    }
    for cores in CORES:
        out[str(cores)] = cores * base * last["efficiency"]
    return out


def projection_table(named: Sequence[tuple[str, dict[str, Any] | None, str]]) -> list[str]:
    header = ["work", "per controller CPU-s, 1 process", "efficiency (processes)", "loss per added process"]
    header += [f"{c} cores" for c in CORES]
    body = []
    for name, p, unit in named:
        if p is None:
            continue
        cells = [
            name,
            f"{p['per_cpu_s_at_1']:,.0f} {unit}",
            f"{p['efficiency']:.2f} ({p['measured_up_to']})",
            f"{p['loss'] * 100:.1f}%",
        ]
        cells += [f"{p[str(c)]:,.0f} {unit}/s" for c in CORES]
        body.append(cells)
    return _table(header, body)


def markdown(results: Sequence[dict[str, Any]]) -> str:
    lines: list[str] = []
    for result in results:
        config = result["config"]
        if result.get("ingest"):
            ingest = result["ingest"]
            lines += [
                f"Ingest, {config['devices']:,} no-op devices, max rate, {config['concurrency']} in flight "
                "over all front doors:",
                "",
                *ingest_table(ingest),
                "",
            ]
            work = projection(ingest, "responses_per_cpu_s")
            lines += [*projection_table([("requests run and delivered", work, "req")]), ""]
        if result.get("fanout"):
            fanout = result["fanout"]
            lines += [*fanout_table(fanout, config["latency"], config["pin_simulators"]), ""]
            named = []
            for phase in ("first contact", "steady state"):
                rows = [r for r in fanout if r["phase"] == phase]
                named.append((f"BMC calls, {phase}", projection(rows, "calls_per_cpu_s"), "calls"))
            lines += [*projection_table(named), ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    paths = list(argv if argv is not None else sys.argv[1:])
    if not paths:
        print("usage: python -m bench.scaleout_report RESULTS.json [...]", file=sys.stderr)
        return 2
    print(markdown([json.loads(Path(p).read_text()) for p in paths]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
