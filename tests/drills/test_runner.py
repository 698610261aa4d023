"""The drills command line and its report, without starting any drill."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from drills.__main__ import problems, table
from drills.report import markdown

ROOT = Path(__file__).resolve().parents[2]

RESULT = {
    "size": "reduced",
    "commit": "abc1234",
    "started": "2026-01-01T00:00:00+00:00",
    "drills": {
        "crash": {
            "seconds": 1.0,
            "problems": ["sqlite: 1 stuck"],
            "rows": [
                {
                    "backend": "sqlite",
                    "kills": 20,
                    "acked": 5,
                    "lost": 0,
                    "stuck": 1,
                    "problems": ["1 stuck"],
                },
                {"backend": "postgres", "skipped": "PostgreSQL unreachable: refused", "problems": []},
            ],
        },
        "matrix": {
            "rows": [{"fault": "hang | reset", "response": "error: x", "recovered": False, "problems": []}],
            "overall": {"acked": 2, "problems": ["1 lost"]},
        },
    },
}


def test_unknown_drill_is_one_line_error_not_a_traceback() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "drills", "no-such-drill"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "unknown drill(s) no-such-drill; choose from crash, outage, dbfaults, matrix, soak" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_problems_name_their_row_and_the_overall_verdict() -> None:
    assert problems(RESULT["drills"]["crash"]) == ["sqlite: 1 stuck"]
    assert problems(RESULT["drills"]["matrix"]) == ["overall: 1 lost"]
    assert problems({"rows": [], "error": "TimeoutError: x"}) == [
        "the drill could not finish: TimeoutError: x"
    ]


def test_tables_show_skips_and_escape_markdown() -> None:
    text = table("crash", ("backend", "kills", "stuck"), RESULT["drills"]["crash"]["rows"])
    assert text.splitlines()[3].split() == ["sqlite", "20", "1"]
    assert "PostgreSQL unreachable" in text
    md = markdown(RESULT)
    assert "| sqlite | 20 | 5 | - | 0 | 1 |" in md
    assert "| postgres | skipped: PostgreSQL unreachable: refused |" in md
    assert "hang \\| reset" in md and "**no**" in md
    assert "- problem: sqlite: 1 stuck" in md
