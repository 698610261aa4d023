"""Markdown tables from a drills result, for docs/reliability.md.

python -m drills.report var/drills/result.json
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

COLUMNS: dict[str, tuple[str, ...]] = {
    "crash": (
        "backend", "kills", "acked", "responses", "lost", "stuck", "duplicates", "duplicates_max_per_kill",
        "duplicates_unexplained", "kills_during_backlog",
        "order_violations", "failed", "failed_on_session_table", "caps_checked", "caps_unknown", "caps_wrong",
        "sessions_open_max_per_bmc", "bmcs_at_session_limit", "bmcs_that_refused_a_login", "drain_s",
        "restart_s_max",
    ),
    "outage": (
        "backend", "outage_s", "acked", "acked_during_outage", "backlog", "responses", "lost", "stuck",
        "duplicates", "order_violations", "first_after_s", "drain_s", "drain_per_s",
    ),
    "dbfaults": (
        "fault", "acked", "responses", "lost", "stuck", "duplicates", "order_violations", "failed",
        "drain_s", "health_during_fault", "tracebacks",
    ),
    "matrix": ("fault", "expected", "response", "answered_s", "neighbours_unharmed", "recovered"),
    "soak": (
        "backend", "duration_s", "rate_per_s", "acked", "lost", "stuck", "order_violations",
        "rss_start_mib", "rss_end_mib", "fds_start", "fds_end",
    ),
    "scaleout": (
        "backend", "processes", "bmcs", "acked", "responses", "lost", "stuck", "duplicates",
        "duplicates_unexplained", "second_completions", "order_violations", "failed", "caps_wrong",
        "shards_moved", "unfinished_at_kill", "moved_s", "moved_limit_s", "max_in_flight_per_bmc",
        "bmcs_two_controllers", "tracebacks", "drain_s",
    ),
}  # fmt: skip


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "**no**"
    if isinstance(value, list):
        return ", ".join(map(str, value))
    text = " ".join(str(value).split()).replace("|", "\\|")
    return text if len(text) <= 110 else text[:109] + "…"


def markdown_table(columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(c.replace("_", " ") for c in columns) + " |"]
    lines.append("|" + "|".join(" --- " for _ in columns) + "|")
    for row in rows:
        if "skipped" in row:
            lines.append(f"| {row.get('backend', '')} | skipped: {row['skipped']} |")
            continue
        lines.append("| " + " | ".join(_cell(row.get(c)) for c in columns) + " |")
    return "\n".join(lines)


def markdown(result: dict[str, Any]) -> str:
    """Every drill of `result` as a titled table, with the problems it found."""
    out = [f"Size: {result['size']}; commit {result.get('commit') or '?'}; started {result['started']}."]
    for name, drill in result["drills"].items():
        out += ["", f"**{name}** ({drill.get('seconds', '?')} s)", ""]
        out.append(markdown_table(COLUMNS.get(name, ("problems",)), drill.get("rows", [])))
        if "overall" in drill:
            overall = drill["overall"]
            out += [
                "",
                markdown_table(
                    ("acked", "responses", "lost", "stuck", "duplicates", "order_violations", "tracebacks"),
                    [overall],
                ),
            ]
        out += [f"- problem: {_cell(p)}" for p in drill.get("problems", [])]
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m drills.report RESULT.json", file=sys.stderr)
        return 2
    try:
        result = json.loads(Path(args[0]).read_text())
    except (OSError, ValueError) as exc:
        print(f"error: cannot read {args[0]}: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
