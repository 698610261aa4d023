"""A BMC's connection slots: at most `limit` requests at once, the rest served in arrival order.

`asyncio.Semaphore`'s contract, with a synchronous fast path: a free slot is taken without a
coroutine (`try_take`), and a wait carries its own deadline without an `asyncio.timeout` around
it. Every BMC call passes here, and at fleet scale most wait (a BMC takes two or four at once
while a request changes eight caps): the semaphore's coroutine and the timeout's objects were a
measurable share of a call's CPU and of the fleet's memory in flight. The waits' deadlines share
one timer, set for the earliest of them, not one timer made and cancelled per wait; when the
last waiter is served the timer stays (it finds no one past a deadline, or sets itself again for
the earliest one left), so a BMC's queue that empties and fills again makes no timer each time.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque


class Slots:
    """At most `limit` holders; waiters are served first come, first served."""

    __slots__ = ("_due", "_free", "_timer", "_waiters")

    def __init__(self, limit: int) -> None:
        self._free = limit
        #: each waiter with its deadline in loop time (`math.inf`: none)
        self._waiters: deque[tuple[asyncio.Future[None], float]] = deque()
        #: the one timer for the earliest deadline of a waiter, and that deadline
        self._timer: asyncio.TimerHandle | None = None
        self._due = math.inf

    def try_take(self) -> bool:
        """Take a free slot now, unless there is none or someone is already waiting for one."""
        waiters = self._waiters
        while waiters and waiters[0][0].done():  # gave up (timed out or cancelled): not waiting any more
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
        due = math.inf if timeout is None else loop.time() + timeout
        self._waiters.append((waiter, due))
        if due < self._due:
            self._watch(loop, due)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self.release()  # handed a slot, then cancelled before taking it: pass it on
            raise

    def release(self) -> None:
        """Give a slot back: to the longest waiting, else to the free ones."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()[0]
            if not waiter.done():
                waiter.set_result(None)  # the slot goes straight to it
                return
        self._free += 1

    def _watch(self, loop: asyncio.AbstractEventLoop, due: float) -> None:
        """Set the timer for `due` (the earliest deadline of a waiter now)."""
        if self._timer is not None:
            self._timer.cancel()
        self._due = due
        self._timer = loop.call_at(due, self._expire, loop)

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        """The earliest deadline came: every waiter whose deadline it was gives up with
        TimeoutError; the timer is set again for the earliest left."""
        now = self._due
        self._timer, self._due = None, math.inf
        earliest = math.inf
        for waiter, due in self._waiters:
            if waiter.done():
                continue
            if due <= now:
                waiter.set_exception(TimeoutError())
            elif due < earliest:
                earliest = due
        if earliest < math.inf:
            self._watch(loop, earliest)
