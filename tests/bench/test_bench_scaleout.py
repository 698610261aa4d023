"""The scale-out benchmark at tiny size: with one and two controller processes on one PostgreSQL it
must have measured real work — every response once, the simulators' counts — not the targets."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.fanout_plan import EXPECTED_WRITES
from bench.scaleout import QUICK, run_scaleout
from bench.scaleout_report import markdown
from tests.bench.conftest import require_postgres

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(300)]


async def test_scaleout_measures_every_response_once_at_one_and_two_processes(tmp_path: Path) -> None:
    require_postgres()
    result = await run_scaleout(QUICK, tmp_path)
    ingest, fanout = result["ingest"], result["fanout"]
    assert [r["processes"] for r in ingest] == [1, 2]
    for row in ingest:
        assert row["problems"] == [], row
        assert (
            row["acked"]
            == row["responses"]
            == row["requests"]
            == QUICK.requests // row["processes"] * row["processes"]
        )
        assert (row["failures"], row["duplicates"], row["unexpected"]) == (0, 0, 0)
        assert len(row["controller_cpu_s_each"]) == row["processes"]
        assert all(c > 0 for c in row["controller_cpu_s_each"]), "every process did work"
        assert sorted(row["shards_per_process"].values()) == sorted(
            [256 // row["processes"]] * row["processes"]
        )
    assert ingest[0]["efficiency"] == 1.0 and ingest[1]["efficiency"] > 0
    assert [(r["processes"], r["phase"]) for r in fanout] == [
        (1, "first contact"), (1, "steady state"), (2, "first contact"), (2, "steady state")
    ]  # fmt: skip
    for row in fanout:
        assert row["problems"] == [], row
        assert row["responses"] == QUICK.bmcs and row["failures"] == 0 and row["duplicates"] == 0
        assert row["writes_per_bmc"] == [EXPECTED_WRITES, EXPECTED_WRITES]
        assert row["max_in_flight_per_bmc"] <= QUICK.per_bmc and row["bmcs_two_controllers"] == 0
        assert row["elapsed"] >= row["floor"] > 0 and row["cpu_ms_per_call"] > 0
    report = markdown([result])
    assert "| any CPU | 2 | steady state |" in report
    assert "| requests run and delivered |" in report and "64 cores" in report
