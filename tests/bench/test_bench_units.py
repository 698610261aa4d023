"""Fast checks of the benchmark's building blocks (no processes started)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench import grpc_floor, procstats, report
from bench.baseline import GB200_CAPS
from bench.fanout_plan import EXPECTED_WRITES, PHASES, activation
from bench.loadgen import device_ids, request_ids
from bench.noop_plugin import NoopPlugin
from bench.util import jsonable, percentile
from controller import translate
from plugins.base import DeviceContext, RequestKind, run_operation
from plugins.base import _types as t
from plugins.base.kinds import KINDS


def test_percentile_is_nearest_rank() -> None:
    values = [float(i) for i in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([], 99) == 0.0


def test_procstats_reads_this_process() -> None:
    before = procstats.sample(os.getpid())
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:  # burn a little CPU
        pass
    after = procstats.sample(os.getpid())
    assert after.cpu_seconds >= before.cpu_seconds + 0.01
    assert after.peak_rss_bytes >= after.rss_bytes > 10 * 2**20
    with pytest.raises(ProcessLookupError):
        procstats.sample(2**22 + 12345)


_REQUESTS: dict[RequestKind, Any] = {
    RequestKind.RESOURCE_GROUP_ACTIVATE: t.Allocation("rg"),
    RequestKind.RESOURCE_GROUP_UPDATE: t.Allocation("rg"),
    RequestKind.RESOURCE_GROUP_DEACTIVATE: t.Allocation("rg"),
    RequestKind.TOPOLOGY_ACTIVATE: t.PolicyChange(t.PolicyAction.SET),
    RequestKind.TOPOLOGY_DEACTIVATE: t.PolicyChange(t.PolicyAction.UNSET),
    RequestKind.GPU_POLICIES_UPDATE: t.GpuPoliciesChange("rg", t.PolicyAction.SET),
    RequestKind.ENABLE_WORKLOAD_PROFILE: t.ProfileChange(enable=(3,)),
    RequestKind.DISABLE_WORKLOAD_PROFILE: t.ProfileChange(disable=(3,)),
    RequestKind.UPDATE_WORKLOAD_PROFILE: t.ProfileChange(),
    RequestKind.PING: t.Ping(),
    RequestKind.GPU_METRICS: t.GpuMetricsQuery(),
    RequestKind.RAW_METRICS: t.Empty(),
    RequestKind.STD_METRICS: t.Empty(),
    RequestKind.MODIFY_ENTITY_MODEL: t.EntityModification(1, {}, {}),
    RequestKind.BMC_HEALTH: t.HealthQuery(),
}


@pytest.mark.parametrize("kind", KINDS.names())
async def test_noop_plugin_answers_every_kind_with_success(kind: RequestKind) -> None:
    ctx = DeviceContext(device_id="d", request_id="r")
    outcome = await run_operation(NoopPlugin(), kind, ctx, _REQUESTS[kind])
    response = translate.response_to_proto(kind, outcome.result, device="d", request_id="r")
    assert translate.success_of(response) == (True, "")
    assert outcome.state is None  # the device state stays as it was


async def test_noop_plugin_holds_when_the_model_says_so() -> None:
    ctx = DeviceContext(device_id="d", model={"delay": 0.2})
    began = time.monotonic()
    await NoopPlugin().ping(ctx, t.Ping())
    assert time.monotonic() - began >= 0.2


def test_ids_are_unique_and_stable() -> None:
    assert request_ids("x", 3) == ["x-0000000", "x-0000001", "x-0000002"]
    assert len(set(device_ids("bench", 1000))) == 1000


def test_the_activation_sets_what_the_write_count_expects() -> None:
    assert sum(len(uris) for uris in GB200_CAPS.values()) == EXPECTED_WRITES
    first, steady = PHASES
    assert first.per_component != steady.per_component, "both phases must write every cap"
    msg = activation("node001", "r1", first)
    kind, request = translate.request_from_proto(msg)
    assert kind is RequestKind.RESOURCE_GROUP_ACTIVATE
    assert isinstance(request, t.Allocation) and request.resource_group == first.group
    assert request.policy is not None and request.policy.policy is not None
    assert {limit.element for limit in request.policy.policy.limits} == {
        t.ElementType.NODE,
        t.ElementType.GPU,
        t.ElementType.CPU,
    }


def _phase(name: str, elapsed: float, floor: float) -> dict[str, Any]:
    return {
        "phase": name,
        "elapsed": elapsed,
        "floor": floor,
        "ratio_to_floor": elapsed / floor,
        "speedup": 6.0,
        "cpu_ms_per_call": 0.4,
        "calls_per_bmc_max": 24,
        "calls_per_bmc": {"PATCH /x": 8.0},
        "problems": [],
        "acked_after": 0.1,
        "send_retries": 0,
        "controller_cpu_s": 1.0,
        "simulator_cpu_s": 1.0,
        "max_in_flight_per_bmc": 2,
        "connections_opened": 0,
        "sessions_created": 0,
    }


def _results() -> dict[str, Any]:
    scenario = {
        "offered_rate": 1000.0,
        "concurrency": None,
        "acks_per_s": 3500.0,
        "latency_ms": {"p50": 2.0, "p99": 15.0, "max": 30.0},
        "responses_per_s": 3000.0,
        "controller_cpu_ms_per_request": 0.2,
        "failures": 0,
        "duplicates": 0,
        "unexpected": 0,
    }
    size = {
        "n": 2000,
        "simulator_processes": 2,
        "peak_rss_mb": 500.0,
        "phases": [_phase("first contact", 3.0, 1.0), _phase("steady state", 0.8, 0.6)],
        "baseline": [
            {**_phase("first contact", 18.0, 1.0), "calls_per_bmc": {"PATCH /x": 8.0}},
            {**_phase("steady state", 6.0, 1.0), "calls_per_bmc": {"PATCH /x": 8.0}},
        ],
    }
    ingest_cfg = {"devices": 10, "fixed_requests": 10, "rate": 1000.0, "max_requests": 10, "concurrency": 8}
    fanout_cfg = {
        "latency": 0.05,
        "per_process": 1000,
        "backend": "sqlite",
        "concurrency": 2,
        "baseline_workers": 64,
    }
    return {
        "machine": {"cores": 2, "cpu": "x", "memory_gib": 1.0},
        "ingest": {
            "command": "python -m bench",
            "result": {
                "config": ingest_cfg,
                "backends": {
                    "sqlite": {"fixed": scenario, "max": scenario, "peak_rss_mb": 80.0},
                    "postgres": {"skipped": "unreachable"},
                },
            },
        },
        "fanout": {"command": "python -m bench", "result": {"config": fanout_cfg, "sizes": [size]}},
    }


def test_targets_are_judged_from_the_results() -> None:
    verdicts = {target: ok for target, _, ok in report.targets(_results())}
    assert verdicts["Ingest, sqlite: ≥ 3,000 durable acks/s"] is True
    assert verdicts["Ingest, postgres: ≥ 2,000 durable acks/s"] is None  # skipped: not measured
    assert verdicts["Ack p99 ≤ 20 ms at 1,000 req/s, sqlite"] is True
    assert verdicts["Fan-out within 1.5x of the floor (2000 BMCs, first contact)"] is False
    assert verdicts["Fan-out within 1.5x of the floor (2000 BMCs, steady state)"] is True
    assert verdicts["Controller peak RSS ≤ 400 MB (2000 BMCs in flight)"] is False


def test_without_matplotlib_the_plot_is_skipped_with_a_line_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    plot = tmp_path / "fanout.png"
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    assert not report.plot_fanout(jsonable(_results()), plot)
    assert not plot.exists()
    said = capsys.readouterr()
    assert "matplotlib is not installed" in said.out + said.err and "Traceback" not in said.out + said.err


def test_report_keeps_the_hand_written_notes_and_draws_the_plot(tmp_path: Path) -> None:
    md, plot = tmp_path / "BENCHMARKS.md", tmp_path / "bench" / "fanout.png"
    md.write_text(f"old generated text\n{report.END}\n\n## Notes\n\nkept by hand\n")
    results = jsonable(_results())
    assert report.plot_fanout(results, plot)
    report.write_markdown(results, md, plot)
    text = md.read_text()
    assert "old generated text" not in text
    assert text.count(report.END) == 1 and text.rstrip().endswith("kept by hand")
    assert "](bench/fanout.png)" in text
    assert "| sqlite | 1,000/s | 3,500 | 0 |" in text
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_grpc_floor_measures_real_calls(capsys: pytest.CaptureFixture[str]) -> None:
    # 60 real unary calls over loopback: a call costs some CPU, far less than a second
    assert grpc_floor.main(["--calls", "60", "--in-flight", "8"]) == 0
    figure = float(capsys.readouterr().out.split(" ms CPU per unary call")[0])
    assert 0.0 < figure < 1000.0


def test_the_fanout_controllers_concurrency_is_the_fleet_unless_given() -> None:
    from bench.__main__ import _configs, parser

    _, fanout, _ = _configs(parser().parse_args(["--only", "fanout"]))
    assert [fanout.concurrency_for(n) for n in (500, 2000)] == [1024, 2000]  # every activation at once
    _, fanout, _ = _configs(parser().parse_args(["--only", "fanout", "--max-concurrency", "256"]))
    assert [fanout.concurrency_for(n) for n in (500, 2000)] == [256, 256]
