"""Shard leases (``shard_leases``): which live controller runs each shard's requests.

A lease row is ``(shard, owner, token, expires_at)``; ``expires_at`` is database time, so
controllers on hosts with skewed clocks agree. Acquiring a shard (a free or expired row) bumps
``token``: the fencing token a completion must still match when it commits
(:func:`fenced_requests`). Write functions here are group-commit handlers (see ``_batch``); the
policy (how many shards to hold, when to release) lives in ``controller/cluster/shards.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ._database import chunks, dialect_insert, is_postgres
from ._models import CONTROLLER_LEASES, SHARD_LEASES
from ._types import Completion, ShardLease

L = CONTROLLER_LEASES
S = SHARD_LEASES

log = logging.getLogger(__name__)

#: roles whose processes hold shards (a front end only journals and acks)
EXECUTING_ROLES = ("all", "executor")


@dataclass(frozen=True, slots=True)
class LeaseRound:
    """One renewal round of one controller (see :func:`lease_round_many`)."""

    owner: str
    role: str
    ttl: float
    shard_count: int
    #: the shards this controller prefers, best first (spreads concurrent acquirers apart)
    preference: Sequence[int]
    #: hold no more than this many (None: the fair share, ceil(shard_count / live executors))
    cap: int | None = None
    #: the leases this process knows it holds, ``{shard: token}``: only those are renewed. A row
    #: of this owner with another token (or unknown here) is an earlier process's that used the
    #: same instance id (an executor restarted by ``serve --workers``): released, never renewed
    held: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LeaseRoundResult:
    #: every shard this controller holds after the round, with its fencing token
    held: dict[int, int]
    #: the shards among ``held`` acquired in this round (new tokens)
    acquired: frozenset[int]
    #: live controllers that hold shards (this one included)
    executors: int
    #: the fair share: ceil(shard_count / executors)
    share: int
    #: live leases of shards beyond ``shard_count``: another controller uses a larger shard_count
    foreign: int = 0


def _now(conn: Connection) -> Any:
    return sa.func.now() if is_postgres(conn) else datetime.now(UTC)


def _later(conn: Connection, seconds: float) -> Any:
    if is_postgres(conn):
        return sa.func.now() + sa.literal(timedelta(seconds=seconds), sa.Interval())
    return datetime.now(UTC) + timedelta(seconds=seconds)


def heartbeat(conn: Connection, owner: str, role: str) -> None:
    """Upsert ``owner``'s liveness row (``controller_leases``) with the current time and role."""
    stmt = dialect_insert(conn, L).values(owner=owner, heartbeat_at=_now(conn), role=role)
    stmt = stmt.on_conflict_do_update(
        index_elements=[L.c.owner],
        set_={"heartbeat_at": stmt.excluded.heartbeat_at, "role": stmt.excluded.role},
    )
    conn.execute(stmt)


def live_executors(conn: Connection, ttl: float) -> int:
    """Controllers that hold shards and heartbeated within ``ttl`` seconds."""
    query = (
        sa.select(sa.func.count())
        .select_from(L)
        .where(L.c.role.in_(EXECUTING_ROLES), L.c.heartbeat_at >= _later(conn, -ttl))
    )
    return int(conn.execute(query).scalar_one())


def renew(conn: Connection, owner: str, ttl: float, held: Mapping[int, int]) -> dict[int, int]:
    """Extend the leases ``held`` (``{shard: token}``) that are still ``owner``'s with that token
    by ``ttl``; ``{shard: token}`` of those renewed.

    A lease that expired but that nobody took is still ``owner``'s, with the same token: taking a
    shard over always draws a new token, so the token alone says whether anyone else held it.
    A row of ``owner`` whose token this process does not hold was left by an earlier process with
    the same instance id: it is released (a fresh acquisition draws a new token), so that
    process's completions, should it still be running, are fenced out."""
    query = sa.select(S.c.shard, S.c.token).where(S.c.owner == owner).order_by(S.c.shard)
    if is_postgres(conn):
        query = query.with_for_update()
    rows = {shard: token for shard, token in conn.execute(query)}
    renewed = {shard: token for shard, token in rows.items() if held.get(shard) == token}
    stale = sorted(set(rows) - set(renewed))
    for part in chunks(sorted(renewed)):
        conn.execute(sa.update(S).where(S.c.shard.in_(part)).values(expires_at=_later(conn, ttl)))
    for part in chunks(stale):
        conn.execute(sa.update(S).where(S.c.shard.in_(part)).values(owner="", expires_at=_now(conn)))
    if stale:
        log.warning(
            "%d shard leases of an earlier process with instance id %s released (taken anew)",
            len(stale),
            owner,
        )
    return renewed


