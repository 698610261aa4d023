"""The request journal: accept, start and complete requests; read them back (claims: `_claims`).

Write functions here are group-commit handlers (``fn(conn, args) -> results``, see ``_batch``):
they run on the writer thread inside the batch's transaction and treat their argument list as a
unit, so a burst of operations costs a handful of statements instead of one per operation.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from . import _desired, _outbox, _shards, _state_changes, _verifications
from ._batch import Failed
from ._database import chunks, insert_for, is_postgres, one_of
from ._direct import Direct
from ._models import CONTROLLER_LEASES, OUTBOX, REQUESTS, UTCDateTime
from ._types import Accepted, Completion, JournalRow, NewRequest, RequestStatus, RequestView

R = REQUESTS
OB = OUTBOX
L = CONTROLLER_LEASES

UNFINISHED = (RequestStatus.QUEUED.value, RequestStatus.RUNNING.value)
COMPLETED = RequestStatus.COMPLETED.value

JOURNAL_COLUMNS = (
    R.c.seq,
    R.c.request_id,
    R.c.device,
    R.c.kind,
    R.c.payload,
    R.c.trace_id,
    R.c.status,
    R.c.outcome,
    R.c.error,
    R.c.attempts,
    R.c.accepted_at,
    R.c.deadline_at,
    R.c.started_at,
    R.c.finished_at,
    R.c.owner,
    R.c.shard,
)


def journal_row(row: Any) -> JournalRow:
    """A ``JournalRow`` from a row selected with the journal's columns."""
    m = row._mapping
    return JournalRow(**{c.name: m[c.name] for c in JOURNAL_COLUMNS})


def with_owner(row: JournalRow, owner: str) -> JournalRow:
    fields = {c.name: getattr(row, c.name) for c in JOURNAL_COLUMNS}
    fields["owner"] = owner
    return JournalRow(**fields)


def _request_view(row: Any) -> RequestView:
    m = row._mapping
    return RequestView(
        **{c.name: m[c.name] for c in JOURNAL_COLUMNS},
        response=m["response"],
        delivered_at=m["delivered_at"],
        delivery_attempts=m["delivery_attempts"] or 0,
        delivery_error=m["delivery_error"] or "",
        dead_lettered_at=m["dead_lettered_at"],
        writes=m["writes_json"],
    )


# --- writes (group-commit handlers) -------------------------------------------------------------


_NEXT_SEQS = sa.text("SELECT nextval(pg_get_serial_sequence('requests', 'seq')) FROM generate_series(1, :n)")


@functools.cache
def _accept_statement(dialect: str) -> Any:
    return (
        insert_for(dialect, R)
        .on_conflict_do_nothing(index_elements=[R.c.request_id])
        .returning(R.c.seq, R.c.request_id)
    )


_ACCEPT_SQLITE = Direct(
    _accept_statement("sqlite"),
    columns=(
        "request_id",
        "device",
        "kind",
        "payload",
        "trace_id",
        "status",
        "outcome",
        "error",
        "attempts",
        "accepted_at",
        "deadline_at",
        "owner",
        "shard",
    ),
)


# NOTE: statements run for every request are built once, with bound parameters (`expanding` for
# IN lists): SQLAlchemy caches the compiled form by a key it computes anew for every statement
# object, and building a select and computing that key cost ~8x its execution (0.4 of 0.5 ms).
_SEQS_OF = sa.select(R.c.request_id, R.c.seq, R.c.status).where(
    R.c.request_id.in_(sa.bindparam("b_ids", expanding=True))
)


def accept_many(conn: Connection, batches: list[Sequence[NewRequest]]) -> list[list[Accepted]]:
    """Journal every request not journaled yet; report the seq of each (new or existing) row.

    The first occurrence of a request id in the batch is inserted (unless the database already has
    it); any later occurrence is a duplicate. ``ON CONFLICT DO NOTHING ... RETURNING`` reports only
    the rows this statement really inserted, which stays correct when another process inserts the
    same request id concurrently (PostgreSQL waits for that transaction, then skips the row).
    """
    first: dict[str, NewRequest] = {}
    for rows in batches:
        for row in rows:
            first.setdefault(row.request_id, row)
    inserted: dict[str, int] = {}
    existing: dict[str, int] = {}
    completed: set[str] = set()  # of the existing rows
    if first:
        params: list[dict[str, Any]] = [
            {
                "request_id": r.request_id,
                "device": r.device,
                "kind": r.kind,
                "payload": r.payload,
                "trace_id": r.trace_id,
                "status": RequestStatus.QUEUED.value,
                "outcome": "",
                "error": "",
                "attempts": 0,
                "accepted_at": r.accepted_at,
                "deadline_at": r.deadline_at,
                "owner": r.owner,
                "shard": r.shard,
            }
            for r in first.values()
        ]
        if is_postgres(conn):
            # Two controllers inserting overlapping request ids in different orders would deadlock
            # on the unique index. Insert in request-id order (one global lock order) instead, with
            # seqs drawn up front and handed out in arrival order so seq still means arrival.
            seqs = sorted(conn.execute(_NEXT_SEQS, {"n": len(params)}).scalars())
            for param, seq in zip(params, seqs, strict=True):
                param["seq"] = seq
            params.sort(key=lambda param: param["request_id"])
        if is_postgres(conn):
            inserted = {rid: seq for seq, rid in conn.execute(_accept_statement(conn.dialect.name), params)}
        else:  # on the cursor (`_direct`): every acknowledged request runs it
            inserted = {rid: seq for seq, rid in _ACCEPT_SQLITE.insert_returning(conn, params)}
        missing = [rid for rid in first if rid not in inserted]
        for part in chunks(missing):
            for rid, seq, status in conn.execute(_SEQS_OF, {"b_ids": list(part)}):
                existing[rid] = seq
                if status == RequestStatus.COMPLETED.value:
                    completed.add(rid)
    older = _claim_older(conn, [(first[rid], seq) for rid, seq in inserted.items() if first[rid].claim_older])
    results: list[list[Accepted]] = []
    claimed: set[str] = set()
    for rows in batches:
        out: list[Accepted] = []
        for row in rows:
            rid = row.request_id
            if rid in inserted and rid not in claimed:
                claimed.add(rid)
                out.append(Accepted(rid, True, inserted[rid], older.get(rid, ())))
            else:
                seq = inserted.get(rid, existing.get(rid))
                if seq is None:  # pragma: no cover - the row must exist after the insert
                    raise RuntimeError(f"request {rid!r} neither inserted nor found")
                out.append(Accepted(rid, False, seq, completed=rid in completed))
        results.append(out)
    return results


