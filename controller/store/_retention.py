"""Retention: old finished rows are deleted in bounded batches; sizes and backlog for metrics.

What may go, each after its own age (0 keeps it forever):
- a journal row: completed, and its response delivered, dead-lettered past the dead-letter age,
  or already pruned; never a queued or running request, never one whose response still waits;
- an outbox row: delivered, or dead-lettered past the dead-letter age; never an undelivered one;
- an audit row: older than the audit age.
Each batch is one short transaction through the writer, so pruning never holds the journal's
lock for long (SQLite has one writer) and a large backlog is worked off over several batches.
A pruned request_id is forgotten: a replay of it after that is treated as a new request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ._models import OUTBOX, REQUESTS, STATE_AUDIT, UTCDateTime

if TYPE_CHECKING:
    from ._store import Store

OB, RQ, AU = OUTBOX, REQUESTS, STATE_AUDIT

#: tables reported in metrics (`devicectl_table_rows`)
TABLES = {"requests": RQ, "outbox": OB, "state_audit": AU}


@dataclass(frozen=True)
class RetentionPolicy:
    """Ages in days (0: keep forever) and the rows deleted per transaction."""

    journal_days: float = 30.0
    outbox_days: float = 30.0
    dead_letter_days: float = 90.0
    audit_days: float = 90.0
    batch: int = 1000

    def cutoff(self, days: float, now: datetime) -> datetime | None:
        return now - timedelta(days=days) if days > 0 else None


@dataclass
class PruneResult:
    """Rows deleted per table."""

    deleted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TABLES, 0))

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


@dataclass(frozen=True)
class Backlog:
    """Undelivered responses and when the oldest was written."""

    count: int
    oldest: datetime | None

    def oldest_age(self, now: datetime) -> float:
        return max((now - self.oldest).total_seconds(), 0.0) if self.oldest is not None else 0.0


def _pending() -> Any:
    return sa.and_(OB.c.delivered_at.is_(None), OB.c.dead_lettered_at.is_(None))


def _journal_ids(conn: Connection, cutoff: datetime, dead_cutoff: datetime | None, limit: int) -> list[int]:
    # the response must be gone from the wait: delivered, dead-lettered long enough, or pruned
    blocking = sa.or_(
        _pending(),
        OB.c.dead_lettered_at.is_not(None)
        if dead_cutoff is None
        else sa.and_(OB.c.dead_lettered_at.is_not(None), OB.c.dead_lettered_at >= dead_cutoff),
    )
    held = sa.select(OB.c.id).where(OB.c.request_id == RQ.c.request_id, blocking).exists()
    query = (
        sa.select(RQ.c.seq)
        .where(RQ.c.status == "completed", RQ.c.finished_at < cutoff, ~held)
        .order_by(RQ.c.seq)
        .limit(limit)
    )
    return [row[0] for row in conn.execute(query)]


def _outbox_ids(
    conn: Connection, cutoff: datetime | None, dead_cutoff: datetime | None, limit: int
) -> list[int]:
    conditions = []
    if cutoff is not None:
        conditions.append(sa.and_(OB.c.delivered_at.is_not(None), OB.c.delivered_at < cutoff))
    if dead_cutoff is not None:
        conditions.append(sa.and_(OB.c.dead_lettered_at.is_not(None), OB.c.dead_lettered_at < dead_cutoff))
    if not conditions:
        return []
    query = sa.select(OB.c.id).where(sa.or_(*conditions)).order_by(OB.c.id).limit(limit)
    return [row[0] for row in conn.execute(query)]


def _audit_ids(conn: Connection, cutoff: datetime, limit: int) -> list[int]:
    query = sa.select(AU.c.id).where(AU.c.at < cutoff).order_by(AU.c.id).limit(limit)
    return [row[0] for row in conn.execute(query)]


def _prune_batch(conn: Connection, args: list[tuple[str, RetentionPolicy, datetime]]) -> list[int]:
    """Writer handler: delete one batch from one table; returns the rows deleted per call."""
    out = []
    for table, policy, now in args:
        dead_cutoff = policy.cutoff(policy.dead_letter_days, now)
        if table == "requests":
            cutoff = policy.cutoff(policy.journal_days, now)
            ids = _journal_ids(conn, cutoff, dead_cutoff, policy.batch) if cutoff else []
            column = RQ.c.seq
        elif table == "outbox":
            ids = _outbox_ids(conn, policy.cutoff(policy.outbox_days, now), dead_cutoff, policy.batch)
            column = OB.c.id
        else:
            cutoff = policy.cutoff(policy.audit_days, now)
            ids = _audit_ids(conn, cutoff, policy.batch) if cutoff else []
            column = AU.c.id
        if ids:
            conn.execute(sa.delete(TABLES[table]).where(column.in_(ids)))
        out.append(len(ids))
    return out


async def prune(store: Store, policy: RetentionPolicy, now: datetime, max_batches: int = 1000) -> PruneResult:
    """Delete what the policy lets go, one bounded batch (one transaction) at a time.

    Journal rows go first, so that their outbox rows, deleted next, are never the last trace
    of a response that still waits. Stops after `max_batches` per table (the next run goes on).
    """
    result = PruneResult()
    for table in ("requests", "outbox", "state_audit"):
        for _ in range(max_batches):
            deleted = int(await store._write(_prune_batch, (table, policy, now)))
            result.deleted[table] += deleted
            if deleted < policy.batch:
                break
    return result


def _backlog(conn: Connection) -> Backlog:
    oldest = sa.func.min(OB.c.created_at, type_=UTCDateTime())
    row = conn.execute(sa.select(sa.func.count(), oldest).where(_pending())).one()
    return Backlog(int(row[0]), row[1])


def _table_rows(conn: Connection) -> dict[str, int]:
    return {
        name: int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())
        for name, table in TABLES.items()
    }


async def outbox_backlog(store: Store) -> Backlog:
    """Undelivered (not dead-lettered) responses and the oldest one's creation time."""
    return await store._read(_backlog)


async def table_rows(store: Store) -> dict[str, int]:
    """Rows in the journal, outbox and audit tables."""
    return await store._read(_table_rows)
