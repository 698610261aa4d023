"""The cells and lines every section of BENCHMARKS.md shares (`bench.report` and its sections)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def fmt(value: float | None, digits: int = 1, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}{unit}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def run_line(section: Mapping[str, Any]) -> str:
    line = f"Command: `{section.get('command', '?')}` — finished {section.get('finished_at', '?')}"
    if "code" in section:
        line += f", code at {section['code']}"
    if "load_before" in section:
        before, after = section["load_before"][0], section["load_after"][0]
        line += f", 1-minute load average {before:.1f} before and {after:.1f} after"
    return line + "."
