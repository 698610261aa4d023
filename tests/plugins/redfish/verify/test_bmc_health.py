"""`bmc_health` against the GB200 simulator: read-only checks, the write cycle, its refusals and
failures, the latency threshold, the in-band comparison and an unreachable BMC."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from plugins.base import (
    Allocation,
    GpuPoliciesChange,
    GpuPolicy,
    HealthQuery,
    InvalidRequestError,
    PolicyAction,
    PowerLimit,
    WriteLog,
    recording,
)
from plugins.redfish._verify.verify import latency_status
from tests.plugins.redfish.harness import Harness

FAST: dict[str, Any] = {"telemetry_interval_ms": 20, "latency_samples": 5}


def _statuses(out: Any) -> dict[str, str]:
    return {c.name: c.status for c in out.result.checks}


def _writes(h: Harness, bmc: Any) -> list[str]:
    """Writes the BMC saw, logins aside."""
    return [
        k for k in h.calls(bmc) if k.split()[0] in ("PATCH", "POST", "PUT") and "/SessionService/" not in k
    ]


def _caps(bmc: Any) -> dict[str, Any]:
    """Everything a write can change on each of the simulator's caps."""
    return {name: cap.snapshot() for name, cap in bmc.state.caps.items()}


def _operator_cap(bmc: Any, name: str, watts: int) -> None:
    """A cap someone else set out of band before the verification (as the simulator applies a write)."""
    from bmcsim._gb200_writes import cap_write

    cap_write(bmc.state.caps[name], watts, None).apply()


def _check(out: Any, name: str) -> Any:
    return next(c for c in out.result.checks if c.name == name)


