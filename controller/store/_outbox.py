"""The response outbox: written with each completion, delivered in per-device order with backoff."""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ._database import chunks
from ._direct import Direct
from ._models import OUTBOX, UTCDateTime
from ._types import Completion, DueHead, OutboxItem

OB = OUTBOX


def insert_responses(
    conn: Connection, completions: Sequence[Completion], shards: Mapping[str, int] | None = None
) -> None:
    """One outbox row per completion, due at once (``next_attempt_at`` = the finish time), in its
    request's shard (``shards``: request id -> shard)."""
    if not completions:
        return
    _INSERT_RESPONSE.many(
        conn,
        [
            {
                "device": c.device,
                "request_id": c.request_id,
                "response": c.response,
                "created_at": c.finished_at,
                "attempts": 0,
                "next_attempt_at": c.finished_at,
                "delivered_at": None,
                "last_error": "",
                "shard": (shards or {}).get(c.request_id, 0),
            }
            for c in completions
        ],
    )


# NOTE: statements run for every request are built once (see `_journal`), on the cursor (`_direct`)
_INSERT_RESPONSE = Direct(
    sa.insert(OB),
    columns=(
        "device",
        "request_id",
        "response",
        "created_at",
        "attempts",
        "next_attempt_at",
        "delivered_at",
        "last_error",
        "shard",
    ),
)

_MARK_DELIVERED = Direct(
    sa.update(OB)
    .where(OB.c.id == sa.bindparam("b_id"), OB.c.delivered_at.is_(None))
    .values(delivered_at=sa.bindparam("b_at", type_=UTCDateTime()))
)


def mark_delivered_many(conn: Connection, args: list[tuple[int, datetime]]) -> list[None]:
    """Record deliveries (the first delivery time wins): every response's, on the cursor."""
    _MARK_DELIVERED.many(conn, [{"b_id": oid, "b_at": at} for oid, at in args])
    return [None for _ in args]


_DELIVERY_FAILED = (
    sa.update(OB)
    .where(OB.c.id == sa.bindparam("b_id"), OB.c.delivered_at.is_(None))
    .values(
        attempts=OB.c.attempts + 1,
        last_error=sa.bindparam("b_error"),
        next_attempt_at=sa.bindparam("b_next", type_=UTCDateTime()),
    )
)


def delivery_failed_many(conn: Connection, args: list[tuple[int, str, datetime]]) -> list[None]:
    """Count failed delivery attempts and push the next attempt back."""
    conn.execute(_DELIVERY_FAILED, [{"b_id": oid, "b_error": err, "b_next": nxt} for oid, err, nxt in args])
    return [None for _ in args]


_DEAD_LETTER = (
    sa.update(OB)
    .where(OB.c.id == sa.bindparam("b_id"), OB.c.delivered_at.is_(None))
    .values(
        attempts=OB.c.attempts + 1,
        last_error=sa.bindparam("b_error"),
        dead_lettered_at=sa.bindparam("b_at", type_=UTCDateTime()),
    )
)


def dead_letter_many(conn: Connection, args: list[tuple[int, str, datetime]]) -> list[None]:
    """Give up on responses the receiver refused for good, recording why."""
    conn.execute(_DEAD_LETTER, [{"b_id": oid, "b_error": err, "b_at": at} for oid, err, at in args])
    return [None for _ in args]


#: rows still to deliver: neither delivered nor given up on
PENDING = sa.and_(OB.c.delivered_at.is_(None), OB.c.dead_lettered_at.is_(None))


def _due_heads_query(
    now: datetime,
    limit: int,
    shards: Sequence[int] | None,
    *columns: Any,
    devices: Collection[str] | None = None,
    waiting: bool = False,
) -> tuple[Any, dict[str, Any]]:
    """The statement (built once per shape, see `_heads_statement`) and its parameters;
    `waiting`: with each device's count of undelivered rows as the last column."""
    params: dict[str, Any] = {"b_now": now, "b_limit": limit}
    if shards is not None:
        params["b_shards"] = sorted(shards)
    if devices is not None:
        params["b_devices"] = sorted(devices)
    return _heads_statement(columns, shards is not None, devices is not None, waiting), params


