"""Verifications: deferred re-reads that confirm a change really took effect on a device."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ._database import newest_first, one_of
from ._models import REQUESTS, VERIFICATIONS, UTCDateTime
from ._types import NewVerification, VerificationRow, VerificationStatus

V = VERIFICATIONS


def insert_many(conn: Connection, items: Sequence[tuple[NewVerification, datetime]]) -> None:
    """Schedule verifications, each with its creation time (the completing transaction's)."""
    if not items:
        return
    conn.execute(
        sa.insert(V),
        [
            {
                "verification_id": v.verification_id,
                "device": v.device,
                "request_id": v.request_id,
                "kind": v.kind,
                "payload": v.payload,
                "status": VerificationStatus.PENDING.value,
                "detail": "",
                "checks": 0,
                "max_checks": v.max_checks,
                "created_at": created_at,
                "due_at": v.due_at,
                "finished_at": None,
            }
            for v, created_at in items
        ],
    )


_UPDATE = (
    sa.update(V)
    .where(V.c.verification_id == sa.bindparam("b_id"))
    .values(
        status=sa.bindparam("b_status"),
        detail=sa.bindparam("b_detail"),
        due_at=sa.func.coalesce(sa.bindparam("b_due_at", type_=UTCDateTime()), V.c.due_at),
        checks=sa.bindparam("b_checks", type_=sa.Integer()),
        finished_at=sa.bindparam("b_finished_at", type_=UTCDateTime()),
    )
)


def update_many(
    conn: Connection, args: list[tuple[str, str, str, datetime | None, int, datetime | None]]
) -> list[None]:
    """Record check results; a None ``due_at`` keeps the current one."""
    conn.execute(
        _UPDATE,
        [
            {
                "b_id": vid,
                "b_status": status,
                "b_detail": detail,
                "b_due_at": due_at,
                "b_checks": checks,
                "b_finished_at": finished_at,
            }
            for vid, status, detail, due_at, checks, finished_at in args
        ],
    )
    return [None for _ in args]


def _row(row: Any) -> VerificationRow:
    return VerificationRow(**dict(row._mapping))


def due_verifications(
    conn: Connection, now: datetime, limit: int, shards: Sequence[int] | None = None
) -> list[VerificationRow]:
    """Pending verifications whose next check is due, soonest first (only those whose request is
    in ``shards`` when given: the shards this controller leases)."""
    query = (
        sa.select(V)
        .where(V.c.status == VerificationStatus.PENDING.value, V.c.due_at <= now)
        .order_by(V.c.due_at, V.c.verification_id)
        .limit(limit)
    )
    if shards is not None:
        mine = sa.select(REQUESTS.c.request_id).where(REQUESTS.c.shard.in_(sorted(shards)))
        query = query.where(V.c.request_id.in_(mine))
    return [_row(row) for row in conn.execute(query)]


def list_verifications(
    conn: Connection,
    device: str | None,
    verification_id: str | None,
    limit: int,
    after: tuple[datetime, str] | None = None,
    devices: Sequence[str] | None = None,
) -> list[VerificationRow]:
    """Verifications, newest first (from just after the row `after` names, a keyset page; of
    `devices` when given)."""
    query = sa.select(V)
    if devices is not None:
        query = query.where(one_of(conn, V.c.device, devices))
    if device is not None:
        query = query.where(V.c.device == device)
    if verification_id is not None:
        query = query.where(V.c.verification_id == verification_id)
    query = newest_first(conn, query, V.c.created_at, V.c.verification_id, after).limit(limit)
    return [_row(row) for row in conn.execute(query)]
