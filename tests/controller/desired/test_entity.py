"""Two-phase entity modification: one test per row of the decision table, on both plugins."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from plugins.base import (
    Allocation,
    EntityModification,
    EntityVerdict,
    Policy,
    PolicyAction,
    PolicyChange,
)
from plugins.nvml.testing import FakeNode
from tests.controller.desired.test_receipts import gpu_policy
from tests.plugins.redfish.harness import Harness, model_json


def gpus(count: int) -> dict[str, Any]:
    return {"spec": {"devices": [{"type": "GPU", "count": count}]}}


def policy(watts: float) -> Policy:
    change = gpu_policy(watts)
    assert change.policy is not None
    return change.policy


# ---- Redfish ---------------------------------------------------------------------------------------


async def test_redfish_rejects_a_gpu_count_the_bmc_contradicts(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(2800)))  # discovers 4 GPUs
    old = model_json(bmc)
    out = await gb200.call("modify_entity", bmc, EntityModification(0, old, {**old, **gpus(8)}))
    assert out.result.verdict is EntityVerdict.REJECTED
    assert out.result.message == "the new model has 8 GPU(s), but the device reports 4"


async def test_redfish_new_bmc_address_is_rediscovered_at_phase_1(make_harness: Callable[..., Any]) -> None:
    async with make_harness(n=2, model="gb200") as h:
        old_bmc, new_bmc = h.fleet.bmcs
        await h.call("set_policy", old_bmc, PolicyChange(PolicyAction.SET, policy(2800)))
        assert old_bmc.stats.open_sessions == 1
        old = {**model_json(old_bmc), "Redfish": {"URL": old_bmc.url, "SecretName": "bmc"}}
        new = {**old, "Redfish": {"URL": new_bmc.url, "SecretName": "bmc"}}
        out = await h.call("modify_entity", old_bmc, EntityModification(0, old, new))
        assert out.result.verdict is EntityVerdict.ACCEPTED_CALL_PHASE_1
        assert out.result.message.startswith("BMC address changed")
        assert out.state is None  # phase 0 changes nothing
        # phase 1 reaches the device at its new address, with its state from the old one
        ctx = dataclasses.replace(
            h.ctx(new_bmc), device_id=f"node{old_bmc.index}", state=h.states[old_bmc.index]
        )
        out = await h.plugin.modify_entity(ctx, EntityModification(1, old, new))
        assert out.result.verdict is EntityVerdict.ACCEPTED, out.result.message
        assert out.state is not None and out.state["discovery"]["url"] == new_bmc.url.rstrip("/")
        assert old_bmc.stats.open_sessions == 0  # the old endpoint's session is gone
        assert new_bmc.stats.calls[("GET", "/redfish/v1/Systems/HGX_Baseboard_0/Processors")] == 1


async def test_redfish_new_default_policy_while_allocated_is_applied_at_phase_1(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    old = model_json(bmc)
    await gb200.call(
        "activate_allocation", bmc, Allocation("rg-1", policy=PolicyChange(PolicyAction.SET, policy(2000)))
    )
    change = EntityModification(0, old, old, old_default_policy=policy(2800), new_default_policy=policy(3200))
    out = await gb200.call("modify_entity", bmc, change)
    assert out.result.verdict is EntityVerdict.ACCEPTED_CALL_PHASE_1
    assert "allocated" in out.result.message
    out = await gb200.call("modify_entity", bmc, dataclasses.replace(change, phase=1))
    assert out.result.verdict is EntityVerdict.ACCEPTED
    assert out.result.message == "applied the new default policy job"
    assert [bmc.state.set_points()[f"GPU_{i}"] for i in range(4)] == [800] * 4


async def test_redfish_anything_else_is_accepted(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    old = model_json(bmc)
    change = EntityModification(0, old, {**old, "Name": "renamed"}, policy(2800), policy(3200))
    out = await gb200.call("modify_entity", bmc, change)  # not allocated: the policy waits for its request
    assert out.result.verdict is EntityVerdict.ACCEPTED and bmc.stats.writes_applied == 0


# ---- NVML ------------------------------------------------------------------------------------------


async def test_nvml_rejects_a_gpu_count_the_node_contradicts(h100x4: FakeNode) -> None:
    await h100x4.do("set_policy", gpu_policy(2400))  # enumerates the 4 GPUs
    out = await h100x4.do("modify_entity", EntityModification(0, {}, gpus(8)))
    assert out.result.verdict is EntityVerdict.REJECTED
    assert out.result.message == "the new model has 8 GPU(s), but the device reports 4"


async def test_nvml_platform_change_is_accepted_with_phase_1(h100x4: FakeNode) -> None:
    change = EntityModification(0, {"Model": "DGX_H100"}, {"Model": "DGX_B200"})
    out = await h100x4.do("modify_entity", change)
    assert out.result.verdict is EntityVerdict.ACCEPTED_CALL_PHASE_1 and "platform" in out.result.message
    seen = len(h100x4.fake.writes())
    out = await h100x4.do("modify_entity", dataclasses.replace(change, phase=1))
    assert out.result.verdict is EntityVerdict.ACCEPTED and len(h100x4.fake.writes()) == seen


async def test_nvml_new_default_policy_while_allocated_applies_at_phase_1_under_the_group(
    h100x4: FakeNode,
) -> None:
    await h100x4.do("set_policy", gpu_policy(2400))
    await h100x4.do("activate_allocation", Allocation("rg-1", policy=gpu_policy(1600)))
    change = EntityModification(0, {}, {}, old_default_policy=policy(2400), new_default_policy=policy(2000))
    out = await h100x4.do("modify_entity", change)
    assert out.result.verdict is EntityVerdict.ACCEPTED_CALL_PHASE_1
    out = await h100x4.do("modify_entity", dataclasses.replace(change, phase=1))
    assert out.result.verdict is EntityVerdict.ACCEPTED
    assert h100x4.limit_w(0) == 400.0  # the group's policy stays on top while it is active
    await h100x4.do("deactivate_allocation", Allocation("rg-1"))
    assert h100x4.limit_w(0) == 500.0  # then the new default: 2000 W across 4 GPUs


async def test_nvml_anything_else_is_accepted(h100x4: FakeNode) -> None:
    change = EntityModification(0, {}, {"Name": "renamed"}, policy(2400), policy(2000))
    out = await h100x4.do("modify_entity", change)  # not allocated
    assert out.result.verdict is EntityVerdict.ACCEPTED
