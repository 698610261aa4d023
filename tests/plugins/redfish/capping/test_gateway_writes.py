"""Writes through a gateway that gives up, and writes whose answer is lost after sending
(docs/redfish.md, "Writes through gateways"): unknown until read back, never "not written", and
never written more than twice.

A real nginx (`nginx_gateway`) sits in front of the real HTTPS simulator, which answers writes late
(`late-reply`: the write lands, the reply is held) so that nginx's short `proxy_read_timeout` ends
them with its own 504 while the BMC has applied them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bmcsim import FaultMode, SimulatedBmc, ensure_tls_files
from controller import translate
from controller.desired.receipts import write_outcome
from plugins.base import (
    GpuPoliciesChange,
    GpuPolicy,
    Outcome,
    PolicyAction,
    PowerLimit,
    ProfileChange,
    RequestKind,
    WriteLog,
    WriteOutcome,
    recording,
)
from tests.plugins.redfish.capping.nginx_gateway import NginxGateway, nginx_gateway, require_nginx
from tests.plugins.redfish.harness import Harness

GPU_EM = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/{id}/EnvironmentMetrics"
CLEAR_OOB = GPU_EM + "/Actions/Oem/NvidiaEnvironmentMetrics.ClearOOBSetPoint"
#: how long the simulator holds a write's reply: far past nginx's proxy_read_timeout (0.4 s)
LATE = 3.0


def gpu1(watts: float | None) -> GpuPoliciesChange:
    if watts is None:
        return GpuPoliciesChange("rg", PolicyAction.UNSET)
    return GpuPoliciesChange("rg", PolicyAction.SET, policies=(GpuPolicy(1, PowerLimit(watts=watts)),))


@pytest.fixture
async def gateway(gb200: Harness, sim_certs: Path, tmp_path: Path) -> AsyncIterator[NginxGateway]:
    require_nginx()
    bmc = gb200.fleet.bmcs[0]
    tls = ensure_tls_files(sim_certs)
    async with nginx_gateway(bmc.url, tls, tmp_path / "nginx", read_timeout=0.4) as gw:
        yield gw
        bmc.faults.clear()
        await gb200.plugin.forget("node0")  # its session is deleted through nginx, still running


async def through(
    h: Harness,
    gw: NginxGateway,
    bmc: SimulatedBmc,
    request: Any,
    method: str = "update_gpu_policies",
    **kw: Any,
) -> Outcome[Any]:
    """`method` on `bmc` with the plugin pointed at the gateway in front of it (its receipts on
    `writes`, as the controller's `run_operation` records them)."""
    ctx = h.ctx(bmc, **kw)
    ctx = replace(ctx, endpoint=replace(ctx.endpoint, url=gw.url))
    with recording(WriteLog()) as log:
        out: Outcome[Any] = await getattr(h.plugin, method)(ctx, request)
    for client in h.plugin.pool.clients():
        await client.settled()
    if out.state is not None:
        h.states[bmc.index] = out.state
    return replace(out, writes=log.entries())


async def direct(h: Harness, bmc: SimulatedBmc, request: Any, **kw: Any) -> Outcome[Any]:
    """`update_gpu_policies` straight to the BMC, with its receipts."""
    with recording(WriteLog()) as log:
        out = await h.call("update_gpu_policies", bmc, request, **kw)
    return replace(out, writes=log.entries())


#: discovery reads each processor's EnvironmentMetrics once (which of them carries a limit)
DISCOVERED = 6


def writes_to(bmc: SimulatedBmc) -> int:
    """PATCHes and action POSTs the BMC received for GPU caps (logins are not counted)."""
    calls = bmc.stats.calls.items()
    return sum(n for (method, path), n in calls if method in ("PATCH", "POST") and "/Processors/" in path)


def diag(out: Outcome[Any]) -> str:
    """What the topology server's response says for the GPU (its `diag_msg`)."""
    kind = RequestKind.GPU_POLICIES_UPDATE
    response = translate.response_to_proto(kind, out.result, device="n", request_id="r")
    return str(response.gpu_policies_update.results[0].diag_msg)


async def test_a_504_on_a_write_that_landed_is_read_back_as_written(
    gb200: Harness, gateway: NginxGateway
) -> None:
    bmc = gb200.fleet.bmcs[0]
    bmc.faults.set(FaultMode.LATE_REPLY, writes_only=True, hang_seconds=LATE)  # every write
    out = await through(gb200, gateway, bmc, gpu1(400))
    result = out.result.results[0]
    assert bmc.state.caps["GPU_1"].set_point == 400  # the BMC applied it behind nginx's 504
    assert result.ok and result.write is WriteOutcome.WRITTEN and result.applied_watts == 400, result
    assert "HTTP 504, a gateway's error" in result.message
    assert "read-back shows the value in force" in result.message
    assert writes_to(bmc) == 1  # read, not written again
    # discovery's reads of the processors' limits (the GPU's is its pre-write read), then the
    # read-back that settled it
    assert gb200.calls(bmc)["GET " + GPU_EM] == DISCOVERED + 1
    (receipt,) = out.writes
    assert receipt.status.startswith("ok (read back; the answer was HTTP 504") and receipt.after == 400
    assert write_outcome(receipt) is WriteOutcome.WRITTEN
    assert diag(out).startswith("written")
    assert "upstream timed out" in gateway.errors()  # it really was nginx that gave up
    assert out.state is not None and out.state["priors"]["rg:rg"]["gpu/1"]["watts"] == 1200

    # the restore (deactivation) through the same gateway: its 504 is read back the same way
    gb200.reset()
    out = await through(gb200, gateway, bmc, gpu1(None))
    result = out.result.results[0]
    assert bmc.state.caps["GPU_1"].set_point == 1200
    assert result.ok and result.write is WriteOutcome.WRITTEN and result.applied_watts == 1200, result
    assert "read-back shows the value in force" in result.message
    assert writes_to(bmc) == 1
    assert out.state is not None and not out.state.get("priors", {}).get("rg:rg")  # restored: forgotten
    bmc.faults.clear()


async def test_a_504_whose_read_back_fails_is_unknown_never_not_written(
    gb200: Harness, gateway: NginxGateway
) -> None:
    bmc = gb200.fleet.bmcs[0]
    await through(gb200, gateway, bmc, gpu1(500))
    # the next write lands but nginx answers 504, and then the BMC refuses every request
    bmc.faults.set(
        FaultMode.LATE_REPLY, writes_only=True, hang_seconds=LATE, count=1, then={"mode": "http500"}
    )
    gb200.reset()
    out = await through(gb200, gateway, bmc, gpu1(400))
    bmc.faults.clear()
    result = out.result.results[0]
    assert bmc.state.caps["GPU_1"].set_point == 400
    assert not result.ok and result.write is WriteOutcome.UNKNOWN, result
    assert "HTTP 504" in result.message and "the read-back failed too" in result.message
    assert "whether it landed is unknown" in result.message
    assert writes_to(bmc) == 1
    (receipt,) = out.writes
    assert receipt.status == "unknown (the answer was HTTP 504)" and receipt.after is None
    assert "the read-back failed (" in receipt.note and write_outcome(receipt) is WriteOutcome.UNKNOWN
    assert diag(out).startswith("unknown (the BMC's answer never came); ")


async def test_a_write_the_bmc_dropped_is_read_then_written_once_more(
    gb200: Harness, gateway: NginxGateway
) -> None:
    bmc = gb200.fleet.bmcs[0]
    # the BMC drops the connection after the request (nothing applied): nginx answers 502
    bmc.faults.set(FaultMode.RESET, writes_only=True, count=1)
    out = await through(gb200, gateway, bmc, gpu1(450))
    result = out.result.results[0]
    assert result.ok and result.write is WriteOutcome.WRITTEN and result.applied_watts == 450, result
    assert bmc.state.caps["GPU_1"].set_point == 450
    assert writes_to(bmc) == 2  # the second only after a read showed the first had not landed
    # discovery's reads (the GPU's is its pre-write read), after the lost write, the read-back
    assert gb200.calls(bmc)["GET " + GPU_EM] == DISCOVERED + 2
    first, second = out.writes
    assert first.status == "error: 502" and write_outcome(first) is WriteOutcome.UNKNOWN
    assert first.after == 1200 and "read back: 1200 W (default) in force; sent once more" in first.note
    assert second.status == "200" and second.after == 450


async def test_a_gateway_that_never_lets_a_write_through_gets_it_twice_at_most(
    gb200: Harness, gateway: NginxGateway
) -> None:
    bmc = gb200.fleet.bmcs[0]
    bmc.faults.set(FaultMode.RESET, writes_only=True)  # every write: 502, nothing ever applied
    out = await through(gb200, gateway, bmc, gpu1(450))
    bmc.faults.clear()
    result = out.result.results[0]
    assert bmc.state.caps["GPU_1"].set_point == 1200
    assert writes_to(bmc) == 2
    # what is in force was read, but a write a gateway gave up on may still land: unknown
    assert not result.ok and result.write is WriteOutcome.UNKNOWN and result.applied_watts == 1200, result
    assert "HTTP 502" in result.message and "read back: 1200 W" in result.message
    assert [w.status for w in out.writes] == ["error: 502", "unknown (the answer was HTTP 502)"]
    assert all(write_outcome(w) is WriteOutcome.UNKNOWN for w in out.writes)


async def test_a_504_on_a_profile_action_is_read_back_not_repeated(
    gb200: Harness, gateway: NginxGateway
) -> None:
    bmc = gb200.fleet.bmcs[0]
    bmc.faults.set(FaultMode.LATE_REPLY, writes_only=True, hang_seconds=LATE)
    out = await through(gb200, gateway, bmc, ProfileChange(enable=(5,), verify=False), "enable_profiles")
    assert out.result.ok, out.result.error
    assert all(bmc.state.profiles[f"GPU_{g}"].requested == 1 << 2 for g in range(4))  # id 5 is bit 2
    assert all("HTTP 504" in s.message and "read-back shows" in s.message for s in out.result.gpus)
    posts = sum(n for (m, path), n in bmc.stats.calls.items() if m == "POST" and "EnableProfiles" in path)
    assert posts == 4  # one per GPU, each read back once

    # the BMC drops every DisableProfiles after the request (nothing applied): nginx answers 502
    bmc.faults.set(FaultMode.RESET, writes_only=True)
    out = await through(gb200, gateway, bmc, ProfileChange(disable=(5,), verify=False), "disable_profiles")
    bmc.faults.clear()
    assert not out.result.ok and all(not s.ok for s in out.result.gpus)
    for status in out.result.gpus:
        assert (
            "HTTP 502" in status.message
            and "read back: requested 5; whether it lands is unknown" in status.message
        )


async def test_a_reply_lost_after_sending_is_read_back_and_its_receipt_says_so(gb200: Harness) -> None:
    """No gateway: the BMC applies the write and its reply never comes within `read_timeout`."""
    bmc = gb200.fleet.bmcs[0]
    bmc.faults.set(FaultMode.LATE_REPLY, writes_only=True, hang_seconds=LATE, count=1)
    out = await direct(gb200, bmc, gpu1(420), options={"read_timeout": 0.4})
    result = out.result.results[0]
    assert result.ok and result.write is WriteOutcome.WRITTEN and result.applied_watts == 420, result
    assert "its answer was lost after it was sent" in result.message
    assert writes_to(bmc) == 1
    (receipt,) = out.writes
    assert receipt.status == "ok (read back; no answer came)" and receipt.after == 420
    assert write_outcome(receipt) is WriteOutcome.WRITTEN
