"""The hourly re-application cap is counted in the journal: it holds across a restart (a new
DriftChecker on the same database) and in another controller sharing the database, on SQLite and
PostgreSQL."""

from __future__ import annotations

import dataclasses
from typing import Any

from controller.desired.drift import DriftChecker
from controller.desired.limits import REAPPLY_PREFIX, reapply_event
from controller.inventory import DeviceEntry
from controller.store import DriftCheck
from plugins.nvml.testing import FakeNode
from tests.controller.api.test_service import gpu_caps
from tests.controller.desired.test_drift import eventually

DEVICE = "gpu-node-1"


def checker(h: Any) -> DriftChecker:
    c = h.controller
    settings = dataclasses.replace(c.settings, drift_reapply="gpu-node-*", drift_max_reapply_per_hour=1)
    return DriftChecker(c.store, c.runner, c.dispatcher, settings, inventory=c.inventory)


async def check_when_idle(drift: DriftChecker) -> DriftCheck:
    """A check that ran (checks skip a device while a request runs on it)."""
    return await eventually(lambda: drift.check(DEVICE), "a check that ran")


async def test_the_cap_holds_after_a_restart_and_in_another_controller(
    db_url: str, h100x4: FakeNode, sink: Any, start_controller: Any
) -> None:
    for gpu in h100x4.fake.gpus:
        gpu.persistence = False
    h = await start_controller({DEVICE: DeviceEntry(DEVICE, "nvml", {})})  # drift_interval 0: no loop
    await h.stub.SendDeviceRequest(gpu_caps(DEVICE, "set-1", {0: 400, 1: 400}))
    await sink.wait_for({"set-1"}, timeout=30)

    h100x4.fake.unload_driver()
    first = await check_when_idle(checker(h))
    assert first.action.startswith(f"reapply: {REAPPLY_PREFIX}")
    await eventually(lambda: _limit_is(h100x4, 400.0), "re-applied")

    refused = "report: 1 re-applications in the last hour (another tool may be changing it)"
    h100x4.fake.unload_driver()  # drifts again: a new checker, as after a restart, still refuses
    second = await check_when_idle(checker(h))
    assert second.drifted and second.action == refused
    # and so does another controller on the same database (its own store and engine) once it
    # serves the device: on PostgreSQL only the holder of the device's shard checks it, so the
    # first one stops and hands its shards over
    await h.controller.stop(grace=1.0)
    other = await start_controller({DEVICE: DeviceEntry(DEVICE, "nvml", {})})
    assert (await check_when_idle(checker(other))).action == refused
    assert h100x4.limit_w(0) == 700.0
    since = first.at.replace(year=first.at.year - 1)
    ids = await other.controller.store.request_ids_since(DEVICE, REAPPLY_PREFIX, since)
    assert [reapply_event(i) for i in ids] == [reapply_event(first.action.removeprefix("reapply: "))]
    assert await other.controller.store.request_ids_since(DEVICE, REAPPLY_PREFIX, second.at) == []


async def _limit_is(node: FakeNode, watts: float) -> bool:
    return node.limit_w(0) == watts and node.limit_w(1) == watts
