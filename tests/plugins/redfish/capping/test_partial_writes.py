"""A multi-component request that fails midway says exactly what it changed, and undoes nothing
(docs/architecture.md, "A request that fails midway")."""

from __future__ import annotations

import asyncio

from bmcsim import FaultMode
from controller import translate
from controller.desired.limits import desired_from
from plugins.base import (
    GpuPoliciesChange,
    GpuPolicy,
    PolicyAction,
    PowerLimit,
    RequestKind,
    WriteOutcome,
)
from tests.plugins.redfish.harness import Harness


def _all_gpus(watts: float) -> GpuPoliciesChange:
    return GpuPoliciesChange(
        "rg", PolicyAction.SET, policies=tuple(GpuPolicy(g, PowerLimit(watts=watts)) for g in range(4))
    )


async def test_a_refused_write_leaves_the_others_written_and_says_so(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("update_gpu_policies", bmc, _all_gpus(900))
    bmc.faults.set(FaultMode.HTTP_500, writes_only=True, path_contains="GPU_2")
    out = await gb200.call("update_gpu_policies", bmc, _all_gpus(700))
    bmc.faults.clear()
    results = {r.gpu_id: r for r in out.result.results}
    assert [results[g].write for g in range(4)] == [
        WriteOutcome.WRITTEN,
        WriteOutcome.WRITTEN,
        WriteOutcome.NOT_WRITTEN,
        WriteOutcome.WRITTEN,
    ]
    assert [results[g].ok for g in range(4)] == [True, True, False, True]
    # no undo: the BMC holds what the response says, the refused GPU the value from before
    assert [bmc.state.caps[f"GPU_{g}"].set_point for g in range(4)] == [700, 700, 900, 700]
    assert [results[g].applied_watts for g in range(4)] == [700, 700, 900, 700]
    # the state records what was read back; the refused GPU's stored reading is dropped
    applied = out.state["applied"]
    assert [applied[f"gpu/{g}"]["watts"] for g in (0, 1, 3)] == [700, 700, 700]
    assert "gpu/2" not in out.state.get("readings", {})
    # on the wire (and in `requests show`) each GPU's diag_msg leads with what happened
    response = translate.response_to_proto(
        RequestKind.GPU_POLICIES_UPDATE, out.result, device="node0", request_id="r1"
    )
    diags = [r.diag_msg for r in response.gpu_policies_update.results]
    assert diags[0] == "written" and diags[2].startswith("not written; ")
    assert translate.response_from_proto(response) == (RequestKind.GPU_POLICIES_UPDATE, out.result)
    # the drift check's desired values follow the written GPUs and keep the refused one's
    assert desired_from(out.result) == {"gpu/0": 700, "gpu/1": 700, "gpu/3": 700}


async def test_a_write_whose_answer_never_came_is_unknown(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("update_gpu_policies", bmc, _all_gpus(900))
    # GPU_1: no reply to the PATCH nor to the reads that would tell whether it landed
    bmc.faults.set(FaultMode.HANG, path_contains="GPU_1/", hang_seconds=30)
    out = await gb200.call(
        "update_gpu_policies", bmc, _all_gpus(650), timeout=3.0, options={"read_timeout": 0.5}
    )
    bmc.faults.clear()
    results = {r.gpu_id: r for r in out.result.results}
    assert results[1].write is WriteOutcome.UNKNOWN and not results[1].ok
    assert results[1].requested_watts == 650 and results[1].applied_watts == 0
    assert all(results[g].write is WriteOutcome.WRITTEN and results[g].ok for g in (0, 2, 3))
    response = translate.response_to_proto(
        RequestKind.GPU_POLICIES_UPDATE, out.result, device="node0", request_id="r2"
    )
    diag = response.gpu_policies_update.results[1].diag_msg
    assert diag.startswith("unknown (the BMC's answer never came); ")
    assert desired_from(out.result) == {"gpu/0": 650, "gpu/1": 650, "gpu/2": 650, "gpu/3": 650}
    assert "gpu/1" not in out.state.get("readings", {})  # the next change reads GPU_1 afresh


async def test_an_accepted_write_whose_task_cannot_be_followed_is_unknown(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("update_gpu_policies", bmc, _all_gpus(900))
    # GPU writes are accepted with 202 and applied 2 s later; every poll of their task fails
    bmc.configure(async_writes=True, task_delay=2.0)
    bmc.faults.set(FaultMode.HTTP_500, path_contains="/TaskService/")
    out = await gb200.call(
        "update_gpu_policies", bmc, _all_gpus(650), timeout=1.5, options={"task_poll_interval": 0.05}
    )
    bmc.faults.clear()
    results = {r.gpu_id: r for r in out.result.results}
    assert all(results[g].write is WriteOutcome.UNKNOWN and not results[g].ok for g in range(4))
    assert "the BMC accepted the write (202) but its task could not be followed" in results[0].message
    for _ in range(60):  # the BMC applies what it accepted: "not written" would have been untrue
        if all(bmc.state.caps[f"GPU_{g}"].set_point == 650 for g in range(4)):
            break
        await asyncio.sleep(0.1)
    assert [bmc.state.caps[f"GPU_{g}"].set_point for g in range(4)] == [650] * 4
    assert desired_from(out.result) == {f"gpu/{g}": 650 for g in range(4)}
