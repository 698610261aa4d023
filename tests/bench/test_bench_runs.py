"""Each benchmark at tiny size: it must have measured real work, checked by what arrived at the
topology sink and by what the BMC simulators counted — never by the performance targets."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bench.__main__ import main
from bench.fanout import run_fanout
from bench.fanout_plan import EXPECTED_WRITES, QUICK_FANOUT
from bench.ingest import QUICK_INGEST, run_ingest
from bench.recovery import QUICK_RECOVERY, run_recovery
from tests.bench.conftest import require_postgres

#: what discovery reads on first contact to choose the processor modules by evidence
CHASSIS_EVIDENCE = {"GET /redfish/v1/Chassis/{id}", "GET /redfish/v1/Chassis/{id}/EnvironmentMetrics"}
LOGIN_AND_LOGOUT = {
    "POST /redfish/v1/SessionService/Sessions",
    "DELETE /redfish/v1/SessionService/Sessions/{id}",
    "GET /redfish/v1",  # the synchronous client reads the service root before logging in
    # devicectl looks for sessions an earlier process of it left (the list, and each session)
    "GET /redfish/v1/SessionService/Sessions",
    "GET /redfish/v1/SessionService/Sessions/{id}",
}


def _check_ingest_scenario(s: dict[str, Any], requests: int) -> None:
    assert s["acked"] == s["responses"] == requests
    assert (s["failures"], s["duplicates"], s["unexpected"]) == (0, 0, 0)
    assert s["acks_per_s"] > 0 and s["responses_per_s"] > 0
    lat = s["latency_ms"]
    assert 0 < lat["p50"] <= lat["p99"] <= lat["max"]
    assert s["controller_cpu_s"] > 0


@pytest.mark.parametrize(
    "backend", ["sqlite", "sqlite+agent", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_ingest_measures_acks_and_delivered_responses(tmp_path: Path, backend: str) -> None:
    if backend == "postgres":
        require_postgres()
    config = replace(QUICK_INGEST, backends=(backend,), fixed_requests=60, max_requests=150)
    result = await run_ingest(config, tmp_path)
    run = result["backends"][backend]
    _check_ingest_scenario(run["fixed"], 60)
    _check_ingest_scenario(run["max"], 150)
    assert run["fixed"]["offered_rate"] == config.rate
    assert run["peak_rss_mb"] > 10


async def test_fanout_sees_the_expected_calls_on_every_bmc(tmp_path: Path) -> None:
    result = await run_fanout(QUICK_FANOUT, tmp_path)
    (size,) = result["sizes"]
    assert size["n"] == 3 and size["simulator_processes"] == 2, "the fleet is split over two processes"
    assert size["peak_rss_mb"] > 10
    first, steady, restarted = size["phases"]
    assert [p["phase"] for p in size["phases"]] == ["first contact", "steady state", "after restart"]
    for phase in (first, steady, restarted):
        assert phase["problems"] == []
        assert phase["responses"] == 3 and phase["failures"] == 0 and phase["duplicates"] == 0
        assert phase["writes_per_bmc_min"] == phase["writes_per_bmc_max"] == EXPECTED_WRITES
        assert phase["max_in_flight_per_bmc"] <= QUICK_FANOUT.concurrency
        assert phase["calls_per_bmc_max"] >= 2 * EXPECTED_WRITES  # at least a read and a write each
        patches = sum(n for call, n in phase["calls_per_bmc"].items() if call.startswith("PATCH"))
        assert patches == EXPECTED_WRITES
        assert phase["floor"] == pytest.approx(
            phase["calls_per_bmc_max"] * QUICK_FANOUT.latency / QUICK_FANOUT.concurrency
        )
        assert phase["elapsed"] >= phase["floor"] > 0
        assert phase["controller_cpu_s"] > 0 and phase["cpu_ms_per_call"] > 0
    assert first["sessions_created"] == 3 and steady["sessions_created"] == 0
    assert first["calls_per_bmc_max"] > steady["calls_per_bmc_max"], "first contact also discovers"
    for ours, theirs in zip((first, steady), size["baseline"], strict=True):
        assert theirs["problems"] == [] and theirs["failed"] == 0
        assert theirs["writes_per_bmc_min"] == theirs["writes_per_bmc_max"] == EXPECTED_WRITES
        differs = theirs["differs_from_devicectl"]
        if ours is steady:  # devicectl's read-backs of the first activation stand in for its GETs
            skipped = {call: n for call, n in differs.items() if call not in LOGIN_AND_LOGOUT}
            assert skipped
            assert all(call.startswith("GET ") and n[0] * 2 == n[1] for call, n in skipped.items())
            differs = {call: n for call, n in differs.items() if call not in skipped}
        else:  # first contact: devicectl's discovery reads each chassis for its evidence (ChassisType,
            # the EnvironmentMetrics it links), which the baseline's fixed URIs never ask for
            differs = {call: n for call, n in differs.items() if call not in CHASSIS_EVIDENCE}
            # and its GET of each limit is the first write's pre-write read: fewer GETs of the limits
            reused = {
                call: n
                for call, n in differs.items()
                if call.startswith("GET ") and call.endswith("/EnvironmentMetrics") and n[0] < n[1]
            }
            differs = {call: n for call, n in differs.items() if call not in reused}
        assert set(differs) <= LOGIN_AND_LOGOUT, "otherwise the baseline makes the same calls"
        assert theirs["elapsed"] > 0 and ours["speedup"] == pytest.approx(theirs["elapsed"] / ours["elapsed"])


def _after_restart_checks(size: dict[str, Any]) -> None:
    """The wave after a restart on a warmed inventory: no login, no session sweep, no discovery on
    its path; the calls of a steady-state wave plus one pre-write GET per cap (the read-backs that
    stood in for them were the stopped process's, kept in memory: docs/redfish.md)."""
    n = size["n"]
    (layout,) = size["layouts"]
    _, steady, restarted = layout["phases"]
    assert restarted["phase"] == "after restart" and restarted["problems"] == []
    assert restarted["sessions_created"] == 0 and restarted["connections_opened"] == 0
    extra = {
        call: restarted["calls_per_bmc"][call] - steady["calls_per_bmc"].get(call, 0.0)
        for call in restarted["calls_per_bmc"]
        if restarted["calls_per_bmc"][call] != steady["calls_per_bmc"].get(call, 0.0)
    }
    assert set(restarted["calls_per_bmc"]) == set(steady["calls_per_bmc"]), extra
    assert all(call.startswith("GET ") and call.endswith("/EnvironmentMetrics") for call in extra), extra
    assert sum(extra.values()) == EXPECTED_WRITES
    warm = layout["warmup"]
    assert warm["devices"]["done"] >= n and warm["devices"]["failed"] == 0
    assert warm["sessions_created"] >= n and warm["ready_s"] >= warm["start_s"] > 0


async def test_fanout_after_a_restart_runs_on_the_warmed_inventory(tmp_path: Path) -> None:
    (size,) = (await run_fanout(replace(QUICK_FANOUT, baseline=False), tmp_path))["sizes"]
    _after_restart_checks(size)


async def test_fanout_without_probes_sends_none_and_measures_the_same_wave(tmp_path: Path) -> None:
    """`--no-probes`: no repeated pings while the waves execute (none acked, none journaled
    beforehand), every activation answered as with them."""
    config = replace(QUICK_FANOUT, baseline=False, after_restart=False, probes=False)
    (size,) = (await run_fanout(config, tmp_path))["sizes"]
    (layout,) = size["layouts"]
    for phase in layout["phases"]:
        assert phase["problems"] == [] and phase["responses"] == 3
        assert phase["probe_acks"] == 0 and phase["probe_failures"] == 0
    logs = [path.read_text() for path in tmp_path.rglob("controller*.log")]  # noqa: ASYNC240 (after the run)
    assert logs and not any("bench-probe" in log for log in logs)


@pytest.mark.postgres
@pytest.mark.timeout(600)
async def test_fanout_on_workers_warms_the_shards_an_executor_gained_after_its_start(tmp_path: Path) -> None:
    # the first executor up leases every shard and hands half on to its peer: the peer warms them
    require_postgres()
    config = replace(QUICK_FANOUT, sizes=(40,), per_process=20, baseline=False, workers=(2,))
    (size,) = (await run_fanout(config, tmp_path))["sizes"]
    (layout,) = size["layouts"]
    assert (layout["layout"], layout["backend"]) == ("--workers 2", "postgres")
    for phase in layout["phases"]:
        assert phase["problems"] == [] and phase["responses"] == 40
        assert phase["ack_p99_ms"] >= phase["ack_p50_ms"] > 0
        assert phase["probe_failures"] == 0  # repeated request_ids: acked, never run twice
        assert phase["ack_in_server"]["acks"] >= 40
    _after_restart_checks(size)


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_recovery_answers_every_journaled_request_once_after_a_crash(
    tmp_path: Path, backend: str
) -> None:
    if backend == "postgres":
        require_postgres()
    config = replace(QUICK_RECOVERY, backends=(backend,), requests=120)
    run = (await run_recovery(config, tmp_path))["backends"][backend]
    assert run["problems"] == []
    assert run["answered_before_restart"] == 0, "nothing may finish before the crash"
    assert (run["failures"], run["duplicates"], run["unexpected"]) == (0, 0, 0)
    assert 0 < run["first_response_s"] <= run["all_responses_s"]
    assert run["serving_s"] > 0 and run["responses_per_s"] > 0


def test_main_writes_the_report_and_keeps_other_results(tmp_path: Path) -> None:
    results, md, plot = tmp_path / "results.json", tmp_path / "BENCHMARKS.md", tmp_path / "fanout.png"
    config = {
        "latency": 0.05,
        "per_process": 1000,
        "backend": "sqlite",
        "concurrency": 2,
        "baseline_workers": 64,
    }
    earlier = {"command": "python -m bench --only fanout", "result": {"config": config, "sizes": []}}
    results.write_text(json.dumps({"fanout": earlier}))
    args = ["--quick", "--only", "recovery", "--backends", "sqlite", "--recovery-requests", "50"]
    args += ["--workdir", str(tmp_path / "work"), "--results", str(results), "--markdown", str(md)]
    args += ["--plot", str(plot)]
    assert main(args) == 0
    data = json.loads(results.read_text())
    assert data["fanout"] == earlier, "a partial run keeps the other benchmarks' results"
    assert data["recovery"]["command"].startswith("python -m bench --quick --only recovery")
    assert data["recovery"]["result"]["backends"]["sqlite"]["requests"] == 50
    assert data["machine"]["cores"] >= 1
    assert "## 3. Recovery" in md.read_text()
    # the summary's first line of text names the commit and the time it measured
    rev = ["git", "rev-parse", "--short=12", "HEAD"]
    head = subprocess.run(rev, capture_output=True, text=True, check=True)
    first = md.read_text().split("# Benchmarks\n\n", 1)[1].splitlines()[0]
    assert first.startswith(f"Measured on commit {head.stdout.strip()}") and " UTC." in first, first


@pytest.mark.slow
async def test_fanout_at_a_hundred_bmcs_over_two_simulator_processes(tmp_path: Path) -> None:
    config = replace(QUICK_FANOUT, sizes=(100,), per_process=50, baseline=False)
    (size,) = (await run_fanout(config, tmp_path))["sizes"]
    assert size["simulator_processes"] == 2
    for phase in size["phases"]:
        assert phase["problems"] == [] and phase["responses"] == 100
        assert phase["writes_per_bmc_min"] == phase["writes_per_bmc_max"] == EXPECTED_WRITES


def test_client_only_counts_every_call_and_reuses_connections(tmp_path: Path) -> None:
    from bench.client_only import CALLS_PER_PHASE
    from bench.client_only import main as client_only

    out = tmp_path / "client-only.json"
    argv = ["--bmcs", "2", "--latency", "0", "--phases", "2", "--untuned"]  # untuned: leave this process be
    assert client_only([*argv, "--workdir", str(tmp_path / "work"), "--json", str(out)]) == 0
    first, steady = json.loads(out.read_text())["phases"]
    # the first phase also logs in and opens the connections; the second reuses both
    assert first["calls"] > 2 * CALLS_PER_PHASE and first["connections_opened"] >= 2
    assert steady["calls"] == 2 * CALLS_PER_PHASE and steady["connections_opened"] == 0
    for phase in (first, steady):
        assert phase["writes"] == 2 * CALLS_PER_PHASE // 3
        assert phase["cpu_s"] > 0 and phase["cpu_ms_per_call"] > 0 and phase["rss_mb"] > 10
