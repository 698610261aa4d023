"""Drills that fail on today's code because of a defect being fixed.

Skipped unless DRILLS_PENDING=1; once the fixes land, run them and move each passing test into
test_drills.py:

    DRILLS_PENDING=1 .venv/bin/python -m pytest tests/drills/test_drills_pending.py -q
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.drills.checks import PENDING_ROWS

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.environ.get("DRILLS_PENDING"), reason="known defects; set DRILLS_PENDING=1"),
]


def test_bmc_fault_matrix_pending_rows(matrix_result: dict[str, Any]) -> None:
    """Issue 9 item 13: after the BMC's session table was full, the plugin must log in again."""
    rows = {r["fault"]: r for r in matrix_result["rows"]}
    failing = {name: rows[name]["problems"] for name in PENDING_ROWS if rows[name]["problems"]}
    assert not failing, failing
