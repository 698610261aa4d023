"""The outbox as the delivery worker sees it: which responses are due (per-device order), their
rows, and the outcome of each attempt (written ahead of the store's other writes, see `_store`)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Any, TypeVar

from . import _outbox
from ._batch import Handler
from ._types import DueHead, OutboxItem, require_aware

T = TypeVar("T")


class OutboxAccess:
    """`Store`'s outbox methods; `Store` provides the reads and the outcome writes they run on."""

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        raise NotImplementedError

    async def _write_outcome(self, handler: Handler, arg: Any) -> Any:
        raise NotImplementedError

    async def due_outbox(
        self, now: datetime, limit: int = 500, shards: Sequence[int] | None = None
    ) -> list[OutboxItem]:
        """For each device, its oldest undelivered response if that one is due (per-device order);
        only responses of ``shards`` when given."""
        require_aware("now", now)
        return await self._read(_outbox.due_outbox, now, limit, shards)

    async def due_heads(
        self,
        now: datetime,
        limit: int = 500,
        shards: Sequence[int] | None = None,
        devices: Collection[str] | None = None,
    ) -> list[DueHead]:
        """The rows ``due_outbox`` would return (of ``devices`` only, when given), without their
        contents, each with its device's count of undelivered rows."""
        require_aware("now", now)
        return await self._read(_outbox.due_heads, now, limit, shards, devices)

    async def outbox_items(self, ids: Sequence[int]) -> list[OutboxItem]:
        """The outbox rows ``ids`` still waiting for delivery, by id (a delivered one: nothing)."""
        return await self._read(_outbox.outbox_items, list(ids)) if ids else []

    async def next_outbox(self, device: str, after_id: int, limit: int) -> list[OutboxItem]:
        """The device's next ``limit`` undelivered responses after ``after_id``, by id."""
        return await self._read(_outbox.next_outbox, device, after_id, limit)

    async def mark_delivered(self, outbox_id: int, at: datetime) -> None:
        """Record a successful delivery."""
        require_aware("at", at)
        await self._write_outcome(_outbox.mark_delivered_many, (outbox_id, at))

    async def delivery_failed(self, outbox_id: int, error: str, next_attempt_at: datetime) -> None:
        """Record a failed delivery attempt and when to try again."""
        require_aware("next_attempt_at", next_attempt_at)
        await self._write_outcome(_outbox.delivery_failed_many, (outbox_id, error, next_attempt_at))

    async def dead_letter(self, outbox_id: int, error: str, at: datetime) -> None:
        """Give up on a response the receiver refused for good (never sent again)."""
        require_aware("at", at)
        await self._write_outcome(_outbox.dead_letter_many, (outbox_id, error, at))

    async def dead_letter_count(self) -> int:
        """How many responses were given up on."""
        return await self._read(_outbox.dead_letter_count)

    async def undelivered_count(self) -> int:
        """How many responses await delivery."""
        return await self._read(_outbox.undelivered_count)
