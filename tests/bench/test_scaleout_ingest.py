"""The ack-path benchmark (`bench.scaleout_ingest`) at tiny size: it measured real work — every
request acknowledged by the front end and answered once by its executors, the front end's own
CPU and its server-side ack histogram counted — never the performance target."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bench.ingest import QUICK_INGEST
from bench.scaleout_ingest import markdown_rows, run
from tests.bench.conftest import require_postgres


@pytest.mark.postgres
@pytest.mark.timeout(300)
async def test_ack_path_benchmark_counts_every_ack_and_response(tmp_path: Path) -> None:
    require_postgres()
    config = replace(QUICK_INGEST, backends=("postgres",), fixed_requests=80, devices=20, warmup=10)
    result = await run([1], config, tmp_path)
    (label,) = result["layouts"]
    r = result["layouts"][label]
    assert label == "--workers 1"
    assert r["acked"] == r["responses"] == 80
    assert (r["failures"], r["duplicates"], r["unexpected"], r["refused"]) == (0, 0, 0, 0)
    # the front end's histogram saw exactly the acks sent to it (warm-up included)
    assert r["server_side"]["acks"] == 80 + config.warmup
    assert r["server_side"]["p50_at_most_ms"] <= r["server_side"]["p99_at_most_ms"]
    # the tree's CPU includes the executor's: more than the front end's alone
    assert 0 < r["front_cpu_ms_per_request"] < r["controller_cpu_ms_per_request"]
    assert markdown_rows(result)[2].startswith("| --workers 1 | 200/s | ")
