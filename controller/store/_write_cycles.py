"""The write cycle's journal (``write_cycles``): before a cycle's first write, the value and mode of
every cap it will touch; `open` until each is proven back (`closed`, with the restore's report).

An `open` row found at a start, or before another cycle of the device, is restored from its priors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ._batch import Handler
from ._models import WRITE_CYCLES
from ._types import require_aware

T = TypeVar("T")
W = WRITE_CYCLES
OPEN, CLOSED = "open", "closed"


@dataclass(frozen=True, slots=True)
class WriteCycleRow:
    """One row of ``write_cycles``."""

    cycle_id: str
    device: str
    origin: str
    priors: dict[str, Any]
    status: str
    report: dict[str, Any] | None
    owner: str
    created_at: datetime
    closed_at: datetime | None


def _row(row: Any) -> WriteCycleRow:
    return WriteCycleRow(**dict(row._mapping))


def _insert(conn: Connection, args: list[WriteCycleRow]) -> list[None]:
    conn.execute(sa.insert(W), [{f: getattr(r, f) for f in WriteCycleRow.__slots__} for r in args])
    return [None for _ in args]


def _close(conn: Connection, args: list[tuple[str, str, Any, datetime | None]]) -> list[int]:
    out = []
    for cycle_id, status, report, at in args:
        done = conn.execute(
            sa.update(W).where(W.c.cycle_id == cycle_id).values(status=status, report=report, closed_at=at)
        )
        out.append(int(done.rowcount or 0))
    return out


def _open(conn: Connection, devices: Sequence[str] | None) -> list[WriteCycleRow]:
    query = sa.select(W).where(W.c.status == OPEN)
    if devices is not None:
        query = query.where(W.c.device.in_(list(devices)))
    return [_row(r) for r in conn.execute(query.order_by(W.c.created_at, W.c.cycle_id))]


def _by_origin(conn: Connection, origin: str) -> list[WriteCycleRow]:
    query = sa.select(W).where(W.c.origin == origin).order_by(W.c.created_at, W.c.cycle_id)
    return [_row(r) for r in conn.execute(query)]


class WriteCycleAccess:
    """`Store`'s write-cycle journal methods; `Store` provides the reads and writes they run on."""

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        raise NotImplementedError

    async def _write(self, handler: Handler, arg: Any) -> Any:
        raise NotImplementedError

    async def open_write_cycle(self, row: WriteCycleRow) -> None:
        """Make a cycle's priors durable (committed when this returns: before its first write)."""
        require_aware("created_at", row.created_at)
        await self._write(_insert, row)

    async def close_write_cycle(
        self, cycle_id: str, report: dict[str, Any], at: datetime, *, restored: bool = True
    ) -> None:
        """Record how the cycle ended: `closed` once every cap is proven back, else it stays `open`
        (with the last attempt's report) for the next restore."""
        require_aware("at", at)
        status = CLOSED if restored else OPEN
        await self._write(_close, (cycle_id, status, report, at if restored else None))

    async def open_write_cycles(self, devices: Sequence[str] | None = None) -> list[WriteCycleRow]:
        """Cycles not proven restored (all devices, or those named), oldest first."""
        return await self._read(_open, devices)

    async def write_cycles_of(self, origin: str) -> list[WriteCycleRow]:
        """The cycles a verification or request ran (`verify ID`, `bmc_health ID`)."""
        return await self._read(_by_origin, origin)
