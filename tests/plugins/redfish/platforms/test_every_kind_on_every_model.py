"""Every request kind on every simulated platform model, through the contract's `run_operation`."""

from __future__ import annotations

from typing import Any

import pytest

from plugins.base import (
    Allocation,
    ElementType,
    Empty,
    EntityModification,
    EntityModificationResult,
    EntityVerdict,
    GpuMetricsQuery,
    GpuPoliciesChange,
    GpuPoliciesResult,
    GpuPolicy,
    HealthQuery,
    Ping,
    Policy,
    PolicyAction,
    PolicyChange,
    PolicyLimit,
    PowerLimit,
    ProfileChange,
    RequestKind,
    run_operation,
)
from tests.plugins.redfish.harness import Harness

K = RequestKind

#: per model: the node policy it can take, and which kinds succeed there
MODELS: dict[str, dict[str, Any]] = {
    "gb200": {
        "index": 0,
        "policy": {ElementType.NODE: 5000, ElementType.GPU: 2800, ElementType.CPU: 400},
        "fails": set(),
    },
    "dmtf": {
        "index": 1,
        "policy": {ElementType.NODE: 900, ElementType.CPU: 500},
        "fails": {K.GPU_POLICIES_UPDATE, K.ENABLE_WORKLOAD_PROFILE, K.DISABLE_WORKLOAD_PROFILE,
                  K.UPDATE_WORKLOAD_PROFILE, K.GPU_METRICS},
    },
    "dmtf-legacy": {
        "index": 2,
        "policy": {ElementType.NODE: 900},
        "fails": {K.GPU_POLICIES_UPDATE, K.ENABLE_WORKLOAD_PROFILE, K.DISABLE_WORKLOAD_PROFILE,
                  K.UPDATE_WORKLOAD_PROFILE, K.GPU_METRICS},
    },
    "dgx-h100": {
        "index": 3,
        "policy": {ElementType.NODE: 8000, ElementType.GPU: 4800},
        "fails": {K.RESOURCE_GROUP_ACTIVATE, K.RESOURCE_GROUP_UPDATE, K.TOPOLOGY_ACTIVATE,
                  K.GPU_POLICIES_UPDATE, K.ENABLE_WORKLOAD_PROFILE, K.DISABLE_WORKLOAD_PROFILE,
                  K.UPDATE_WORKLOAD_PROFILE, K.BMC_HEALTH},  # Node Manager: no writable cap, `caps` fails
    },
}  # fmt: skip


def requests(limits: dict[ElementType, float]) -> list[tuple[RequestKind, Any]]:
    policy = Policy("Matrix", tuple(PolicyLimit(e, PowerLimit(watts=w)) for e, w in limits.items()))
    gpus = GpuPoliciesChange("rg", PolicyAction.SET, policies=(GpuPolicy(0, PowerLimit(watts=500)),))
    return [
        (K.TOPOLOGY_ACTIVATE, PolicyChange(PolicyAction.SET, policy)),
        (K.RESOURCE_GROUP_ACTIVATE, Allocation("rg", policy=PolicyChange(PolicyAction.SET, policy))),
        (K.GPU_POLICIES_UPDATE, gpus),
        (K.RESOURCE_GROUP_UPDATE, Allocation("rg", policy=PolicyChange(PolicyAction.SET, policy))),
        (K.ENABLE_WORKLOAD_PROFILE, ProfileChange(enable=(5,))),
        (K.UPDATE_WORKLOAD_PROFILE, ProfileChange(enable=(7,), disable=(5,))),
        (K.DISABLE_WORKLOAD_PROFILE, ProfileChange(disable=(7,))),
        (K.PING, Ping(retry_count=1)),
        (K.BMC_HEALTH, HealthQuery(telemetry_interval_ms=10, latency_samples=3)),
        (K.GPU_METRICS, GpuMetricsQuery()),
        (K.STD_METRICS, Empty()),
        (K.RAW_METRICS, Empty()),
        (K.MODIFY_ENTITY_MODEL, EntityModification(0, {}, {})),
        (K.RESOURCE_GROUP_DEACTIVATE, Allocation("rg")),
        (K.TOPOLOGY_DEACTIVATE, PolicyChange(PolicyAction.UNSET)),
    ]


def succeeded(result: Any) -> bool:
    if isinstance(result, GpuPoliciesResult):
        return bool(result.results) and all(r.ok for r in result.results)
    if isinstance(result, EntityModificationResult):
        return result.verdict is EntityVerdict.ACCEPTED
    return bool(result.ok)


@pytest.mark.parametrize("model", list(MODELS))
async def test_every_request_kind_on_every_platform(mixed: Harness, model: str) -> None:
    spec = MODELS[model]
    bmc = mixed.fleet.bmcs[spec["index"]]
    plan = requests(spec["policy"])
    assert {kind for kind, _ in plan} == set(RequestKind)
    outcomes = {}
    for kind, request in plan:
        outcome = await run_operation(mixed.plugin, kind, mixed.ctx(bmc), request)
        if outcome.state is not None:
            mixed.states[bmc.index] = outcome.state
        outcomes[kind] = outcome
        expected = kind not in spec["fails"]
        assert succeeded(outcome.result) == expected, (kind, outcome.result)
        if not expected:  # a failure always says why
            text = repr(outcome.result)
            assert "unsupported on this platform" in text or "no GPUs" in text or "no such GPU" in text, text
    # every prior value was put back (or replaced by the idle policy), no Redfish session is left
    assert mixed.states[bmc.index].get("priors", {}) == {}
    await mixed.plugin.close()
    assert bmc.stats.open_sessions == 0
