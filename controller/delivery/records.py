"""Delivery outcomes on their way to the database: each attempt's outcome (delivered, failed,
dead-lettered) is written through a database outage, the device's next response waiting meanwhile;
it is given up only at shutdown, when the row is simply sent again after restart (the wire is
at-least-once)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from controller.process.supervise import Outage
from controller.store import StoreClosedError

log = logging.getLogger(__name__)


class Records:
    """Writes delivery outcomes; `database` counts that side's outage, `stopping` says whether the
    process is shutting down."""

    def __init__(self, database: Outage, stopping: Callable[[], bool]) -> None:
        self.database = database
        self._stopping = stopping
        self._writing: set[asyncio.Task[bool]] = set()

    async def record(self, write: Callable[..., Awaitable[None]], *args: object) -> bool:
        """Persist one outcome, retrying through a database outage; False: given up (shutdown).

        NOTE: the write is its own task, shielded: a delivery cancelled at shutdown after the
        receiver acknowledged must still record it, or the next process sends it again (a
        duplicate caused by our own shutdown, not by a kill). `finish` waits for it."""
        task = asyncio.create_task(self._write(write, *args))
        self._writing.add(task)
        task.add_done_callback(self._writing.discard)
        return await asyncio.shield(task)

    async def _write(self, write: Callable[..., Awaitable[None]], *args: object) -> bool:
        while True:
            try:
                await write(*args)
                self.database.ok()
                return True
            except StoreClosedError:
                return False
            except Exception as exc:
                delay = self.database.failed(exc)
                if self._stopping():
                    return False
                await asyncio.sleep(delay)

    async def finish(self, within: float) -> None:
        """At shutdown: wait up to `within` s for the outcomes still being written (their
        deliveries may be cancelled already); those stuck in a database outage are given up, and
        their responses are sent again after restart."""
        if not self._writing:
            return
        _, left = await asyncio.wait(set(self._writing), timeout=within)
        if left:
            log.warning(
                "shutdown: %d delivery outcomes not recorded within %.1f s; those responses are sent "
                "again after restart",
                len(left),
                within,
            )
            for task in left:
                task.cancel()
            await asyncio.gather(*left, return_exceptions=True)
