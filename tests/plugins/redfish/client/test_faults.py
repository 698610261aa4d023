"""Injected faults: the faulty BMC gets a precise error, its neighbours are unaffected."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from plugins.base import (
    DeviceUnreachableError,
    Empty,
    GpuPoliciesChange,
    GpuPolicy,
    Ping,
    PolicyAction,
    PowerLimit,
    WriteLog,
    recording,
)
from plugins.redfish import AccessError, ConnectionFailedError, TlsError
from tests.plugins.redfish.harness import Harness

PROC_EM = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/{id}/EnvironmentMetrics"


def four_gpus(watts: float) -> GpuPoliciesChange:
    return GpuPoliciesChange(
        "rg", PolicyAction.SET, policies=tuple(GpuPolicy(i, PowerLimit(watts=watts)) for i in range(4))
    )


async def warm(h: Harness) -> None:
    """Log in and discover on every BMC, so faults hit the operation under test."""
    outs = await asyncio.gather(*(h.call("std_metrics", b, Empty()) for b in h.fleet.bmcs))
    assert all(o.result.ok for o in outs)
    h.reset()


async def gpu_policies_everywhere(h: Harness, watts: float, **kw: Any) -> list[Any]:
    return list(
        await asyncio.gather(
            *(h.call("update_gpu_policies", b, four_gpus(watts), **kw) for b in h.fleet.bmcs)
        )
    )


def assert_neighbours_fine(h: Harness, outs: list[Any], watts: float, bad: int = 1) -> None:
    for i, out in enumerate(outs):
        if i == bad:
            continue
        assert all(r.ok and r.applied_watts == watts for r in out.result.results), out.result
        assert all(h.fleet.bmcs[i].state.caps[f"GPU_{g}"].set_point == watts for g in range(4))


FAULTS = [
    pytest.param(
        {"mode": "http500", "writes_only": True},
        {},
        [
            "PATCH /redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_",
            "HTTP 500 Internal Server Error",
            "Base.InternalError: The request failed due to an internal service error",
        ],
        id="http500",
    ),
    pytest.param(
        {"mode": "http503", "writes_only": True, "retry_after": 30},
        {"timeout": 3.0},
        [
            "HTTP 503 Service Unavailable",
            "Base.ServiceTemporarilyUnavailable",
            "Retry-After: 30 s",
            "gave up after 1 attempt; the BMC asked to wait 30 s",
        ],
        id="http503-retry-after-past-deadline",
    ),
    pytest.param(
        {"mode": "nvidia-busy", "writes_only": True},
        {"options": {"busy_backoff": 60.0}, "timeout": 5.0},
        [
            "HTTP 500",
            "OpenBMC.AsyncError: Async command failed with rc:0x50A",
            "NVIDIA 0x50A: BMC busy, nothing applied",
            "gave up after 1 attempt",
        ],
        id="nvidia-busy",
    ),
    pytest.param(
        {"mode": "reset", "writes_only": True},
        {},
        ["PATCH /redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_", "connection"],
        id="reset",
    ),
    pytest.param(
        {"mode": "hang", "writes_only": True, "hang_seconds": 30},
        {"options": {"read_timeout": 0.3}},
        ["PATCH /redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_", "no reply within 0.3 s"],
        id="hang",
    ),
    pytest.param(
        {"mode": "invalid-json"},
        {},
        ["GET /redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_", "the reply is not valid JSON"],
        id="invalid-json",
    ),
]


@pytest.mark.parametrize(("fault", "call_args", "expected"), FAULTS)
async def test_fault_on_one_bmc_gives_a_precise_error_there_only(
    make_harness: Callable[..., Any], fault: dict[str, Any], call_args: dict[str, Any], expected: list[str]
) -> None:
    async with make_harness(n=3, model="gb200") as h:
        await warm(h)
        h.fleet.bmcs[1].faults.update(fault)
        started = time.monotonic()
        outs = await gpu_policies_everywhere(h, 600, **call_args)
        assert time.monotonic() - started < 5
        assert_neighbours_fine(h, outs, 600)
        bad = outs[1].result.results
        assert [r.ok for r in bad] == [False] * 4
        for result in bad:
            for text in expected:
                assert text in result.message, result.message
            assert h.fleet.bmcs[0].url not in result.message
        assert outs[1].state is not None  # priors and discovery survive a failed write


async def test_transient_faults_are_retried_and_succeed(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await warm(gb200)
    for spec in (
        {"mode": "http503", "writes_only": True, "retry_after": 0, "count": 2},
        {"mode": "nvidia-busy", "writes_only": True, "count": 2},
        {"mode": "reset", "count": 2},
        {"mode": "hang", "hang_seconds": 30, "count": 1},
    ):
        gb200.reset()
        bmc.faults.update(spec)
        out = await gb200.call("update_gpu_policies", bmc, four_gpus(500), options={"read_timeout": 0.3})
        assert all(r.ok and r.applied_watts == 500 for r in out.result.results), (spec, out.result)
        assert bmc.faults.mode.value == "none"
        assert bmc.stats.faults_injected[spec["mode"]] == spec.get("count", 1)
        await gb200.call("update_gpu_policies", bmc, GpuPoliciesChange("rg", PolicyAction.UNSET))


@pytest.mark.parametrize("fault", ["nvidia-timeout", "operation-timeout"])
async def test_a_timeout_inside_the_bmc_means_read_before_writing_again(gb200: Harness, fault: str) -> None:
    bmc = gb200.fleet.bmcs[0]
    await warm(gb200)
    bmc.faults.set(fault, writes_only=True, path_contains="GPU_1", count=1)
    change = GpuPoliciesChange("rg", PolicyAction.SET, policies=(GpuPolicy(1, PowerLimit(watts=640)),))
    with recording(WriteLog()) as log:
        out = await gb200.call("update_gpu_policies", bmc, change)
    assert out.result.results[0].ok and out.result.results[0].applied_watts == 640
    # GET, PATCH (500 0x600 or OperationTimeout, but applied), GET shows it landed: no second PATCH,
    # no extra read-back
    assert gb200.calls(bmc) == {"GET " + PROC_EM: 2, "PATCH " + PROC_EM: 1}
    assert bmc.stats.writes_applied == 1
    (receipt,) = log.entries()
    assert receipt.status.startswith("ok (read back") and "may or may not have applied" in receipt.note


async def test_a_cap_that_silently_reverts_is_reported_not_hidden(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await warm(gb200)
    bmc.faults.revert_after = 0.0  # firmware drops the out-of-band set point at once
    bmc.latency = 0.02  # the read-back arrives after the revert
    out = await gb200.call("update_gpu_policies", bmc, four_gpus(450))
    for result in out.result.results:
        assert not result.ok
        assert result.applied_watts == 1200 and result.requested_watts == 450
        assert "requested 450 W, the BMC reports 1200 W after the write" in result.message


async def test_unreachable_bmc_and_untrusted_certificate(make_harness: Callable[..., Any]) -> None:
    async with make_harness(n=3, model="gb200") as h:
        down = h.fleet.bmcs[2]
        await down.stop()
        outs = await asyncio.gather(
            h.call("std_metrics", h.fleet.bmcs[0], Empty()),
            h.call("std_metrics", h.fleet.bmcs[1], Empty(), ca_bundle=None),  # system store: not trusted
            h.call("std_metrics", down, Empty(), options={"max_attempts": 2}),
            return_exceptions=True,
        )
        assert outs[0].result.ok
        assert isinstance(outs[1], TlsError) and not outs[1].retryable
        assert "TLS certificate verification failed" in str(outs[1]) and "ca_bundle" in str(outs[1])
        assert isinstance(outs[2], ConnectionFailedError) and isinstance(outs[2], DeviceUnreachableError)
        assert f"{down.url}: GET /redfish/v1/: cannot connect" in str(outs[2])
        assert "gave up after 2 attempts" in str(outs[2])

        ping = await h.call("ping", down, Ping(retry_count=1))
        assert not ping.result.ok and "cannot connect" in ping.result.error
        assert ping.reach_error == ping.result.error and ping.reached_at is None


async def test_wrong_password_is_an_access_error_for_that_bmc_only(make_harness: Callable[..., Any]) -> None:
    async with make_harness(n=2, model="gb200") as h:
        good, bad = h.fleet.bmcs
        outs = await asyncio.gather(
            h.call("std_metrics", good, Empty()),
            h.call("std_metrics", bad, Empty(), password="wrong"),
            return_exceptions=True,
        )
        assert outs[0].result.ok
        assert isinstance(outs[1], AccessError)
        assert "login refused for user 'admin'" in str(outs[1]) and "wrong" not in str(outs[1])
        assert bad.stats.logins_failed == 1 and bad.stats.open_sessions == 0


async def test_persistent_503_on_reads_fails_only_that_bmcs_metrics(make_harness: Callable[..., Any]) -> None:
    async with make_harness(n=2, model="gb200") as h:
        await warm(h)
        h.fleet.bmcs[1].faults.set("http503", retry_after=0)
        outs = await asyncio.gather(
            *(h.call("std_metrics", b, Empty(), options={"max_attempts": 3}) for b in h.fleet.bmcs)
        )
        assert outs[0].result.ok
        result = outs[1].result
        assert not result.ok and "HTTP 503" in result.error and "gave up after 3 attempts" in result.error
        # 9 resources (7, and the 2 modules' caps), 3 attempts each
        assert h.fleet.bmcs[1].stats.faults_injected["http503"] == 9 * 3
        h.fleet.clear_faults()
