"""`python -m drills [NAME...] [--full]`: run reliability drills, print a table each, write JSON."""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.util import ROOT, jsonable, machine
from drills import crash, dbfaults, matrix, outage, scaleout, soak
from drills.report import COLUMNS, markdown

Runner = Callable[[Any, Path], Awaitable[dict[str, Any]]]

#: name -> (run, reduced sizes, full sizes); the table columns are report.COLUMNS
DRILLS: dict[str, tuple[Runner, Any, Any]] = {
    "crash": (crash.run, crash.REDUCED, crash.FULL),
    "outage": (outage.run, outage.REDUCED, outage.FULL),
    "dbfaults": (dbfaults.run, dbfaults.REDUCED, dbfaults.FULL),
    "matrix": (matrix.run, matrix.REDUCED, matrix.FULL),
    "soak": (soak.run, soak.REDUCED, soak.FULL),
    "scaleout": (scaleout.run, scaleout.REDUCED, scaleout.FULL),
}


def problems(result: dict[str, Any]) -> list[str]:
    """Everything a drill found wrong (empty: it held)."""
    found = [f"{_label(row)}: {p}" for row in result.get("rows", []) for p in row.get("problems", [])]
    if "error" in result:
        found.append(f"the drill could not finish: {result['error']}")
    if "overall" in result:
        found += [f"overall: {p}" for p in result["overall"]["problems"]]
    return found


def _label(row: dict[str, Any]) -> str:
    return str(row.get("fault") or row.get("backend") or "")


def _cell(value: Any, width: int = 60) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, list):
        value = ",".join(map(str, value))
    text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def table(title: str, columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> str:
    """A plain-text table (the same text goes to a terminal or a CI log)."""
    shown = [row for row in rows if "skipped" not in row]
    cells = [[_cell(row.get(c)) for c in columns] for row in shown]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    lines = [title, "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    lines += [f"{_label(row)}: skipped ({row['skipped']})" for row in rows if "skipped" in row]
    return "\n".join(lines)


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


async def run(names: Sequence[str], *, full: bool, workdir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {
        "size": "full" if full else "reduced",
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": _commit(),
        "machine": machine(),
        "drills": {},
    }
    for name in names:
        runner, reduced, full_size = DRILLS[name]
        began = time.monotonic()
        shutil.rmtree(workdir / name, ignore_errors=True)  # only what an earlier run of this drill left
        print(f"== {name} ({'full' if full else 'reduced'}) ...", flush=True)
        try:
            result = await runner(full_size if full else reduced, workdir / name)
        except Exception as exc:  # a drill that cannot finish is a finding, not the end of the run
            first = (str(exc).strip().splitlines() or [""])[0]
            result = {"drill": name, "rows": [], "error": f"{type(exc).__name__}: {first}"}
        result["seconds"] = round(time.monotonic() - began, 1)
        result["problems"] = problems(result)
        out["drills"][name] = result
        print(table(f"{name}: {result['seconds']} s", COLUMNS[name], result.get("rows", [])), flush=True)
        if "overall" in result:
            print(table("  overall", ("acked", "responses", "lost", "stuck", "duplicates",
                                      "order_violations", "tracebacks"), [result["overall"]]))  # fmt: skip
        for problem in result["problems"]:
            print(f"  PROBLEM {problem}", flush=True)
    out["ok"] = not any(d["problems"] for d in out["drills"].values())
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m drills", description=__doc__)
    p.add_argument(
        "names", nargs="*", metavar="NAME", help=f"drills to run (default all): {', '.join(DRILLS)}"
    )
    p.add_argument("--full", action="store_true", help="full sizes (default: the reduced sizes CI runs)")
    p.add_argument("--out", type=Path, default=ROOT / "var" / "drills" / "result.json", help="JSON result")
    p.add_argument("--workdir", type=Path, default=ROOT / "var" / "drills" / "runs", help="logs, databases")
    p.add_argument("--markdown", action="store_true", help="also print the tables as Markdown")
    args = p.parse_args(argv)
    unknown = [n for n in args.names if n not in DRILLS]
    if unknown:
        p.error(f"unknown drill(s) {', '.join(unknown)}; choose from {', '.join(DRILLS)}")
    args.workdir.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(run(args.names or list(DRILLS), full=args.full, workdir=args.workdir))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(jsonable(result), indent=2) + "\n")
    if args.markdown:
        print(markdown(jsonable(result)))
    print(f"{'all drills held' if result['ok'] else 'PROBLEMS found'}; result in {args.out}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
