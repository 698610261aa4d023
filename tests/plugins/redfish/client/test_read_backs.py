"""Read-backs as priors (docs/redfish.md, "Read-backs as priors"): our last read-back of a limit
stands in for the next change's pre-write GET while it is valid; restores, "already in force",
verification reads and everything after an error still ask the BMC."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from plugins.base import (
    Allocation,
    Empty,
    GpuPoliciesChange,
    GpuPolicy,
    PolicyAction,
    PolicyChange,
    PowerLimit,
)
from plugins.redfish._client.client import Document
from plugins.redfish._client.readbacks import ReadBacks, offered, priors_from_read_backs
from tests.plugins.redfish.client.test_connections import one_gpu
from tests.plugins.redfish.harness import Harness
from tests.plugins.redfish.platforms.test_gb200 import CHASSIS_EM, PROC_EM, node_policy

SET = PolicyAction.SET
#: the 8 caps of a GB200 tray activation: 2 superchip modules, 4 GPUs, 2 CPUs
WRITES = {"PATCH " + CHASSIS_EM: 2, "PATCH " + PROC_EM: 6}
READ_BACKS = {"GET " + CHASSIS_EM: 2, "GET " + PROC_EM: 6}


def activate(group: str, node: float, gpu: float, cpu: float) -> Allocation:
    return Allocation(group, PolicyChange(SET, node_policy(node, gpu=gpu, cpu=cpu)))


def gpus(group: str, gpu: int, watts: float) -> GpuPoliciesChange:
    return GpuPoliciesChange(group, SET, policies=(GpuPolicy(gpu, PowerLimit(watts=watts)),))


def both(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in sorted(set(a) | set(b))}


async def test_a_new_scope_after_our_own_writes_costs_16_calls_and_restores_as_before(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    out = await gb200.call("activate_allocation", bmc, activate("first", 5000, 3200, 600))
    assert out.result.ok, out.result.error
    gb200.reset()
    out = await gb200.call("activate_allocation", bmc, activate("steady", 4800, 3000, 500))
    assert out.result.ok, out.result.error
    # PATCH and read-back per cap: the first activation's read-backs are the priors
    assert gb200.calls(bmc) == both(WRITES, READ_BACKS) and bmc.stats.total_calls == 16
    priors = out.state["priors"]["rg:steady"]
    assert priors["gpu/0"]["watts"] == 800 and priors["module/0"]["watts"] == 2500
    assert priors["cpu/0"]["watts"] == 300
    assert bmc.state.caps["GPU_0"].set_point == 750

    # restore is unchanged: a fresh GET, then PATCH and read-back, per cap
    gb200.reset()
    out = await gb200.call("deactivate_allocation", bmc, Allocation("steady"))
    assert out.result.ok, out.result.error
    assert gb200.calls(bmc) == both(WRITES, {"GET " + CHASSIS_EM: 4, "GET " + PROC_EM: 12})
    assert (
        bmc.state.caps["GPU_0"].set_point == 800 and bmc.state.caps["HGX_ProcessorModule_0"].set_point == 2500
    )


async def test_without_the_window_every_first_change_in_a_scope_reads_first(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    off = {"read_back_max_age": 0}
    await gb200.call("activate_allocation", bmc, activate("first", 5000, 3200, 600), options=off)
    gb200.reset()
    out = await gb200.call("activate_allocation", bmc, activate("steady", 4800, 3000, 500), options=off)
    assert out.result.ok, out.result.error
    assert gb200.calls(bmc) == both(WRITES, {"GET " + CHASSIS_EM: 4, "GET " + PROC_EM: 12})


async def test_first_contact_writes_from_discoverys_read_of_each_limit(gb200: Harness) -> None:
    """A node never seen: discovery's GET of each limit it chose is the first change's pre-write
    read in the same operation (8 GETs fewer); the prior recorded is what that GET showed."""
    bmc = gb200.fleet.bmcs[0]
    out = await gb200.call("activate_allocation", bmc, activate("first", 5000, 3200, 600))
    assert out.result.ok, out.result.error
    calls = gb200.calls(bmc)
    # discovery's GET of each limit, PATCH, read-back: nothing read twice before its write (the
    # fifth chassis GET is discovery's read of HGX_Chassis_0's, a module's evidence, not a limit)
    assert {k: calls[k] for k in (*WRITES, *READ_BACKS)} == both(
        WRITES, {"GET " + CHASSIS_EM: 5, "GET " + PROC_EM: 12}
    )
    priors = out.state["priors"]["rg:first"]
    assert priors["gpu/0"] == {
        "watts": 1200.0,
        "capped": False,
        "mode": "Automatic",
        "uri": PROC_EM.format(id="GPU_0"),
        "persistency": "off",  # as NVIDIA shows a GPU's (a captured GB300 tray),
    }
    assert bmc.state.caps["GPU_0"].set_point == 800


async def test_a_later_operation_never_writes_from_discoverys_read(gb200: Harness) -> None:
    """Discovery's reads serve only the operation that made them: the first change of a later
    request reads every limit itself."""
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("std_metrics", bmc, Empty())  # discovers
    gb200.reset()
    out = await gb200.call("activate_allocation", bmc, activate("first", 5000, 3200, 600))
    assert out.result.ok, out.result.error
    assert gb200.calls(bmc) == both(WRITES, {"GET " + CHASSIS_EM: 4, "GET " + PROC_EM: 12})


async def test_a_read_back_older_than_the_window_is_not_used(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    short = {"read_back_max_age": 0.2}
    await gb200.call("update_gpu_policies", bmc, one_gpu(0, 700), options=short)
    await asyncio.sleep(0.3)
    gb200.reset()
    out = await gb200.call("update_gpu_policies", bmc, gpus("other", 0, 650), options=short)
    assert out.result.results[0].ok
    assert gb200.calls(bmc) == {"GET " + PROC_EM: 2, "PATCH " + PROC_EM: 1}


async def test_already_in_force_is_never_judged_from_a_read_back(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("update_gpu_policies", bmc, one_gpu(0, 700))
    bmc.state.caps["GPU_0"].set_point = 650  # another tool changes it; our read-back says 700
    gb200.reset()
    out = await gb200.call("update_gpu_policies", bmc, gpus("other", 0, 700))
    assert out.result.results[0].ok and bmc.state.caps["GPU_0"].set_point == 700
    # the read-back equals the target: the BMC is asked, says 650, and the cap is written
    assert gb200.calls(bmc) == {"GET " + PROC_EM: 2, "PATCH " + PROC_EM: 1}


async def test_strong_etags_send_the_read_backs_etag_and_a_412_reads_again(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    strong = {"etag_policy": "strong"}
    await gb200.call("update_gpu_policies", bmc, one_gpu(1, 700), options=strong)
    gb200.reset()
    out = await gb200.call("update_gpu_policies", bmc, one_gpu(1, 710), options=strong)
    assert out.result.results[0].ok and bmc.state.caps["GPU_1"].set_point == 710
    assert gb200.calls(bmc) == {"GET " + PROC_EM: 1, "PATCH " + PROC_EM: 1}  # If-Match with its ETag

    cap = bmc.state.caps["GPU_1"]
    cap.set_point, cap.revision = 650, cap.revision + 1  # changed behind our back: a new ETag
    gb200.reset()
    out = await gb200.call("update_gpu_policies", bmc, gpus("job", 1, 720), options=strong)
    assert out.result.results[0].ok and bmc.state.caps["GPU_1"].set_point == 720
    assert bmc.stats.responses.get(412) == 1  # the stale ETag was refused; nothing changed then
    assert gb200.calls(bmc) == {"GET " + PROC_EM: 2, "PATCH " + PROC_EM: 2}  # 412, GET, PATCH, GET
    # the prior of the new scope is what the BMC said after the 412, not the stale read-back
    assert out.state["priors"]["rg:job"]["gpu/1"]["watts"] == 650
    out = await gb200.call(
        "update_gpu_policies", bmc, GpuPoliciesChange("job", PolicyAction.UNSET), options=strong
    )
    assert out.result.results[0].ok and bmc.state.caps["GPU_1"].set_point == 650


async def test_verification_reads_always_ask_the_bmc(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("update_gpu_policies", bmc, one_gpu(2, 700))
    bmc.state.caps["GPU_2"].set_point = 640  # drift: someone else changed it
    out = await gb200.call("std_metrics", bmc, Empty())
    assert out.result.ok
    assert [g.limit_watts for g in out.result.metrics.gpus] == [1200, 1200, 640, 1200]


async def test_a_failed_request_drops_every_read_back(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("update_gpu_policies", bmc, one_gpu(0, 700))
    (client,) = gb200.plugin.pool.clients()
    assert len(client.read_backs) == 1
    bmc.faults.set("http503", retry_after=0, count=1)
    await gb200.call("std_metrics", bmc, Empty())  # retried and answered, but the 503 was an error
    assert len(client.read_backs) == 0
    gb200.reset()
    await gb200.call("update_gpu_policies", bmc, gpus("other", 0, 650))
    assert gb200.calls(bmc) == {"GET " + PROC_EM: 2, "PATCH " + PROC_EM: 1}


def _doc(value: int) -> Document:
    return Document("/x", {"SetPoint": value})


def _raw(value: int) -> bytes:
    return b'{"SetPoint": %d}' % value


def test_only_read_backs_fill_and_a_write_or_failure_in_flight_spoils_them() -> None:
    rb = ReadBacks(max_age=60)
    ticket = rb.ticket("/x")
    rb.read("/x", ticket, _doc(1), _raw(1))
    assert rb.peek("/x") is None  # an ordinary read of a resource we have not written

    rb.writing("/x")
    stale = rb.ticket("/x")
    rb.writing("/x")  # a second write while the first one's read-back is in flight
    rb.read("/x", stale, _doc(2), _raw(2))
    assert rb.peek("/x") is None
    rb.read("/x", rb.ticket("/x"), _doc(3), _raw(3))
    found = rb.peek("/x")
    assert found is not None and found[0] == _doc(3) and rb.still("/x", found[1]) == _doc(3) and rb.hits == 1

    rb.writing("/x")
    assert rb.peek("/x") is None  # dropped before the write goes out
    ticket = rb.ticket("/x")
    rb.clear()  # a failure while the read-back was in flight
    rb.read("/x", ticket, _doc(4), _raw(4))
    assert rb.peek("/x") is None and len(rb) == 0


def test_an_entry_expires_and_a_zero_window_keeps_nothing(monkeypatch: Any) -> None:
    rb = ReadBacks(max_age=5)
    rb.writing("/x")
    rb.read("/x", rb.ticket("/x"), _doc(1), _raw(1))
    found = rb.peek("/x")
    assert found is not None
    now = time.monotonic()
    monkeypatch.setattr(time, "monotonic", lambda: now + 6)
    assert rb.peek("/x") is None and rb.still("/x", found[1]) is None and rb.hits == 0
    off = ReadBacks(max_age=0)
    off.writing("/x")
    off.read("/x", off.ticket("/x"), _doc(1), _raw(1))
    assert len(off) == 0


def test_a_read_back_offered_is_used_only_while_it_is_still_the_one_kept() -> None:
    rb = ReadBacks(max_age=60)
    rb.writing("/x")
    rb.read("/x", rb.ticket("/x"), _doc(1), _raw(1))
    found = rb.peek("/x")
    assert found is not None and offered("/x") is None
    with priors_from_read_backs({"/x": found[1]}):
        assert offered("/x") == found[1] and offered("/y") is None
        rb.writing("/x")  # e.g. another device's operation behind the same BMC
        assert rb.still("/x", found[1]) is None
    assert offered("/x") is None
