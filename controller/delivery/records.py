"""Delivery outcomes on their way to the database: each attempt's outcome (delivered, failed,
dead-lettered) is written through a database outage, the device's next response waiting meanwhile;
it is given up only at shutdown, when the row is simply sent again after restart (the wire is
at-least-once)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from controller.process.supervise import Outage
from controller.store import StoreClosedError


class Records:
    """Writes delivery outcomes; `database` counts that side's outage, `stopping` says whether the
    process is shutting down."""

    def __init__(self, database: Outage, stopping: Callable[[], bool]) -> None:
        self.database = database
        self._stopping = stopping

    async def record(self, write: Callable[..., Awaitable[None]], *args: object) -> bool:
        """Persist one outcome, retrying through a database outage; False: given up (shutdown)."""
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
