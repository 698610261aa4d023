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
import logging

import pytest

from controller.delivery import outbox as delivery
from controller.store import Store
from drills.crash_figures import BACKLOG_STARTED, BACKLOGS_DELIVERED
from tests.controller.api.test_acks import CountingSink, order_of
from tests.controller.api.test_service import ping
from tests.controller.conftest import memory_inventory


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
    start_controller, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(delivery, "_IDLE_PASS_EVERY", 3600.0)
    caplog.set_level(logging.INFO, logger=delivery.__name__)
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
        # the backlog's delivery is announced when it starts and when the last device's ends (the
        # crash drill reads these lines: meanwhile a kill may repeat one response per device)
        lines = [r.getMessage() for r in caplog.records if r.name == delivery.__name__]
        said = [m for m in lines if BACKLOG_STARTED in m or BACKLOGS_DELIVERED in m]
        assert len(said) >= 2 and BACKLOG_STARTED in said[0] and BACKLOGS_DELIVERED in said[-1], lines
        assert sum(BACKLOG_STARTED in m for m in said) == sum(BACKLOGS_DELIVERED in m for m in said), said
    finally:
        await receiver.stop()


class HeldSink(CountingSink):
    """Holds each device's first response until `release` is set, so the device's next request
    completes while that first delivery is still in flight."""

    def __init__(self, listen: str) -> None:
        super().__init__(listen)
        self.release = asyncio.Event()
        self.held = asyncio.Event()
        self._seen: set[str] = set()

    async def DeviceResponse(self, request, context):  # type: ignore[no-untyped-def]
        if request.device not in self._seen:
            self._seen.add(request.device)
            self.held.set()
            await self.release.wait()
        return await super().DeviceResponse(request, context)


async def test_a_lone_response_reads_nothing_ahead_and_a_later_one_still_follows_in_order(
    start_controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In steady state each device has one response waiting: its delivery reads no next rows
    (the pass saw none). One completed while that delivery is in flight is sent after it, by the
    pass that follows the delivery's end, not by a timed pass (pushed an hour apart here)."""
    monkeypatch.setattr(delivery, "_IDLE_PASS_EVERY", 3600.0)
    reads: list[str] = []
    original = Store.next_outbox

    async def counted(self: Store, device: str, after_id: int, limit: int):  # type: ignore[no-untyped-def]
        reads.append(device)
        return await original(self, device, after_id, limit)

    monkeypatch.setattr(Store, "next_outbox", counted)
    receiver = HeldSink("127.0.0.1:0")
    receiver.release.set()
    await receiver.start()
    try:
        h = await start_controller(memory_inventory(10), callback=receiver.address)
        for i in range(4):  # one at a time: each device's only response when its pass reads it
            await h.stub.SendDeviceRequest(ping(f"node{i:03d}", f"lone-{i}"))
            await receiver.wait_for(i + 1, timeout=10)
        assert reads == [], "a delivery read ahead though its device had nothing else waiting"

        receiver.release.clear()
        receiver.held.clear()
        await h.stub.SendDeviceRequest(ping("node009", "first"))
        await asyncio.wait_for(receiver.held.wait(), 10)  # "first" is being delivered
        await h.stub.SendDeviceRequest(ping("node009", "second"))
        store = h.controller.store
        async with asyncio.timeout(10):
            while len(await store.list_requests(device="node009", undelivered_only=True, limit=10)) < 2:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        receiver.release.set()
        await receiver.wait_for(6, timeout=10)
        assert order_of(receiver, "node009") == ["first", "second"]
        assert all(receiver.counts[r] == 1 for r in ("first", "second"))
        assert reads == [], "the later response came through a pass, not a read-ahead"
    finally:
        await receiver.stop()