@functools.cache
def _heads_statement(columns: tuple[Any, ...], by_shard: bool, by_device: bool, waiting: bool) -> Any:
    # NOTE: a delivery pass runs this for every few responses: built per call, the statement and
    # its cache key cost more than the query (see `_journal`)
    pending = PENDING
    if by_shard:
        pending = sa.and_(pending, OB.c.shard.in_(sa.bindparam("b_shards", expanding=True)))
    if by_device:
        pending = sa.and_(pending, OB.c.device.in_(sa.bindparam("b_devices", expanding=True)))
    heads = (
        sa.select(OB.c.device, sa.func.min(OB.c.id).label("head_id"), sa.func.count().label("waiting"))
        .where(pending)
        .group_by(OB.c.device)
        .subquery()
    )
    return (
        sa.select(*columns, *((heads.c.waiting,) if waiting else ()))
        .join(heads, OB.c.id == heads.c.head_id)
        .where(OB.c.next_attempt_at <= sa.bindparam("b_now", type_=UTCDateTime()))
        .order_by(OB.c.id)
        .limit(sa.bindparam("b_limit"))
    )


_ITEM_COLUMNS = (
    OB.c.id,
    OB.c.device,
    OB.c.request_id,
    OB.c.response,
    OB.c.attempts,
    OB.c.created_at,
    OB.c.shard,
)


def due_outbox(
    conn: Connection, now: datetime, limit: int, shards: Sequence[int] | None = None
) -> list[OutboxItem]:
    """Each device's oldest undelivered response, if it is due (only of ``shards`` if given:
    the shards this controller leases).

    A device whose head response is backing off blocks its later responses, so the topology
    server always receives one device's responses in completion order. A dead-lettered row
    is no longer a head. Served by the partial index on (device, id) of undelivered rows.
    """
    query, params = _due_heads_query(now, limit, shards, *_ITEM_COLUMNS)
    return [OutboxItem(**dict(row._mapping)) for row in conn.execute(query, params)]


#: a `due_heads` device filter longer than this reads every device's head instead
_MAX_DEVICES_FILTER = 500


def due_heads(
    conn: Connection,
    now: datetime,
    limit: int,
    shards: Sequence[int] | None = None,
    devices: Collection[str] | None = None,
) -> list[DueHead]:
    """The rows ``due_outbox`` returns (of ``devices`` only, when given), without their
    contents, each with its device's count of undelivered rows.

    NOTE: a delivery pass under load skips most heads (their device has a delivery in flight);
    reading whole rows for them, as objects, was most of what a pass cost.
    """
    if devices is not None and len(devices) > _MAX_DEVICES_FILTER:
        devices = None  # as cheap to read them all
    query, params = _due_heads_query(now, limit, shards, OB.c.id, OB.c.device, devices=devices, waiting=True)
    return [DueHead(oid, device, waiting) for oid, device, waiting in conn.execute(query, params)]


def outbox_items(conn: Connection, ids: Sequence[int]) -> list[OutboxItem]:
    """The outbox rows ``ids`` still waiting for delivery, by id.

    NOTE: a row delivered (or dead-lettered) since its id was read comes back as nothing, so a pass
    that read a head before an overlapping pass delivered it can never send it again."""
    items: list[OutboxItem] = []
    for part in chunks(sorted(ids)):
        items.extend(OutboxItem(**dict(row._mapping)) for row in conn.execute(_ITEMS, {"b_ids": list(part)}))
    return items


_ITEMS = (
    sa.select(*_ITEM_COLUMNS)
    .where(PENDING, OB.c.id.in_(sa.bindparam("b_ids", expanding=True)))
    .order_by(OB.c.id)
)


def next_outbox(conn: Connection, device: str, after_id: int, limit: int) -> list[OutboxItem]:
    """The device's next ``limit`` undelivered responses after ``after_id``, in order.

    NOTE: the delivery of a device's responses reads ahead with this (one indexed range read for
    many responses) instead of a pass over every device's head per response. Rows behind a
    device's head were never tried, so they are all due: no ``next_attempt_at`` filter, which
    could skip a row and break the device's order.
    """
    rows = conn.execute(_NEXT, {"b_device": device, "b_after": after_id, "b_limit": limit})
    return [OutboxItem(**dict(row._mapping)) for row in rows]


_NEXT = (
    sa.select(*_ITEM_COLUMNS)
    .where(PENDING, OB.c.device == sa.bindparam("b_device"), OB.c.id > sa.bindparam("b_after"))
    .order_by(OB.c.id)
    .limit(sa.bindparam("b_limit"))
)


def undelivered_count(conn: Connection) -> int:
    """How many responses await delivery."""
    value: Any = conn.execute(sa.select(sa.func.count()).select_from(OB).where(PENDING))
    return int(value.scalar_one())


def dead_letter_count(conn: Connection) -> int:
    """How many responses were given up on."""
    value: Any = conn.execute(
        sa.select(sa.func.count()).select_from(OB).where(OB.c.dead_lettered_at.is_not(None))
    )
    return int(value.scalar_one())
