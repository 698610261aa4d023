"""Readiness verifications (`devicectl verify`): one ``bmc_checks`` row per device and run.

A row is written `queued` before anything runs; a checker claims it (`running`, with its owner),
then records the result (`done`, with the verdict, every check and the receipts of a write cycle)
or why it could not run (`failed`). A controller that restarts marks its own `running` rows
`interrupted` (a check is never half-reported as done) and claims the `queued` ones again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ._database import by_code_point, newest_first, one_of
from ._models import BMC_CHECKS

B = BMC_CHECKS
QUEUED, RUNNING, DONE, FAILED, INTERRUPTED = "queued", "running", "done", "failed", "interrupted"
FINISHED = (DONE, FAILED, INTERRUPTED)


@dataclass(frozen=True, slots=True)
class BmcCheckRow:
    """One row of ``bmc_checks``."""

    check_id: str
    batch_id: str
    device: str
    write_cycle: bool
    status: str
    verdict: str
    query: dict[str, Any]
    result: dict[str, Any] | None
    writes: list[dict[str, Any]] | None
    error: str
    owner: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


def _row(row: Any) -> BmcCheckRow:
    return BmcCheckRow(**dict(row._mapping))


def insert_many(conn: Connection, args: list[list[BmcCheckRow]]) -> list[None]:
    rows = [r for batch in args for r in batch]
    if rows:
        conn.execute(sa.insert(B), [{f: getattr(r, f) for f in BmcCheckRow.__slots__} for r in rows])
    return [None for _ in args]


def claim_many(
    conn: Connection, args: list[tuple[str, int, datetime, Sequence[str] | None]]
) -> list[list[BmcCheckRow]]:
    out = []
    for owner, limit, now, devices in args:
        query = sa.select(B.c.check_id).where(B.c.status == QUEUED)
        if devices is not None:
            query = query.where(one_of(conn, B.c.device, devices))
        ids = conn.execute(query.order_by(B.c.created_at, B.c.check_id).limit(limit)).scalars()
        claimed = []
        for check_id in list(ids):
            # the status guard makes a claim exclusive between controllers sharing the database
            done = conn.execute(
                sa.update(B)
                .where(B.c.check_id == check_id, B.c.status == QUEUED)
                .values(status=RUNNING, owner=owner, started_at=now)
            )
            if done.rowcount:
                claimed.append(check_id)
        rows = conn.execute(
            sa.select(B).where(B.c.check_id.in_(claimed)).order_by(B.c.created_at, B.c.check_id)
        )
        out.append([_row(r) for r in rows])
    return out


def finish_many(conn: Connection, args: list[tuple[str, str, str, Any, Any, str, datetime]]) -> list[None]:
    for check_id, status, verdict, result, writes, error, at in args:
        conn.execute(
            sa.update(B)
            .where(B.c.check_id == check_id, B.c.status == RUNNING)
            .values(status=status, verdict=verdict, result=result, writes=writes, error=error, finished_at=at)
        )
    return [None for _ in args]


def note_many(conn: Connection, args: list[tuple[str, str, Any, datetime]]) -> list[None]:
    """A write cycle's restore after its verification stopped: the row ends `interrupted` (if it was
    still `running`) with the restore's report as its error, and the restore's receipts appended."""
    for check_id, error, writes, at in args:
        row = conn.execute(sa.select(B.c.status, B.c.writes).where(B.c.check_id == check_id)).first()
        if row is None:
            continue
        values: dict[str, Any] = {"error": error, "writes": [*(row.writes or []), *(writes or [])] or None}
        if row.status in (QUEUED, RUNNING):
            values |= {"status": INTERRUPTED, "finished_at": at}
        conn.execute(sa.update(B).where(B.c.check_id == check_id).values(**values))
    return [None for _ in args]


def interrupt_many(conn: Connection, args: list[tuple[str, datetime]]) -> list[int]:
    out = []
    for owner, at in args:
        done = conn.execute(
            sa.update(B)
            .where(B.c.status == RUNNING, B.c.owner == owner)
            .values(
                status=INTERRUPTED,
                finished_at=at,
                error=sa.case(
                    (
                        B.c.write_cycle,
                        "interrupted by a controller restart during its write cycle; every cap it "
                        "changed is restored from the cycle's journal by the process that runs the "
                        "node, which reports here what it restored",
                    ),
                    else_="interrupted by a controller restart; run it again",
                ),
            )
        )
        out.append(int(done.rowcount or 0))
    return out


def list_checks(
    conn: Connection,
    device: str | None,
    batch_id: str | None,
    status: str | None,
    limit: int,
    after: tuple[datetime, str] | None = None,
    devices: Sequence[str] | None = None,
) -> list[BmcCheckRow]:
    """Verifications, newest first, from just after the row `after` names (a keyset page)."""
    query = sa.select(B)
    if devices is not None:
        query = query.where(one_of(conn, B.c.device, devices))
    if device:
        query = query.where(B.c.device == device)
    if batch_id:
        query = query.where(B.c.batch_id == batch_id)
    if status:
        query = query.where(B.c.status == status)
    query = newest_first(conn, query, B.c.created_at, B.c.check_id, after).limit(limit)
    return [_row(r) for r in conn.execute(query)]


def _like(prefix: str) -> str:
    """A LIKE pattern matching `prefix` literally at the start (escape `\\`)."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def get_check(conn: Connection, check_id: str) -> BmcCheckRow | None:
    row = conn.execute(sa.select(B).where(B.c.check_id == check_id)).first()
    return _row(row) if row is not None else None


