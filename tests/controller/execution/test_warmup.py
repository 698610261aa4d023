"""The warm-up at start (controller/execution/warmup.py), with real controller, BMC simulator and
sink processes: after a SIGKILL and a restart, the first wave on a warmed inventory makes exactly
the BMC calls of a steady-state wave (no login, no session sweep, no discovery on its path), and
without the warm-up it would not.

Read-backs standing in for pre-write GETs (docs/redfish.md, "Read-backs as priors") are turned off
here: they last `read_back_max_age` (60 s) after a wave's own writes, so they make a second wave
within a minute cheaper on any process, and a restart, like a minute's pause, starts without them;
the steady state compared is that of waves further apart than that."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import grpc
import pytest
from google.protobuf import empty_pb2

from bench.fanout_plan import Phase, activation
from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller._proto.devicecontroller.v1 import admin_pb2_grpc as agrpc
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc
from drills import stack as drill_stack
from drills.load import Load, send_until_acked
from drills.stack import Stack

pytestmark = pytest.mark.slow

BMCS = 4


async def _warmed(stack: Stack, times: int, within: float = 60.0) -> None:
    """Wait until the controller's log says its warm-up ended `times` times (once per start)."""
    deadline = time.monotonic() + within
    while True:
        text = stack.ctl.log_path.read_text(errors="replace")
        if text.count(f"warm-up: {BMCS} of {BMCS} devices ready") >= times:
            return
        assert "warm-up stopped" not in text and time.monotonic() < deadline, stack.ctl.log_tail()
        await asyncio.sleep(0.2)  # another process's log: polled


async def _reaped(stack: Stack, within: float = 60.0) -> None:
    """Wait until each BMC holds one session: the new process's, the killed one's deleted by the
    sweep its first login starts in the background (housekeeping that a wave's count must not
    catch: once in a loaded CI run it did, as one extra DELETE)."""
    deadline = time.monotonic() + within
    while [bmc["open_sessions"] for bmc in await stack.sims.stats()] != [1] * BMCS:
        assert time.monotonic() < deadline, await stack.sims.stats()
        await asyncio.sleep(0.2)


async def _wave(stack: Stack, phase: Phase) -> Counter[str]:
    """One activation per device; the BMC calls it made, by resource template."""
    await stack.sims.reset()
    ids = [f"{phase.group}-{d}" for d in stack.devices]
    tally = Load(stack.ctl.address, stack.devices, prefix=phase.group)
    async with grpc.aio.insecure_channel(stack.ctl.address) as channel:
        stub = dgrpc.DeviceControllerStub(channel)
        for device, rid in zip(stack.devices, ids, strict=True):
            assert await send_until_acked(tally, [stub], 0, activation(device, rid, phase), rid) == 0
    deadline = time.monotonic() + 60
    while not set(ids) <= set(stack.sink.counts):
        assert time.monotonic() < deadline, f"responses missing: {set(ids) - set(stack.sink.counts)}"
        await asyncio.sleep(0.1)  # the sink's record file: polled
        stack.sink.poll()
    answers = stack.sink.first()
    assert all(answers[rid].ok for rid in ids), [answers[rid].error for rid in ids]
    calls: Counter[str] = Counter()
    for bmc in await stack.sims.stats():
        calls.update({k: int(v) for k, v in bmc["calls"].items()})
    return calls


async def _status(stack: Stack) -> apb.ControllerStatus:
    async with grpc.aio.insecure_channel(stack.ctl.address) as channel:
        status: apb.ControllerStatus = await agrpc.DeviceControllerAdminStub(channel).GetStatus(
            empty_pb2.Empty()
        )
        return status


def _phase(k: int) -> Phase:
    # values all different from each other and from the simulator's defaults: every cap is written
    return Phase(f"wave{k}", f"warm-{k}", node=5000 - 100 * k, gpu=3200 - 100 * k, cpu=600 - 20 * k)


@pytest.mark.timeout(300)
async def test_after_a_restart_the_first_wave_on_a_warmed_inventory_runs_at_steady_state_cost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(drill_stack.REDFISH_OPTIONS, "read_back_max_age", 0.0)
    # generous timeouts: a call retried because a busy host answered late would be counted too
    monkeypatch.setitem(drill_stack.REDFISH_OPTIONS, "read_timeout", 60.0)
    monkeypatch.setitem(drill_stack.REDFISH_OPTIONS, "connect_timeout", 30.0)
    stack = Stack(tmp_path, bmcs=BMCS, database_url=f"sqlite:///{tmp_path / 'ctl.db'}", name="warm")
    try:
        await stack.start()
        await _warmed(stack, 1)
        warmup = (await _status(stack)).warmup  # `devicectl status` shows it
        assert warmup.finished and (warmup.total, warmup.done, warmup.failed) == (BMCS, BMCS, 0)
        await _wave(stack, _phase(1))
        steady = await _wave(stack, _phase(2))
        assert steady and not [k for k in steady if "SessionService" in k], steady

        stack.ctl.kill()  # a crash: the next process starts cold (no session, nothing cached)
        await stack.ctl.start()
        await _warmed(stack, 2)
        await _reaped(stack)  # the killed process's sessions are gone, and nothing else remains
        after_restart = await _wave(stack, _phase(3))
        assert after_restart == steady, (after_restart - steady, steady - after_restart)

        # without the warm-up the same wave logs in and sweeps on its way: the count can tell
        monkeypatch.setenv("DEVICECTL_WARMUP_CONCURRENCY", "0")
        stack.ctl.kill()
        await stack.ctl.start()
        cold = await _wave(stack, _phase(4))
        assert sum(cold.values()) > sum(steady.values())
        assert cold["POST /redfish/v1/SessionService/Sessions"] == BMCS  # each BMC logged in on the way
    finally:
        await stack.close()


@pytest.mark.timeout(300)
async def test_a_wave_during_the_warm_up_is_served_and_the_warm_up_still_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one device at a time over slow BMCs: the warm-up is still at work when the wave comes
    monkeypatch.setenv("DEVICECTL_WARMUP_CONCURRENCY", "1")
    stack = Stack(
        tmp_path, bmcs=BMCS, database_url=f"sqlite:///{tmp_path / 'ctl.db'}", name="warm", latency=0.2
    )
    try:
        await stack.start()
        calls = await _wave(stack, _phase(1))
        assert calls["POST /redfish/v1/SessionService/Sessions"] <= BMCS  # one login per BMC at most
        await _warmed(stack, 1, within=120.0)
        text = stack.ctl.log_path.read_text(errors="replace")
        assert f"warm-up: {BMCS} of {BMCS} devices ready" in text and "(0 failed" in text
    finally:
        await stack.close()
