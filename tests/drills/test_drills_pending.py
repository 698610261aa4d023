"""Drills that fail on today's code because of defects being fixed (issue 9 "Acks not kept").

Skipped unless DRILLS_PENDING=1; once the fixes land, run them and move each passing test into
test_drills.py:

    DRILLS_PENDING=1 .venv/bin/python -m pytest tests/drills/test_drills_pending.py -q
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from drills import dbfaults
from tests.drills.checks import PENDING_ROWS, held

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.environ.get("DRILLS_PENDING"), reason="known defects; set DRILLS_PENDING=1"),
]


@pytest.mark.postgres
@pytest.mark.timeout(300)
@pytest.mark.parametrize("fault", ["refuse", "lock"])
async def test_postgres_outage_and_table_lock_lose_nothing(
    pg_database: Any, tmp_path: Path, fault: str
) -> None:
    """Issue 9 items 4 and 6: after the database comes back, delivery must resume by itself."""
    url = pg_database.render_as_string(hide_password=False)
    (row,) = await dbfaults.postgres_rows(dbfaults.REDUCED, url, tmp_path, which=(fault,))
    held(row)
    if fault == "refuse":
        assert "NOT_SERVING" in row["health_during_fault"], "health must say the journal cannot commit"


def test_bmc_fault_matrix_pending_rows(matrix_result: dict[str, Any]) -> None:
    """Issue 9 item 13: after the BMC's session table was full, the plugin must log in again."""
    rows = {r["fault"]: r for r in matrix_result["rows"]}
    failing = {name: rows[name]["problems"] for name in PENDING_ROWS if rows[name]["problems"]}
    assert not failing, failing