def resolve(conn: Connection, name: str) -> tuple[str, str]:
    """What `name` names: ("check", id) for a verification (its id, or a prefix of exactly one),
    ("batch", id) for a run (its batch id); ("", why) for none or more than one. Two ids at most are
    read, however many rows match."""
    if "\x00" in name:  # no id holds a NUL, and PostgreSQL refuses one in a query
        return "", f"no verification matches {name!r}"
    if conn.execute(sa.select(B.c.check_id).where(B.c.check_id == name)).first() is not None:
        return "check", name
    if conn.execute(sa.select(B.c.check_id).where(B.c.batch_id == name).limit(1)).first() is not None:
        return "batch", name
    query = sa.select(B.c.check_id).where(B.c.check_id.like(_like(name), escape="\\")).limit(2)
    ids = list(conn.execute(query).scalars())
    if len(ids) == 1:
        return "check", ids[0]
    return "", f"{'no verification' if not ids else 'more than one verification'} matches {name!r}"


def batch_page(conn: Connection, batch_id: str, after: str, limit: int) -> list[BmcCheckRow]:
    """A run's verifications by check id (code point order): the `limit` after `after`."""
    key = by_code_point(conn, B.c.check_id)
    query = sa.select(B).where(B.c.batch_id == batch_id, key > after)
    return [_row(r) for r in conn.execute(query.order_by(key).limit(limit))]


def batch_progress(conn: Connection, batch_id: str) -> dict[tuple[str, str], int]:
    """How many verifications of a run are in each (status, verdict), counted by the database."""
    query = (
        sa.select(B.c.status, B.c.verdict, sa.func.count())
        .where(B.c.batch_id == batch_id)
        .group_by(B.c.status, B.c.verdict)
    )
    return {(status, verdict or ""): int(n) for status, verdict, n in conn.execute(query)}


def last_per_device(conn: Connection, devices: Sequence[str] | None) -> dict[str, BmcCheckRow]:
    newest = (
        sa.select(B.c.device, sa.func.max(B.c.created_at).label("at"))
        .where(B.c.status.in_(FINISHED))
        .group_by(B.c.device)
    )
    if devices is not None:
        newest = newest.where(one_of(conn, B.c.device, devices))
    sub = newest.subquery()
    query = sa.select(B).join(sub, sa.and_(B.c.device == sub.c.device, B.c.created_at == sub.c.at))
    out: dict[str, BmcCheckRow] = {}
    for row in conn.execute(query.order_by(B.c.check_id)):
        out.setdefault(row.device, _row(row))
    return out
