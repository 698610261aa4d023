"""The callback channel's own reconnect back-off stays within the delivery probe interval.

gRPC backs reconnect attempts to a down receiver off exponentially (1 s, 1.6 s, 2.56 s, ... up to
120 s): after a long topology outage the first probe could wait many seconds for the channel to
try again although the receiver was back. The delivery worker caps that back-off at 0.5 s
(within `delivery_probe_max_interval`) and probes as soon as the channel reconnects. Observed
here without a clock: a listener that accepts and drops every connection counts the channel's
attempts; with gRPC's defaults twelve attempts take well over a minute, within the cap a few
seconds.
"""

from __future__ import annotations

import asyncio
import time

from controller.delivery.sink import TopologySink
from controller.delivery.wire import reconnect_options
from tests.controller.api.test_service import ping
from tests.serve_process import free_port


class _Refusing:
    """A receiver that is down: it accepts each TCP connection and closes it at once."""

    def __init__(self, enough: int) -> None:
        self.attempts = 0
        self.enough = asyncio.Event()  # set at the `enough`-th attempt
        self._enough = enough
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        async def drop(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.attempts += 1
            if self.attempts >= self._enough:
                self.enough.set()
            writer.close()

        self.server = await asyncio.start_server(drop, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


def test_reconnect_options_are_bounded_by_the_probe_interval() -> None:
    # attempts every 0.5 s at most; a connection attempt may still take the probe interval
    assert dict(reconnect_options(5.0)) == {
        "grpc.initial_reconnect_backoff_ms": 500,
        "grpc.min_reconnect_backoff_ms": 5000,
        "grpc.max_reconnect_backoff_ms": 500,
    }
    assert dict(reconnect_options(0.2)) == {
        "grpc.initial_reconnect_backoff_ms": 200,
        "grpc.min_reconnect_backoff_ms": 200,
        "grpc.max_reconnect_backoff_ms": 200,
    }
    assert dict(reconnect_options(0.0))["grpc.max_reconnect_backoff_ms"] == 100  # never a busy loop


async def test_callback_channel_keeps_trying_at_the_probe_interval_through_a_long_outage(
    start_controller,
) -> None:
    down = _Refusing(enough=12)
    port = await down.start()
    receiver: TopologySink | None = None
    try:
        h = await start_controller(callback=f"127.0.0.1:{port}", delivery_probe_max_interval=0.5)
        await h.stub.SendDeviceRequest(ping("node000", "r1"))
        # bounded wait for an event: with gRPC's default back-off the 12th attempt comes ~100 s
        # after the first, within the 0.5 s cap after about 6 s
        await asyncio.wait_for(down.enough.wait(), 40)
        await down.stop()
        receiver = TopologySink(f"127.0.0.1:{port}")
        await receiver.start()
        await receiver.wait_for({"r1"}, timeout=30)
        assert receiver.counts["r1"] == 1
    finally:
        if receiver is not None:
            await receiver.stop()
        else:
            await down.stop()


async def test_receiver_back_is_probed_when_the_channel_reconnects_not_at_the_next_probe(
    start_controller,
) -> None:
    """The first response follows the receiver's return by about one reconnect attempt (0.5 s),
    however far away the next timed probe is (up to `delivery_probe_max_interval`)."""
    port = free_port()  # nothing listens there yet
    h = await start_controller(callback=f"127.0.0.1:{port}", delivery_probe_max_interval=30)
    delivery = h.controller.delivery
    await h.stub.SendDeviceRequest(ping("node000", "r1"))
    async with asyncio.timeout(20):
        while not delivery.destination.failing:  # noqa: ASYNC110 (no event to wait on)
            await asyncio.sleep(0.05)
    # a long outage: the next timed probe is far away (the destination's back-off grew)
    delivery._next_probe = time.monotonic() + 3600
    receiver = TopologySink(f"127.0.0.1:{port}")
    await receiver.start()
    try:
        await receiver.wait_for({"r1"}, timeout=10)
        assert receiver.counts["r1"] == 1
    finally:
        await receiver.stop()