def acquire(conn: Connection, owner: str, ttl: float, shards: Sequence[int]) -> dict[int, int]:
    """Take each of ``shards`` that is free (no row) or expired; ``{shard: new token}`` of those
    taken. A shard another controller holds, or takes at the same moment, is skipped: the
    conditional upsert re-checks the expiry after waiting for the other's row lock."""
    if not shards:
        return {}
    stmt = dialect_insert(conn, S).values(
        [{"shard": s, "owner": owner, "token": 1, "expires_at": _later(conn, ttl)} for s in sorted(shards)]
    )
    stmt = stmt.on_conflict_do_update(
        index_elements=[S.c.shard],
        set_={"owner": stmt.excluded.owner, "token": S.c.token + 1, "expires_at": stmt.excluded.expires_at},
        where=S.c.expires_at <= _now(conn),
    ).returning(S.c.shard, S.c.token)
    return {shard: token for shard, token in conn.execute(stmt)}


def held_elsewhere(conn: Connection, owner: str) -> set[int]:
    """Shards whose lease another controller holds now."""
    query = sa.select(S.c.shard).where(S.c.owner != owner, S.c.expires_at > _now(conn))
    return set(conn.execute(query).scalars())


def lease_round(conn: Connection, r: LeaseRound) -> LeaseRoundResult:
    """Heartbeat, renew this controller's leases, then acquire free shards up to its fair share."""
    heartbeat(conn, r.owner, r.role)
    held = renew(conn, r.owner, r.ttl, r.held)
    executors = max(live_executors(conn, r.ttl), 1)
    share = -(-r.shard_count // executors)
    target = share if r.cap is None else min(share, r.cap)
    acquired: dict[int, int] = {}
    if len(held) < target:
        busy = held_elsewhere(conn, r.owner) | set(held)
        free = [s for s in r.preference if s not in busy][: target - len(held)]
        acquired = acquire(conn, r.owner, r.ttl, free)
    foreign = conn.execute(
        sa.select(sa.func.count())
        .select_from(S)
        .where(S.c.shard >= r.shard_count, S.c.owner != "", S.c.expires_at > _now(conn))
    ).scalar_one()
    return LeaseRoundResult({**held, **acquired}, frozenset(acquired), executors, share, int(foreign))


def lease_round_many(conn: Connection, rounds: list[LeaseRound]) -> list[LeaseRoundResult]:
    """Group-commit handler for ``Store.lease_round``."""
    return [lease_round(conn, r) for r in rounds]


def release_many(conn: Connection, args: list[tuple[str, Mapping[int, int]]]) -> list[int]:
    """Give leases up at once (no owner, expired now) where ``(owner, token)`` is still current;
    the count released per call. The token stays, so the next holder's is higher."""
    out = []
    for owner, tokens in args:
        released = 0
        for shard, token in sorted(tokens.items()):
            stmt = (
                sa.update(S)
                .where(S.c.shard == shard, S.c.owner == owner, S.c.token == token)
                .values(owner="", expires_at=_now(conn))
            )
            released += conn.execute(stmt).rowcount
        out.append(released)
    return out


def forget_many(conn: Connection, owners: list[str]) -> list[None]:
    """Drop liveness rows (a controller that stops cleanly), so peers rebalance at once."""
    conn.execute(sa.delete(L).where(L.c.owner.in_(sorted(set(owners)))))
    return [None for _ in owners]


def fenced_requests(conn: Connection, completions: Sequence[Completion]) -> set[str]:
    """The request ids among ``completions`` whose fence is no longer current: the lease was
    released or taken over since (another owner or token). Their completion must write nothing.
    A lease that merely expired, with nobody taking it, still fences nobody out: no other process
    can have run the shard's requests without drawing a new token.

    On PostgreSQL the lease rows are read ``FOR SHARE``: a takeover (an UPDATE of the row) waits
    until this transaction ends, so the new owner's claim sees this completion committed, and a
    completion that starts after the takeover sees the new token."""
    fences = {c.fence.shard for c in completions if c.fence is not None}
    if not fences:
        return set()
    current: dict[int, Any] = {}
    for part in chunks(sorted(fences)):
        query = sa.select(S.c.shard, S.c.owner, S.c.token).where(S.c.shard.in_(part)).order_by(S.c.shard)
        if is_postgres(conn):
            query = query.with_for_update(read=True)
        current.update({row.shard: row for row in conn.execute(query)})
    out = set()
    for c in completions:
        if c.fence is None:
            continue
        row = current.get(c.fence.shard)
        if row is None or (row.owner, row.token) != (c.fence.owner, c.fence.token):
            out.add(c.request_id)
    return out


def list_leases(conn: Connection) -> list[ShardLease]:
    """Every shard lease row, by shard."""
    query = sa.select(S.c.shard, S.c.owner, S.c.token, S.c.expires_at).order_by(S.c.shard)
    return [ShardLease(**dict(row._mapping)) for row in conn.execute(query)]