async def test_a_healthy_gb200_passes_every_read_only_check_and_nothing_is_written(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    gb200.reset()
    out = await gb200.call("bmc_health", bmc, HealthQuery(**FAST))
    statuses = _statuses(out)
    assert statuses.pop("inband") == "skip"
    assert set(statuses.values()) == {"pass"}, [(c.name, c.detail) for c in out.result.checks]
    caps = {n for n in statuses if n.startswith("cap ")}
    assert caps == {"cap module/0", "cap module/1", "cap cpu/0", "cap cpu/1"} | {
        f"cap gpu/{i}" for i in range(4)
    }
    assert out.result.ok and out.result.verdict == "pass"
    assert _writes(gb200, bmc) == []
    gpu = _check(out, "cap gpu/0").evidence
    assert (gpu["min"], gpu["max"], gpu["mode"]) == (200, 1200, "Automatic")
    tls = _check(out, "tls").evidence
    assert tls["verified"] and tls["host_matches"] and tls["days_left"] > 30
    assert _check(out, "telemetry").evidence["moved"] is True
    latency = _check(out, "latency").evidence
    assert latency["samples"] == 5 and latency["p50_ms"] <= latency["p95_ms"] <= latency["max_ms"]
    sessions = _check(out, "sessions").evidence
    assert sessions["in_use"] >= 1 and sessions["ours"]


async def test_the_write_cycle_sets_reads_back_and_restores_every_cap_exactly(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    _operator_cap(bmc, "GPU_1", 700)  # a cap in force before the cycle comes back exactly
    before = _caps(bmc)
    log = WriteLog()
    with recording(log):
        out = await gb200.call("bmc_health", bmc, HealthQuery(skip_writes=False, **FAST))
    writes = {c.name: c for c in out.result.checks if c.name.startswith("write ")}
    assert len(writes) == 8 and {c.status for c in writes.values()} == {"pass"}, writes
    assert _caps(bmc) == before
    gpu1 = writes["write gpu/1"].evidence
    assert gpu1["before"]["watts"] == 700 and gpu1["value"] == 650 and gpu1["restored"]
    assert gpu1["report_ms"] >= 0
    # every component reports its power here: under the new cap (the simulator's load follows it)
    assert all(c.evidence["power"]["under_cap"] and c.evidence["power"]["ms"] >= 0 for c in writes.values())
    assert all(e.target.endswith("EnvironmentMetrics") or "/Actions/" in e.target for e in log.entries())
    assert len(log.entries()) >= 16  # a set and a restore per cap, each with a receipt


async def test_a_write_cycle_is_refused_on_a_node_with_an_active_resource_group_unless_forced(
    gb200: Harness,
) -> None:
    bmc = gb200.fleet.bmcs[0]
    rg = Allocation(resource_group="job7", gpu_policies=_gpu_cap(0, 800, "job7"))
    assert (await gb200.call("activate_allocation", bmc, rg)).result.ok
    gb200.reset()
    out = await gb200.call("bmc_health", bmc, HealthQuery(skip_writes=False, **FAST))
    refused = _check(out, "write")
    assert refused.status == "fail" and "resource group job7 is active" in refused.detail
    assert _writes(gb200, bmc) == [] and not out.result.ok
    before = _caps(bmc)
    out = await gb200.call("bmc_health", bmc, HealthQuery(skip_writes=False, force_writes=True, **FAST))
    assert _check(out, "write gpu/0").status == "pass"
    assert _caps(bmc) == before  # the group's 800 W is back


async def test_a_failing_step_names_itself_and_the_node_ends_restored(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    before = _caps(bmc)
    bmc.faults.set("http500", writes_only=True, path_contains="GPU_1")
    out = await gb200.call("bmc_health", bmc, HealthQuery(skip_writes=False, **FAST))
    bmc.faults.clear()
    failed = _check(out, "write gpu/1")
    assert failed.status == "fail" and failed.detail.startswith("step set:"), failed
    assert _check(out, "write gpu/0").status == "pass" and not out.result.ok
    assert _caps(bmc) == before


def test_latency_under_the_threshold_passes_up_to_twice_it_warns_and_beyond_fails() -> None:
    assert [latency_status(p95, 100.0) for p95 in (5.0, 100.0, 100.1, 200.0, 200.1)] == [
        "pass",
        "pass",
        "warn",
        "warn",
        "fail",
    ]


async def test_a_slow_bmc_fails_the_latency_check_with_its_figures(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    bmc.configure(latency=0.05)  # every GET takes 50 ms at least: far over a 5 ms threshold
    out = await gb200.call("bmc_health", bmc, HealthQuery(telemetry_interval_ms=20, latency_p95_ms=5))
    latency = _check(out, "latency")
    assert latency.status == "fail" and latency.evidence["threshold_ms"] == 5
    assert latency.evidence["p50_ms"] >= 50 and latency.evidence["concurrency"] == 2
    assert "p95" in latency.detail and latency.evidence["samples"] == 20  # the documented default


async def test_in_band_limits_that_differ_from_the_bmcs_are_flagged_with_both_values(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    _operator_cap(bmc, "GPU_1", 700)
    same = await gb200.call("bmc_health", bmc, HealthQuery(inband_gpu_limits={1: 700.0}, **FAST))
    assert _check(same, "inband").status == "pass"
    out = await gb200.call("bmc_health", bmc, HealthQuery(inband_gpu_limits={0: 1200.0, 1: 650.0}, **FAST))
    inband = _check(out, "inband")
    assert inband.status == "warn"
    assert inband.detail == "GPU 1: NVML enforces 650 W, the BMC holds 700 W"
    assert inband.evidence["gpus"]["1"] == {"nvml_watts": 650.0, "bmc_watts": 700.0}


async def test_an_unreachable_bmc_fails_reachability_and_skips_the_rest(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    bmc.faults.set("reset")
    out = await gb200.call("bmc_health", bmc, HealthQuery(**FAST), timeout=3.0)
    bmc.faults.clear()
    statuses = _statuses(out)
    assert statuses["reachability"] == "fail" and out.result.verdict == "fail"
    assert {s for n, s in statuses.items() if n != "reachability"} == {"skip"}


async def test_a_bad_query_is_refused_in_one_line(gb200: Harness) -> None:
    with pytest.raises(InvalidRequestError, match="telemetry_interval_ms must not be negative"):
        await gb200.call("bmc_health", gb200.fleet.bmcs[0], HealthQuery(telemetry_interval_ms=-1))


def _gpu_cap(gpu: int, watts: float, group: str) -> GpuPoliciesChange:
    return GpuPoliciesChange(group, PolicyAction.SET, None, (GpuPolicy(gpu, PowerLimit(watts=watts)),))


async def test_a_write_cycle_cancelled_mid_way_puts_the_cap_back(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    before = _caps(bmc)
    bmc.configure(latency=0.05)
    task = asyncio.create_task(gb200.call("bmc_health", bmc, HealthQuery(skip_writes=False, **FAST)))
    # until the first cap is away from its value: after discovery's reads (each 50 ms here), so the
    # wait is bounded by what the cycle does, not by a count of polls (which a loaded host outran)
    deadline = time.monotonic() + 60
    for _ in iter(lambda: _caps(bmc) == before and not task.done() and time.monotonic() < deadline, False):
        await asyncio.sleep(0.005)
    assert _caps(bmc) != before
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(100):  # the restore runs on, shielded from the cancellation
        if _caps(bmc) == before:
            break
        await asyncio.sleep(0.05)
    assert _caps(bmc) == before


async def test_an_automatic_limit_showing_a_value_is_stepped_below_that_value(gb200: Harness) -> None:
    """`Automatic` with a set point of 500 W: the test value is one step below 500 W (the value in
    force), never one step below the maximum (which would raise the limit to 1150 W)."""
    bmc = gb200.fleet.bmcs[0]
    cap = bmc.state.caps["GPU_0"]
    cap.set_point, cap.control_mode = 500, "Automatic"
    before = _caps(bmc)
    out = await gb200.call("bmc_health", bmc, HealthQuery(skip_writes=False, **FAST))
    gpu0 = _check(out, "write gpu/0")
    assert gpu0.evidence["before"]["watts"] == 500 and gpu0.evidence["before"]["mode"] == "Automatic"
    assert gpu0.evidence["value"] == 450, gpu0  # 5 % of 200..1200 W below the 500 W in force
    assert gpu0.status == "pass" and gpu0.evidence["restored"], gpu0
    after = _caps(bmc)
    # the restore puts the mode back (Automatic: the BMC chooses its value again); nothing else moved
    assert after.pop("GPU_0")[1] == "Automatic" and before.pop("GPU_0")[1] == "Automatic"
    assert after == before


PERSISTENT: dict[str, Any] = {"persistent_caps": True}


def _persistent_operator_cap(bmc: Any, name: str, watts: int, persistent: bool) -> None:
    from bmcsim._gb200_writes import cap_write

    cap_write(bmc.state.caps[name], watts, persistent).apply()


async def test_a_write_cycle_with_persistent_caps_puts_each_caps_persistency_back_exactly(
    gb200: Harness,
) -> None:
    """`persistent_caps` sends `PowerLimitPersistency: true` with each test value; the restore puts
    back the prior's own persistency (false stays false, true stays true, none stays none)."""
    bmc = gb200.fleet.bmcs[0]
    _persistent_operator_cap(bmc, "GPU_1", 700, persistent=False)  # a one-shot cap
    _persistent_operator_cap(bmc, "GPU_2", 800, persistent=True)
    before = _caps(bmc)
    assert before["GPU_0"][3] is None and before["GPU_1"][3] is False and before["GPU_2"][3] is True
    out = await gb200.call("bmc_health", bmc, HealthQuery(skip_writes=False, **FAST), options=PERSISTENT)
    writes = {c.name: c for c in out.result.checks if c.name.startswith("write ")}
    assert {c.status for c in writes.values()} == {"pass"}, writes
    assert writes["write gpu/1"].evidence["before"]["persistency"] == "off"
    assert _caps(bmc) == before  # set points, modes and persistency all as they were


async def test_a_journaled_prior_restores_its_persistency_and_an_old_journal_keeps_the_option(
    gb200: Harness,
) -> None:
    """An interrupted cycle's journal (the controller's `plan_of` over a read-only run) records the
    persistency; its restore puts it back even though `persistent_caps` asks for persistence."""
    from controller.execution.write_cycle import plan_of

    bmc = gb200.fleet.bmcs[0]
    _persistent_operator_cap(bmc, "GPU_1", 700, persistent=False)
    planned = await gb200.call("bmc_health", bmc, HealthQuery(**FAST), options=PERSISTENT)
    priors = plan_of(planned.result)
    assert priors["gpu/1"]["persistency"] == "off" and priors["gpu/0"]["persistency"] == "off"
    _persistent_operator_cap(bmc, "GPU_1", 650, persistent=True)  # the test value left by a crash
    restore = {"gpu/1": priors["gpu/1"]}
    out = await gb200.call("bmc_health", bmc, HealthQuery(restore=restore, **FAST), options=PERSISTENT)
    assert _check(out, "restore gpu/1").status == "pass", out.result.checks
    assert bmc.state.caps["GPU_1"].snapshot() == (700, "Automatic", True, False)
    # a journal written before persistency was recorded: the option decides, as it did
    _persistent_operator_cap(bmc, "GPU_1", 650, persistent=False)
    old = {"gpu/1": {k: v for k, v in priors["gpu/1"].items() if k != "persistency"}}
    out = await gb200.call("bmc_health", bmc, HealthQuery(restore=old, **FAST), options=PERSISTENT)
    assert _check(out, "restore gpu/1").status == "pass", out.result.checks
    assert bmc.state.caps["GPU_1"].snapshot() == (700, "Automatic", True, True)


async def test_a_topology_restore_with_persistent_caps_puts_a_one_shot_cap_back_one_shot(
    gb200: Harness,
) -> None:
    bmc = gb200.fleet.bmcs[0]
    _persistent_operator_cap(bmc, "GPU_1", 700, persistent=False)
    out = await gb200.call("update_gpu_policies", bmc, _gpu_cap(1, 600, "rg"), options=PERSISTENT)
    assert out.result.results[0].ok and bmc.state.caps["GPU_1"].snapshot() == (600, "Automatic", True, True)
    out = await gb200.call(
        "update_gpu_policies", bmc, GpuPoliciesChange("rg", PolicyAction.UNSET), options=PERSISTENT
    )
    assert all(r.ok for r in out.result.results), out.result
    assert bmc.state.caps["GPU_1"].snapshot() == (700, "Automatic", True, False)
