"""A SIGKILL repeats at most one response outside a backlog's drain.

Delivery is at-least-once: a response the receiver has (or is receiving) whose `delivered_at` is
not committed is sent again by the next process. A pass used to start every device's head at
once, so a kill right after a restart's first pass repeated all of them (22 in one kill in issue
24's crash drill on PostgreSQL). The receiver here looks, as each response arrives, at how many
responses it already has that the database does not yet record as delivered: exactly what a
SIGKILL at that moment would send again. With shallow queues (one response per device, the crash
drill's steady state) that must never exceed one, the arriving response included.
"""

from __future__ import annotations

import asyncio

from controller.delivery.wire import SendWindow
from controller.store import Store
from tests.controller.api.test_acks import CountingSink
from tests.controller.api.test_service import ping
from tests.controller.conftest import memory_inventory


class KillWindowSink(CountingSink):
    """Records, at each arrival, the responses a kill at that moment would repeat."""

    store: Store | None = None

    def __init__(self, listen: str) -> None:
        super().__init__(listen)
        self.arrived: list[str] = []
        self.worst: list[str] = []

    async def DeviceResponse(self, request, context):  # type: ignore[no-untyped-def]
        if self.available and self.store is not None:
            self.arrived.append(request.request_id)
            pending = await self.store.list_requests(undelivered_only=True, limit=1000)
            window = set(self.arrived) & {r.request_id for r in pending}
            if len(window) > len(self.worst):
                self.worst = sorted(window)
        return await super().DeviceResponse(request, context)


async def test_a_pass_burst_leaves_at_most_one_response_unrecorded(start_controller, db_url: str) -> None:
    receiver = KillWindowSink("127.0.0.1:0")
    receiver.available = False  # responses wait in the outbox, as after a restart
    await receiver.start()
    devices = 12
    try:
        h = await start_controller(
            memory_inventory(devices), callback=receiver.address, delivery_probe_max_interval=0.2
        )
        rids = [f"w{i}" for i in range(devices)]
        for i, rid in enumerate(rids):
            await h.stub.SendDeviceRequest(ping(f"node{i:03d}", rid))
        store = receiver.store = h.controller.store
        async with asyncio.timeout(30):
            while await store.undelivered_count() < devices:  # noqa: ASYNC110 (no event to wait on)
                await asyncio.sleep(0.05)
        receiver.available = True  # the probe's success starts every device's head in one pass
        await receiver.wait_for(devices, timeout=30)
        assert sorted(receiver.arrived) == sorted(rids)
        assert all(receiver.counts[r] == 1 for r in rids)
        # one sent-but-unrecorded response at a time: a kill repeats at most one
        assert len(receiver.worst) <= 1, receiver.worst
    finally:
        await receiver.stop()


async def test_the_window_opens_only_for_a_drain_or_a_burst_it_cannot_keep_up_with() -> None:
    window = SendWindow(concurrency=2)
    inside: list[str] = []
    release = asyncio.Event()

    async def send(name: str, *, draining: bool = False) -> None:
        async with window.sending(draining=draining):
            inside.append(name)
            await release.wait()

    tasks = [asyncio.create_task(send(n)) for n in ("a", "b", "c")]
    await asyncio.sleep(0.05)
    assert inside == ["a"], "one unrecorded send at a time; b and c wait"
    tasks.append(asyncio.create_task(send("d")))  # more waiting than `concurrency`: a burst
    tasks.append(asyncio.create_task(send("e", draining=True)))  # within `concurrency` (2): waits
    await asyncio.sleep(0.05)
    assert inside == ["a", "d"]
    release.set()
    await asyncio.gather(*tasks)
    assert sorted(inside) == ["a", "b", "c", "d", "e"]


async def test_a_send_cancelled_while_it_waits_holds_nothing_of_the_window() -> None:
    """Cancelled waiting for the window, or holding the window and waiting for a slot: what it
    held is released, and later sends go through in turn."""
    window = SendWindow(concurrency=1)
    inside: list[str] = []
    release = {name: asyncio.Event() for name in ("drain", "late", "after")}

    async def send(name: str, *, draining: bool = False) -> None:
        async with window.sending(draining=draining):
            inside.append(name)
            if name in release:
                await release[name].wait()

    drain = asyncio.create_task(send("drain", draining=True))  # holds the only slot
    await asyncio.sleep(0.01)
    stuck = asyncio.create_task(send("stuck"))  # takes the window, waits for the slot
    await asyncio.sleep(0.01)
    queued = asyncio.create_task(send("queued"))  # waits for the window
    await asyncio.sleep(0.01)
    queued.cancel()
    stuck.cancel()
    await asyncio.gather(stuck, queued, return_exceptions=True)
    assert stuck.cancelled() and queued.cancelled() and inside == ["drain"]
    late = asyncio.create_task(send("late"))  # the window is free again; the slot is not yet
    await asyncio.sleep(0.01)
    assert inside == ["drain"]
    release["drain"].set()
    await asyncio.sleep(0.01)
    assert inside == ["drain", "late"]
    after = asyncio.create_task(send("after"))
    await asyncio.sleep(0.01)
    assert inside == ["drain", "late"], "one unrecorded send at a time"
    release["late"].set()
    release["after"].set()
    await asyncio.gather(drain, late, after)
    assert inside == ["drain", "late", "after"]
