"""A backlog of responses drains through the deliveries themselves, never at the pace of the
delivery loop's timed passes, and still one unrecorded response per device at most.

After a topology outage (or whenever many responses of one device wait), each device's delivery
goes on with its next response as soon as one is recorded. A delivery pass used to skip
the device whose delivery had just ended, so its next response waited for the next timed full
pass (every 0.5 s): two responses per device a second. Here the timed passes are pushed an hour
apart, so a drain that depends on them cannot finish, whatever the machine's speed.
"""

from __future__ import annotations

import asyncio

import pytest

from controller.delivery import outbox as delivery
from controller.store import Store
from tests.controller.conftest import memory_inventory
from tests.controller.test_acks import CountingSink, order_of
from tests.controller.test_service import ping


class OneUnrecordedSink(CountingSink):
    """Checks, as each response arrives, that every earlier response of its device is already
    recorded as delivered: a crash may then repeat at most one response per device."""

    store: Store | None = None

    def __init__(self, listen: str) -> None:
        super().__init__(listen)
        self.unrecorded: list[tuple[str, set[str]]] = []

    async def DeviceResponse(self, request, context):  # type: ignore[no-untyped-def]
        if self.available and self.store is not None:
            device = request.device
            earlier = {r.request_id for r in self.responses if r.device == device}
            pending = await self.store.list_requests(device=device, undelivered_only=True, limit=1000)
            left = earlier & {r.request_id for r in pending}
            if left:
                self.unrecorded.append((request.request_id, left))
        return await super().DeviceResponse(request, context)


async def test_a_backlog_drains_without_waiting_for_timed_passes(
    start_controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delivery, "_IDLE_PASS_EVERY", 3600.0)
    receiver = OneUnrecordedSink("127.0.0.1:0")
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
        store = receiver.store = h.controller.store
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
        # the read-ahead sends a device's next response only after the last one is recorded
        assert not receiver.unrecorded, receiver.unrecorded[:5]
    finally:
        await receiver.stop()