def _claim_older(conn: Connection, new: list[tuple[NewRequest, int]]) -> dict[str, tuple[JournalRow, ...]]:
    """For requests the accepting process queues at once (``claim_older``): claim the unfinished
    requests of their devices with a lower seq that another controller journaled (or holds) and
    this one has not claimed yet, so they are queued before the new one instead of waiting for the
    claim poll and being overtaken. Each older row goes with the lowest new seq of its device.

    One request acknowledged before the next was sent has the lower seq and is committed, so it is
    seen here. Rows another controller is claiming right now are skipped, as by the poll."""
    found: dict[str, tuple[JournalRow, ...]] = {}
    by_owner: dict[str, list[tuple[NewRequest, int]]] = {}
    for row, seq in new:
        by_owner.setdefault(row.owner, []).append((row, seq))
    for owner, rows in by_owner.items():
        rows.sort(key=lambda item: item[1])
        shards = sorted({row.shard for row, _ in rows})
        top = rows[-1][1]
        older: list[JournalRow] = []
        for part in chunks(sorted({row.device for row, _ in rows})):
            query = (
                sa.select(*JOURNAL_COLUMNS)
                .where(
                    R.c.device.in_(part),
                    R.c.status.in_(UNFINISHED),
                    R.c.shard.in_(shards),
                    R.c.owner != owner,
                    R.c.seq < top,
                )
                .order_by(R.c.seq)
            )
            if is_postgres(conn):
                query = query.with_for_update(of=R, skip_locked=True)
            older.extend(journal_row(row) for row in conn.execute(query))
        taken: dict[str, list[JournalRow]] = {}
        for old in sorted(older, key=lambda row: row.seq):
            newer = next(
                (r for r, seq in rows if (r.device, r.shard) == (old.device, old.shard) and seq > old.seq),
                None,
            )
            if newer is not None:
                taken.setdefault(newer.request_id, []).append(with_owner(old, owner))
        seqs = [row.seq for group in taken.values() for row in group]
        for seq_part in chunks(seqs):
            conn.execute(sa.update(R).where(R.c.seq.in_(seq_part)).values(owner=owner))
        found.update({rid: tuple(group) for rid, group in taken.items()})
    return found


_MARK_RUNNING = Direct(
    sa.update(R)
    .where(R.c.request_id == sa.bindparam("b_request_id"), R.c.status != COMPLETED)
    .values(
        status=RequestStatus.RUNNING.value,
        started_at=sa.bindparam("b_at", type_=UTCDateTime()),
        attempts=R.c.attempts + 1,
    )
)


def mark_running_many(conn: Connection, args: list[tuple[str, datetime]]) -> list[None]:
    """Mark requests running (never a completed one: a late start must not reopen it)."""
    _MARK_RUNNING.many(conn, [{"b_request_id": rid, "b_at": at} for rid, at in args])
    return [None for _ in args]


_COMPLETE = (
    sa.update(R)
    .where(R.c.request_id == sa.bindparam("b_request_id"))
    .values(
        status=COMPLETED,
        outcome=sa.bindparam("b_outcome"),
        error=sa.bindparam("b_error"),
        finished_at=sa.bindparam("b_finished_at", type_=UTCDateTime()),
        writes_json=sa.bindparam("b_writes", type_=R.c.writes_json.type),
    )
)
#: a completion that also records the start (no ``mark_running`` was written for it)
_COMPLETE_STARTED = Direct(
    _COMPLETE.values(started_at=sa.bindparam("b_started_at", type_=UTCDateTime()), attempts=R.c.attempts + 1)
)
_COMPLETE_DIRECT = Direct(_COMPLETE)


