"""A response the receiver acknowledged is recorded as delivered even when shutdown ends its
delivery: the next process never sends it again.

At shutdown the delivery loop cancels the deliveries in flight (and the flush's timeout used to
cancel them too). One cancelled after the receiver's acknowledgement but before its `delivered_at`
committed left the row waiting, and the next process sent it again: a duplicate caused by our own
shutdown, not by a kill. Here the record is held up (a store whose `mark_delivered` waits for the
test, a real store underneath) while the outbox is stopped, with or without a flush that times out
first; a real gRPC receiver counts what it gets.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.delivery.outbox import Delivery
from controller.delivery.sink import TopologySink
from controller.store import Store
from tests.controller.api.test_acks import until
from tests.controller.store.test_completion import finish, req


class SlowMarks:
    """The real store, but `mark_delivered` waits until `release` is set."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.marking = asyncio.Event()
        self.release = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def mark_delivered(self, outbox_id: int, at: datetime) -> None:
        self.marking.set()
        await self.release.wait()
        await self._store.mark_delivered(outbox_id, at)


def outbox(store: Any, sink: TopologySink) -> Delivery:
    return Delivery(store, sink.address, concurrency=4, max_backoff=0.5, timeout=5.0, probe_max=0.2)


@pytest.mark.parametrize("flush_first", [False, True], ids=["stop", "flush-timeout-then-stop"])
async def test_an_acknowledged_response_is_recorded_before_the_outbox_stops(
    store: Store, sink: TopologySink, flush_first: bool
) -> None:
    await store.accept([req("s1")])
    response = pb.DeviceControllerResponse(request_id="s1", device="dev1").SerializeToString()
    await store.complete(dataclasses.replace(finish("s1"), response=response))
    slow = SlowMarks(store)
    delivery = outbox(slow, sink)
    run = asyncio.create_task(delivery.run())
    try:
        await sink.wait_for({"s1"}, timeout=10)  # acknowledged...
        async with asyncio.timeout(10):
            await slow.marking.wait()  # ... and its record under way
        if flush_first:
            await delivery.flush(timeout=0.2)  # the record outlasts the flush
            # the loop still runs after the flush: its passes must not send the row again
            passes = delivery._passes
            await until(lambda: delivery._passes > passes + 1, 10, "a pass after the flush")
        delivery.stop()
        # the loop ends its deliveries; only then may the record go on
        await until(lambda: not delivery._tasks, 10, "the deliveries ended")
        slow.release.set()
        async with asyncio.timeout(10):
            await run
    finally:
        slow.release.set()
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
    assert await store.undelivered_count() == 0, "the acknowledged response is still waiting"
    # the next process: a fresh outbox on the same database sends nothing again
    again = outbox(store, sink)
    rerun = asyncio.create_task(again.run())
    try:
        await until(lambda: again._passes > 0, 10, "a pass of the next process")
        await again.flush(timeout=2.0)
    finally:
        again.stop()
        async with asyncio.timeout(10):
            await rerun
    assert sink.counts["s1"] == 1
    assert await store.due_outbox(datetime.now(UTC)) == []
