"""A BMC's connection slots: at most `limit` requests at once, the rest served in arrival order.

`asyncio.Semaphore`'s contract, with a synchronous fast path: a free slot is taken without a
coroutine (`try_take`), and a wait carries its own deadline without an `asyncio.timeout` around
it. Every BMC call passes here, and at fleet scale most wait (a BMC takes two or four at once
while a request changes eight caps): the semaphore's coroutine and the timeout's objects were a
measurable share of a call's CPU and of the fleet's memory in flight.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Slots:
    """At most `limit` holders; waiters are served first come, first served."""

    __slots__ = ("_free", "_waiters")

    def __init__(self, limit: int) -> None:
        self._free = limit
        self._waiters: deque[asyncio.Future[None]] = deque()

    def try_take(self) -> bool:
        """Take a free slot now, unless there is none or someone is already waiting for one."""
        waiters = self._waiters
        while waiters and waiters[0].done():  # gave up (timed out or cancelled): not waiting any more
            waiters.popleft()
        if self._free > 0 and not waiters:
            self._free -= 1
            return True
        return False

    async def take(self, timeout: float | None) -> None:
        """Wait for a slot; TimeoutError after `timeout` seconds (None: no limit)."""
        if self.try_take():
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        timer = None if timeout is None else loop.call_later(timeout, _expire, waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self.release()  # handed a slot, then cancelled before taking it: pass it on
            raise
        finally:
            if timer is not None:
                timer.cancel()

    def release(self) -> None:
        """Give a slot back: to the longest waiting, else to the free ones."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot goes straight to it
                return
        self._free += 1


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())