def complete_many(conn: Connection, completions: list[Completion]) -> list[bool | Failed]:
    """Finish requests: journal row, device row and state, audit, outbox and verification at once.

    A request that is already completed (by an earlier batch, an earlier item of this batch or
    another process) is left alone and reported False, and so is one whose shard lease (its
    ``fence``) is no longer current: a controller that lost the lease writes nothing. On
    PostgreSQL the journal rows are locked (in a fixed order, against deadlocks) so two
    processes racing to complete the same request serialise and the second sees it completed.
    """
    # Lease rows first (like a takeover, which locks its lease row before claiming requests).
    fenced = _shards.fenced_requests(conn, completions)
    rids = sorted({c.request_id for c in completions})
    current: dict[str, Any] = {}
    query = _completing_query(conn.dialect.name)
    for part in chunks(rids):
        current.update({row.request_id: row for row in query.select(conn, part)})

    results: list[bool | Failed] = []
    applied: list[Completion] = []
    done = {rid for rid, row in current.items() if row.status == COMPLETED}
    for c in completions:
        row = current.get(c.request_id)
        if row is None:
            results.append(Failed(LookupError(f"cannot complete unknown request {c.request_id!r}")))
        elif c.request_id in done or c.request_id in fenced:
            results.append(False)
        else:
            done.add(c.request_id)
            applied.append(c)
            results.append(True)
    if not applied:
        return results

    for statement, group in (
        (_COMPLETE_DIRECT, [c for c in applied if c.started_at is None]),
        (_COMPLETE_STARTED, [c for c in applied if c.started_at is not None]),
    ):
        statement.many(conn, [_completion_params(c) for c in group])
    # Audit rows carry the journal's trace id and kind when the completion leaves them empty.
    _state_changes.apply_completions(
        conn,
        applied,
        trace_ids={rid: row.trace_id for rid, row in current.items()},
        kinds={rid: row.kind for rid, row in current.items()},
    )
    _outbox.insert_responses(
        conn, [c for c in applied if not c.internal], {rid: row.shard for rid, row in current.items()}
    )
    _desired.record(conn, applied)
    _verifications.insert_many(
        conn, [(c.verification, c.finished_at) for c in applied if c.verification is not None]
    )
    return results


@functools.cache
def _completing_query(dialect: str) -> Direct:
    query = (
        sa.select(R.c.request_id, R.c.status, R.c.trace_id, R.c.kind, R.c.shard)
        .where(R.c.request_id.in_(sa.bindparam("b_ids", expanding=True)))
        .order_by(R.c.request_id)
    )
    return Direct(query.with_for_update() if dialect == "postgresql" else query, expanding="b_ids")


def _completion_params(c: Completion) -> dict[str, Any]:
    params = {
        "b_request_id": c.request_id,
        "b_outcome": c.outcome,
        "b_error": c.error,
        "b_finished_at": c.finished_at,
        "b_writes": c.writes or None,
    }
    if c.started_at is not None:
        params["b_started_at"] = c.started_at
    return params


# --- reads ----------------------------------------------------------------------------------------

_VIEW_QUERY = sa.select(
    *JOURNAL_COLUMNS,
    OB.c.response,
    OB.c.delivered_at,
    OB.c.attempts.label("delivery_attempts"),
    OB.c.last_error.label("delivery_error"),
    OB.c.dead_lettered_at,
    R.c.writes_json,
).select_from(R.outerjoin(OB, OB.c.request_id == R.c.request_id))


def get_request(conn: Connection, request_id: str) -> RequestView | None:
    """One request with its delivery state, or None."""
    row = conn.execute(_VIEW_QUERY.where(R.c.request_id == request_id)).first()
    return _request_view(row) if row is not None else None


def list_requests(
    conn: Connection,
    device: str | None,
    status: str | None,
    undelivered_only: bool,
    limit: int,
    dead_letter_only: bool = False,
    outcome: str | None = None,
    kind: str | None = None,
    trace_id: str | None = None,
    before_seq: int | None = None,
    devices: Sequence[str] | None = None,
) -> list[RequestView]:
    """Requests, newest first. ``undelivered_only``: a response is written but not delivered yet
    (nor dead-lettered); ``dead_letter_only``: the receiver refused the response for good;
    ``outcome``: finished with that outcome."""
    query = _VIEW_QUERY
    if device is not None:
        query = query.where(R.c.device == device)
    if status is not None:
        query = query.where(R.c.status == status)
    if outcome is not None:
        query = query.where(R.c.outcome == outcome)
    if kind is not None:
        query = query.where(R.c.kind == kind)
    if trace_id is not None:
        query = query.where(R.c.trace_id == trace_id)
    if before_seq is not None:
        query = query.where(R.c.seq < before_seq)
    if devices is not None:
        query = query.where(one_of(conn, R.c.device, devices))
    if undelivered_only:
        query = query.where(OB.c.id.is_not(None), _outbox.PENDING)
    if dead_letter_only:
        query = query.where(OB.c.dead_lettered_at.is_not(None))
    query = query.order_by(R.c.seq.desc()).limit(limit)
    return [_request_view(row) for row in conn.execute(query)]
