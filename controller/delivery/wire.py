"""What delivery knows about the way to the topology server: how the receiver's status codes are
classified, the back-off delays, the callback channel's reconnect options and watch, how many
sends may be unrecorded at once (`SendWindow`), and the `Transport` seam for another way than the
unary callback (the agent stream).

Failures come in three kinds (by the receiver's status code):

- the destination is down (`UNAVAILABLE`, `DEADLINE_EXCEEDED`, ...): one destination-level
  state backs off and a single probe (the oldest due response) tries at the backoff interval, or
  at once when the callback channel reconnects; the first success releases the whole backlog,
  still in order per device;
- the receiver refuses this response for good (`RESOURCE_EXHAUSTED`, `INVALID_ARGUMENT`,
  `OUT_OF_RANGE`): the row is dead-lettered with the error, so the device's later responses flow;
- anything else: that row backs off on its own, persisted (attempts, next attempt time), so
  retries outlive restarts. That schedule is data (attempts and the next attempt time live in the
  outbox row, and a restart picks them up), not an in-process retry loop, so it is a formula here
  (`backoff_delay`), not a tenacity policy; the loops that do retry in process use tenacity.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Protocol

import grpc

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb

log = logging.getLogger("controller.delivery.outbox")

_Code = grpc.StatusCode
#: the receiver (or the path to it) is down: say so once for the destination, probe, don't
#: count it against each row
DESTINATION_DOWN = frozenset(
    {
        _Code.UNAVAILABLE,
        _Code.DEADLINE_EXCEEDED,
        _Code.UNIMPLEMENTED,
        _Code.UNAUTHENTICATED,
        _Code.PERMISSION_DENIED,
    }
)
#: the receiver refuses this very response (too large, malformed): retrying cannot help
DEAD_LETTER = frozenset({_Code.RESOURCE_EXHAUSTED, _Code.INVALID_ARGUMENT, _Code.OUT_OF_RANGE})


#: the callback channel tries to reconnect to a receiver that is down at least this often (ms)
RECONNECT_EVERY_MS = 500


def attempt_kind(code: grpc.StatusCode) -> str:
    """The `devicectl_delivery_attempts_total` label of a failed delivery: dead-lettered for good,
    the receiver down (the destination's backoff), or this response retried on its own."""
    if code in DEAD_LETTER:
        return "dead_letter"
    return "receiver_down" if code in DESTINATION_DOWN else "retry"


def reconnect_options(probe_max: float) -> list[tuple[str, int]]:
    """Channel options that keep gRPC's own reconnect back-off short while a receiver is down.

    NOTE: gRPC backs reconnect attempts off up to 120 s on its own; after an outage of a minute
    the channel could still be waiting to reconnect long after the receiver came back. Attempts
    every `RECONNECT_EVERY_MS` at most (a refused connection costs next to nothing) let the
    delivery loop, which watches the channel, probe within about that time of the receiver's
    return. `min_reconnect_backoff_ms` is the floor of each connection attempt's timeout, so it
    gets the probe interval: a slow network still has that long to connect.
    """
    cap = max(100, int(probe_max * 1000))
    every = min(RECONNECT_EVERY_MS, cap)
    return [
        ("grpc.initial_reconnect_backoff_ms", every),
        ("grpc.min_reconnect_backoff_ms", cap),
        ("grpc.max_reconnect_backoff_ms", every),
    ]


async def probe_on_reconnect(
    channel: grpc.aio.Channel, failing: Callable[[], bool], probe_now: Callable[[], None]
) -> None:
    """Call `probe_now` whenever the callback channel (re)connects while the destination is
    `failing`, until cancelled.

    NOTE: without this the receiver's return was seen only at the next timed probe, up to
    `delivery_probe_max_interval` (5 s) later, plus the channel's own reconnect wait: the first
    response came 6.5-7 s after the receiver was back in the full outage drill."""
    state = channel.get_state()
    while True:
        await channel.wait_for_state_change(state)
        state = channel.get_state()
        if state is grpc.ChannelConnectivity.READY and failing():
            log.debug("the topology callback channel reconnected: probing now")
            probe_now()


#: the first delay after a failure, doubling with each further attempt up to the cap
BACKOFF_FIRST = 0.2
#: random seconds added to each delay, so a backlog's rows do not retry in step
BACKOFF_JITTER = 0.5


def backoff_delay(attempt: int, max_backoff: float) -> float:
    """Seconds to wait after the `attempt`-th failed delivery (1-based): 0.2 s doubling, plus up to
    0.5 s of jitter, at most `max_backoff`."""
    exponent = min(max(attempt, 1) - 1, 60)  # 2**60 s is far past any cap: no overflow
    delay = BACKOFF_FIRST * 2.0**exponent + random.uniform(0, BACKOFF_JITTER)
    return max(0.0, min(delay, max_backoff))


class Transport(Protocol):
    """Another way to the topology server than the unary callback (the agent stream): `send`
    returns once the receiver acknowledged the response and raises `grpc.aio.AioRpcError` with
    the same status codes as the callback would, so failures are classified the same way."""

    async def send(self, response: pb.DeviceControllerResponse, timeout: float) -> None: ...


class SendWindow:
    """How many responses may be sent but not yet recorded as delivered: what a SIGKILL repeats.

    Outside a backlog's drain one in the whole process, so a kill repeats at most one response (a
    pass's burst of heads went out together and a kill before their records repeated all of them:
    22 after one kill in issue 24's crash drill). A device draining a backlog, or a burst with
    more deliveries waiting than `concurrency` (one at a time would not keep up), sends within
    `concurrency` only: then a kill repeats up to one response per such delivery."""

    def __init__(self, concurrency: int) -> None:
        self._one = asyncio.Semaphore(1)
        self._slots = asyncio.Semaphore(concurrency)
        self._limit = concurrency
        self._waiting = 0

    def sending(self, *, draining: bool) -> _Sending:
        """Held from before the send until its outcome is recorded (`async with`)."""
        return _Sending(self, draining)


class _Sending:
    """`SendWindow.sending`: the one-unrecorded window (outside a drain, while fewer than
    `concurrency` wait for it), then a slot; released in the reverse order. A class rather than a
    generator-based context manager: one per response delivered, and that costs a third as much."""

    __slots__ = ("_draining", "_window", "_windowed")

    def __init__(self, window: SendWindow, draining: bool) -> None:
        self._window = window
        self._draining = draining
        self._windowed = False

    async def __aenter__(self) -> None:
        window = self._window
        windowed = not self._draining and window._waiting < window._limit
        if windowed:
            window._waiting += 1
            try:
                await window._one.acquire()
            finally:
                window._waiting -= 1
        try:
            await window._slots.acquire()
        except BaseException:
            if windowed:
                window._one.release()
            raise
        self._windowed = windowed

    async def __aexit__(self, *exc: object) -> None:
        self._window._slots.release()
        if self._windowed:
            self._window._one.release()
