"""The write cycle's journal (``write_cycles``): before a cycle's first write, the value and mode of
every cap it will touch; `open` until each is proven back (`closed`, with the restore's report).

An `open` row found at a start, or before another cycle of the device, is restored from its priors.
Whoever restores a journal it did not open first takes it over (`take`: a compare-and-set of its
`epoch`); a holder writes and closes a journal only while its owner and epoch are current (`close_many`
is conditional), so a holder that lost it to a newer one never closes or overwrites its record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ._database import one_of
from ._models import DESIRED_LIMITS as D
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
    #: takeovers so far (0: the cycle's own process)
    epoch: int = 0
    #: component -> the request that had set its desired limit when the cycle opened, as the
    #: insert's own transaction read it (whatever the caller passes is replaced); None for a cycle
    #: opened by a release without it
    desired_at_open: dict[str, str] | None = None


def _row(row: Any) -> WriteCycleRow:
    return WriteCycleRow(**dict(row._mapping))


def insert_many(conn: Connection, args: list[WriteCycleRow]) -> list[None]:
    """Insert each cycle with its device's desired limits as they stand in this transaction: which
    request set each component's (`desired_at_open`). A later request's limit is then told from
    the rows themselves, never by comparing two hosts' clocks."""
    values = []
    for row in args:
        value = {f: getattr(row, f) for f in WriteCycleRow.__slots__}
        value["desired_at_open"] = desired_request_ids(conn, row.device)
        values.append(value)
    conn.execute(sa.insert(W), values)
    return [None for _ in args]


def desired_request_ids(conn: Connection, device: str) -> dict[str, str]:
    """Component -> the request that set its desired limit, for one device now."""
    query = sa.select(D.c.component, D.c.request_id).where(D.c.device == device)
    return {component: request_id for component, request_id in conn.execute(query)}


def _held(cycle_id: str, owner: str, epoch: int) -> Any:
    return sa.and_(W.c.cycle_id == cycle_id, W.c.owner == owner, W.c.epoch == epoch, W.c.status == OPEN)


def close_many(conn: Connection, args: list[tuple[str, str, int, str, Any, datetime | None]]) -> list[int]:
    """Record each cycle's end, only where `owner` and `epoch` still hold it open (1: written)."""
    out = []
    for cycle_id, owner, epoch, status, report, at in args:
        done = conn.execute(
            sa.update(W)
            .where(_held(cycle_id, owner, epoch))
            .values(status=status, report=report, closed_at=at)
        )
        out.append(int(done.rowcount or 0))
    return out


def take_many(conn: Connection, args: list[tuple[str, int, str]]) -> list[int]:
    """Take each open cycle over from the epoch seen: `owner`, epoch + 1 (1: taken; 0: it moved on,
    closed or taken by another meanwhile)."""
    out = []
    for cycle_id, seen, owner in args:
        done = conn.execute(
            sa.update(W)
            .where(W.c.cycle_id == cycle_id, W.c.epoch == seen, W.c.status == OPEN)
            .values(owner=owner, epoch=seen + 1)
        )
        out.append(int(done.rowcount or 0))
    return out


def held_by(conn: Connection, cycle_id: str, owner: str, epoch: int) -> bool:
    """Whether `owner` at `epoch` still holds the cycle open."""
    return conn.execute(sa.select(W.c.cycle_id).where(_held(cycle_id, owner, epoch))).first() is not None


def open_cycles(conn: Connection, devices: Sequence[str] | None) -> list[WriteCycleRow]:
    query = sa.select(W).where(W.c.status == OPEN)
    if devices is not None:
        query = query.where(one_of(conn, W.c.device, devices))
    return [_row(r) for r in conn.execute(query.order_by(W.c.created_at, W.c.cycle_id))]


def cycles_of(conn: Connection, origin: str) -> list[WriteCycleRow]:
    query = sa.select(W).where(W.c.origin == origin).order_by(W.c.created_at, W.c.cycle_id)
    return [_row(r) for r in conn.execute(query)]
