"""Statements run on the driver's cursor (`controller.store._direct`): what they store and read
back is what SQLAlchemy's own execution stores and reads, on SQLite and PostgreSQL, and a driver
error surfaces as SQLAlchemy's, so the group commit's retry and one-by-one rerun still work."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import sqlite

from controller.store import Store
from controller.store._database import create_engines, normalise_url
from controller.store._direct import Direct, sqlite_utc_text
from controller.store._models import OUTBOX, REQUESTS, UTCDateTime
from tests.controller.store.test_completion import finish, req

R = REQUESTS
#: microseconds 0: SQLite's text of a datetime must keep its fixed width (the columns sort as text)
WHOLE = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
ODD = datetime(2026, 3, 4, 7, 6, 7, 123, tzinfo=UTC) + timedelta(hours=-2)

_FINISH = (
    sa.update(R)
    .where(R.c.request_id == sa.bindparam("b_id"))
    .values(
        status="completed",
        finished_at=sa.bindparam("b_at", type_=UTCDateTime()),
        writes_json=sa.bindparam("b_writes", type_=R.c.writes_json.type),
    )
)
_READ = sa.select(R.c.request_id, R.c.status, R.c.finished_at, R.c.writes_json, R.c.attempts).where(
    R.c.request_id.in_(sa.bindparam("b_ids", expanding=True))
)


@pytest.fixture
async def engine(store: Store) -> sa.Engine:
    writer, reader = create_engines(normalise_url(store.url.render_as_string(hide_password=False)))
    reader.dispose()
    await store.accept([req(f"r{i}") for i in range(4)])
    return writer


async def test_the_cursor_stores_and_reads_what_sqlalchemy_does(engine: sa.Engine) -> None:
    writes = [{"target": "/x", "body": {"w": 500.0}, "note": "é"}]
    with engine.begin() as conn:
        Direct(_FINISH).many(
            conn,
            [
                {"b_id": "r0", "b_at": WHOLE, "b_writes": writes},
                {"b_id": "r1", "b_at": ODD, "b_writes": None},
            ],
        )
        conn.execute(_FINISH, [{"b_id": "r2", "b_at": WHOLE, "b_writes": writes}])
    with engine.connect() as conn:
        text_of = sa.select(
            R.c.request_id, sa.cast(R.c.finished_at, sa.Text()), sa.cast(R.c.writes_json, sa.Text())
        )
        stored = {rid: (at, w) for rid, at, w in conn.execute(text_of)}
        # the same text as SQLAlchemy's own execution, a JSON NULL stored as SQL NULL
        assert stored["r0"] == stored["r2"]
        assert stored["r1"][1] is None
        rows = Direct(_READ, expanding="b_ids").select(conn, ["r0", "r1", "r9"])
        by_id = {row.request_id: row for row in rows}
        assert set(by_id) == {"r0", "r1"}
        assert (by_id["r0"].status, by_id["r0"].finished_at, by_id["r0"].writes_json) == (
            "completed",
            WHOLE,
            writes,
        )
        assert (by_id["r1"].finished_at, by_id["r1"].writes_json, by_id["r1"].attempts) == (ODD, None, 0)
        assert by_id["r1"].finished_at.tzinfo is not None
        # the same rows as SQLAlchemy reads them, for IN lists of several lengths
        for ids in (["r0"], ["r0", "r1"], ["r3", "r2", "r1", "r0"]):
            mine = sorted(tuple(r) for r in Direct(_READ, expanding="b_ids").select(conn, ids))
            theirs = sorted(tuple(r) for r in conn.execute(_READ, {"b_ids": ids}))
            assert mine == theirs


async def test_a_driver_error_is_sqlalchemys(engine: sa.Engine) -> None:
    insert = Direct(
        sa.insert(OUTBOX), columns=("device", "request_id", "response", "created_at", "next_attempt_at")
    )
    row = {
        "device": "dev1",
        "request_id": "r0",
        "response": b"x",
        "created_at": WHOLE,
        "next_attempt_at": WHOLE,
    }
    with engine.begin() as conn:
        insert.many(conn, [row])
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
        insert.many(conn, [row])  # the request id is unique
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(OUTBOX)).scalar_one() == 1


async def test_one_bad_completion_in_a_batch_fails_only_its_caller(store: Store, engine: sa.Engine) -> None:
    """The group commit reruns each operation alone when the shared transaction fails: the error a
    statement on the cursor raises (here the outbox's unique request id) fails only its caller."""
    row = {
        "device": "dev1",
        "request_id": "r1",
        "response": b"x",
        "created_at": WHOLE,
        "next_attempt_at": WHOLE,
    }
    with engine.begin() as conn:
        conn.execute(sa.insert(OUTBOX), [row])  # a response for r1 is there already
    results = await asyncio.gather(
        store.complete(finish("r0", state={"limit": 300})),
        store.complete(finish("r1")),
        store.complete(finish("r2", device="dev2", state={"limit": 200})),
        return_exceptions=True,
    )
    assert results[0] is True and results[2] is True
    assert isinstance(results[1], sa.exc.IntegrityError)
    assert store.stats.retried_batches >= 1
    statuses = [v.status for v in [await store.get_request(rid) for rid in ("r0", "r1", "r2")] if v]
    assert statuses == ["completed", "queued", "completed"]
    assert await store.device_state("dev2") == ({"limit": 200}, 1)


@pytest.mark.parametrize(
    "value",
    [
        WHOLE,
        ODD,
        datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
        datetime(9998, 12, 31, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=-5))),
        datetime(2026, 6, 1, 0, 30, tzinfo=timezone(timedelta(hours=5, minutes=30))),
        None,
    ],
)
def test_a_datetime_on_sqlite_is_the_text_sqlalchemy_makes(value: datetime | None) -> None:
    dialect = sqlite.dialect()
    theirs = UTCDateTime().dialect_impl(dialect).bind_processor(dialect)
    assert theirs is not None
    assert sqlite_utc_text(value) == theirs(value)


def test_a_naive_datetime_is_refused_on_the_cursor_too() -> None:
    with pytest.raises(ValueError, match="naive datetime"):
        sqlite_utc_text(datetime(2026, 1, 1))


def test_a_datetime_given_again_or_after_another_is_still_its_own_text() -> None:
    dialect = sqlite.dialect()
    theirs = UTCDateTime().dialect_impl(dialect).bind_processor(dialect)
    assert theirs is not None
    same_instant = WHOLE.astimezone(timezone(timedelta(hours=3)))
    sequence = [
        WHOLE,
        WHOLE,
        ODD,
        None,
        ODD,
        same_instant,
        WHOLE,
        None,
        None,
        WHOLE + timedelta(microseconds=1),
    ]
    assert [sqlite_utc_text(v) for v in sequence] == [theirs(v) for v in sequence]
    sqlite_utc_text(WHOLE)
    with pytest.raises(ValueError, match="naive datetime"):
        sqlite_utc_text(WHOLE.replace(tzinfo=None))
