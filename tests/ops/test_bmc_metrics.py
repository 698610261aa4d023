"""The Redfish plugin's own metrics (BMC calls by status and platform, sessions open), exported
through prometheus_client's default registry without the plugin importing the controller."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import REGISTRY

from plugins.base import Empty
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
