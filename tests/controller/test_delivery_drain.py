"""A backlog of responses drains through the deliveries themselves, never at the pace of the
delivery loop's timed passes.

After a topology outage (or whenever many responses of one device wait), each device's delivery
goes on with its next response as soon as one is recorded. A delivery pass used to skip
the device whose delivery had just ended, so its next response waited for the next timed full
pass (every 0.5 s): two responses per device a second. Here the timed passes are pushed an hour
apart, so a drain that depends on them cannot finish, whatever the machine's speed.
"""

from __future__ import annotations

import asyncio

import pytest

from controller import delivery
from tests.controller.conftest import memory_inventory
from tests.controller.test_acks import CountingSink, order_of
from tests.controller.test_service import ping


async def test_a_backlog_drains_without_waiting_for_timed_passes(
    start_controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delivery, "_IDLE_PASS_EVERY", 3600.0)
    receiver = CountingSink("127.0.0.1:0")
    receiver.available = False  # the receiver answers UNAVAILABLE: the backlog builds up
    await receiver.start()
    devices, each = 4, 40
    try:
        h = await start_controller(
            memory_inventory(devices), callback=receiver.address, delivery_probe_max_interval=0.2
        )
        sent = {f"node{i:03d}": [f"d{i}-{n}" for n in range(each)] for i in range(devices)}
        for n in range(each):
            for device, rids in sent.items():
                await h.stub.SendDeviceRequest(ping(device, rids[n]))
        store = h.controller.store
        async with asyncio.timeout(30):
            while await store.undelivered_count() < devices * each:  # noqa: ASYNC110 (no event to wait on)
                await asyncio.sleep(0.05)
        assert receiver.refused > 0, "the probe met the outage"
        receiver.available = True
        # probes keep their own schedule (0.2 s); everything after the first success must
        # follow from the deliveries themselves
        await receiver.wait_for(devices * each, timeout=30)
        for device, rids in sent.items():
            assert order_of(receiver, device) == rids
        assert all(receiver.counts[r] == 1 for rids in sent.values() for r in rids)
    finally:
        await receiver.stop()
