"""The write cycle's journal (``write_cycles``): before a cycle's first write, the value and mode of
every cap it will touch; `open` until each is proven back (`closed`, with the restore's report).

An `open` row found at a start, or before another cycle of the device, is restored from its priors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ._models import WRITE_CYCLES

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


def insert_many(conn: Connection, args: list[WriteCycleRow]) -> list[None]:
    conn.execute(sa.insert(W), [{f: getattr(r, f) for f in WriteCycleRow.__slots__} for r in args])
    return [None for _ in args]


def close_many(conn: Connection, args: list[tuple[str, str, Any, datetime | None]]) -> list[int]:
    out = []
    for cycle_id, status, report, at in args:
        done = conn.execute(
            sa.update(W).where(W.c.cycle_id == cycle_id).values(status=status, report=report, closed_at=at)
        )
        out.append(int(done.rowcount or 0))
    return out


def open_cycles(conn: Connection, devices: Sequence[str] | None) -> list[WriteCycleRow]:
    query = sa.select(W).where(W.c.status == OPEN)
    if devices is not None:
        query = query.where(W.c.device.in_(list(devices)))
    return [_row(r) for r in conn.execute(query.order_by(W.c.created_at, W.c.cycle_id))]


def cycles_of(conn: Connection, origin: str) -> list[WriteCycleRow]:
    query = sa.select(W).where(W.c.origin == origin).order_by(W.c.created_at, W.c.cycle_id)
    return [_row(r) for r in conn.execute(query)]
