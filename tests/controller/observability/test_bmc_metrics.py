"""The Redfish plugin's own metrics (BMC calls by status and platform, sessions open), exported
through prometheus_client's default registry without the plugin importing the controller."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import REGISTRY

from controller.observability import metrics
from plugins.base import Empty, GpuPoliciesChange, GpuPolicy, PolicyAction, PowerLimit
from tests.plugins.redfish.conftest import make_harness, sim_certs

__all__ = ["make_harness", "sim_certs"]


def _calls(status: str, platform: str, method: str = "GET") -> float:
    labels = {"method": method, "status": status, "platform": platform}
    return REGISTRY.get_sample_value("devicectl_bmc_requests_total", labels) or 0.0


def _timed(method: str, outcome: str, suffix: str = "count") -> float:
    labels = {"method": method, "outcome": outcome}
    return REGISTRY.get_sample_value(f"devicectl_bmc_request_duration_seconds_{suffix}", labels) or 0.0


def _sessions() -> float:
    return REGISTRY.get_sample_value("devicectl_bmc_sessions_open") or 0.0


async def test_bmc_calls_and_sessions_are_counted(make_harness: Callable[..., Any]) -> None:
    sessions_before = _sessions()
    timed_before = _timed("GET", "ok")
    async with make_harness(n=1, model="gb200") as h:
        bmc = h.fleet.bmcs[0]
        await h.call("std_metrics", bmc, Empty())
        gets = sum(
            _calls("200", p) for p in ("environment_metrics", "controls", "legacy_power", "node_manager")
        )
        assert gets > 0, "successful GETs are counted under the discovered platform"
        # each call's latency, by method and outcome only (no BMC address, no platform)
        assert _timed("GET", "ok") > timed_before and _timed("GET", "ok", "sum") > 0
        (family,) = [m for m in REGISTRY.collect() if m.name == "devicectl_bmc_request_duration_seconds"]
        assert {frozenset(s.labels) - {"le"} for s in family.samples} == {frozenset({"method", "outcome"})}
        assert _sessions() == sessions_before + 1  # one session open on the one BMC
        await h.call("std_metrics", bmc, Empty())
        assert _sessions() == sessions_before + 1  # reused, not reopened
        await h.plugin.close()
        assert _sessions() == sessions_before


async def test_a_redfish_change_logs_and_exports_requested_and_enforced_watts(
    make_harness: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    """The Redfish plugin reports `requested_watts` only where it differs from what the BMC
    enforces (plugins/redfish/_capping/results.py): the log line and the requested gauge still carry it."""
    caplog.set_level(logging.INFO, logger="controller.changes")
    metrics.configure(per_device=True, max_devices=10)
    try:
        async with make_harness(n=1, model="gb200") as h:
            change = GpuPoliciesChange(
                "rg", PolicyAction.SET, policies=(GpuPolicy(0, PowerLimit(watts=600)),)
            )
            result = (await h.call("update_gpu_policies", h.fleet.bmcs[0], change)).result
            (gpu,) = result.results
            assert gpu.ok and gpu.requested_watts is None  # the plugin's own report: equal
            metrics.applied("rf-node", result, change)
        lines = [r.getMessage() for r in caplog.records if r.name == "controller.changes"]
        assert lines == [f"applied gpu/0: unknown -> requested 600 W -> enforced {gpu.applied_watts:g} W"]
        for gauge, expected in (("requested", 600.0), ("enforced", gpu.applied_watts)):
            labels = {"device": "rf-node", "component": "gpu/0"}
            assert REGISTRY.get_sample_value(f"devicectl_power_limit_{gauge}_watts", labels) == expected
    finally:
        metrics.configure(per_device=False, max_devices=1000)
