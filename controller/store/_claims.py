"""Claims on the request journal: the unfinished requests of lapsed owners or of leased shards
become this controller's (skipping rows another controller is claiming right now), and the lease
heartbeats that say who is alive. Group-commit handlers, like `_journal`'s writes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from . import _shards
from ._database import chunks, is_postgres
from ._journal import JOURNAL_COLUMNS, UNFINISHED, journal_row, with_owner
from ._models import CONTROLLER_LEASES, REQUESTS
from ._types import JournalRow

R = REQUESTS
L = CONTROLLER_LEASES


def claim_unfinished_one(
    conn: Connection, owner: str, lease_ttl: float, limit: int | None
) -> list[JournalRow]:
    """Take over unfinished requests that are ours or whose owner's lease has lapsed."""
    if is_postgres(conn):
        # The database's clock, so controllers on hosts with skewed clocks agree on liveness.
        cutoff: Any = sa.func.now() - sa.literal(timedelta(seconds=lease_ttl), sa.Interval())
    else:
        cutoff = datetime.now(UTC) - timedelta(seconds=lease_ttl)
    live = sa.exists().where(L.c.owner == R.c.owner, L.c.heartbeat_at >= cutoff)
    query = (
        sa.select(*JOURNAL_COLUMNS)
        .where(R.c.status.in_(UNFINISHED), sa.or_(R.c.owner == owner, ~live))
        .order_by(R.c.seq)
    )
    return _take(conn, query, owner, limit)


def _take(conn: Connection, query: sa.Select[Any], owner: str, limit: int | None) -> list[JournalRow]:
    """Run a claim's query and make the rows it found ``owner``'s."""
    if limit is not None:
        query = query.limit(limit)
    if is_postgres(conn):
        # Rows another controller is claiming right now are skipped, not waited for.
        query = query.with_for_update(of=R, skip_locked=True)
    rows = [journal_row(row) for row in conn.execute(query)]
    taken = [row.seq for row in rows if row.owner != owner]
    for part in chunks(taken):
        conn.execute(sa.update(R).where(R.c.seq.in_(part)).values(owner=owner))
    return [row if row.owner == owner else with_owner(row, owner) for row in rows]


def claim_shards_one(
    conn: Connection, owner: str, shards: Sequence[int], others_only: bool, limit: int | None
) -> list[JournalRow]:
    """Take over the unfinished requests of ``shards`` (the ones ``owner`` leases), by seq.

    ``others_only`` skips rows already ``owner``'s (the frequent poll for requests other
    controllers journaled; the rows this one journaled itself are in its lanes already)."""
    if not shards:
        return []
    query = (
        sa.select(*JOURNAL_COLUMNS)
        .where(R.c.status.in_(UNFINISHED), R.c.shard.in_(sorted(shards)))
        .order_by(R.c.seq)
    )
    if others_only:
        query = query.where(R.c.owner != owner)
    return _take(conn, query, owner, limit)


def claim_shards_many(
    conn: Connection, args: list[tuple[str, Sequence[int], bool, int | None]]
) -> list[list[JournalRow]]:
    """Group-commit handler for ``claim_shards``."""
    return [claim_shards_one(conn, *arg) for arg in args]


def claim_unfinished_many(
    conn: Connection, args: list[tuple[str, float, int | None]]
) -> list[list[JournalRow]]:
    """Group-commit handler for ``claim_unfinished``."""
    return [claim_unfinished_one(conn, owner, ttl, limit) for owner, ttl, limit in args]


def heartbeat_many(conn: Connection, owners: list[tuple[str, str]]) -> list[None]:
    """Upsert the lease rows of ``(owner, role)`` with the current time."""
    for owner, role in dict.fromkeys(owners):
        _shards.heartbeat(conn, owner, role)
    return [None for _ in owners]
