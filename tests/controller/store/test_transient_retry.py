"""A transaction PostgreSQL rolls back whole as a deadlock or serialisation victim (SQLSTATE 40P01,
40001) runs again under the writer's tenacity policy; any other error is not retried. The errors
are raised by a real PostgreSQL server (`RAISE ... USING ERRCODE`), so psycopg classifies them as it
would a real deadlock."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import DBAPIError

from controller.store._batch import _TRANSIENT_RETRIES, BatchWriter
from controller.store._database import normalise_url

pytestmark = pytest.mark.postgres


def _raiser(sqlstate: str, times: int) -> tuple[Any, list[int]]:
    calls: list[int] = []

    def handler(conn: Connection, args: list[Any]) -> list[str]:
        calls.append(len(args))
        if len(calls) <= times:
            conn.exec_driver_sql(f"DO $$ BEGIN RAISE EXCEPTION 'victim' USING ERRCODE = '{sqlstate}'; END $$")
        return ["done" for _ in args]

    return handler, calls


@pytest.mark.parametrize("sqlstate", ["40P01", "40001"])
async def test_a_deadlock_or_serialisation_victim_runs_again(pg_database: URL, sqlstate: str) -> None:
    engine = sa.create_engine(normalise_url(pg_database.render_as_string(hide_password=False)))
    writer = BatchWriter(engine)
    try:
        handler, calls = _raiser(sqlstate, times=2)
        assert await writer.submit(handler, 1) == "done"
        assert len(calls) == 3 and writer.stats.transient_retries == 2
        handler, calls = _raiser(sqlstate, times=_TRANSIENT_RETRIES + 1)  # one more than allowed
        with pytest.raises(DBAPIError):
            await writer.submit(handler, 1)
        assert len(calls) == _TRANSIENT_RETRIES + 1
    finally:
        await writer.close()
        engine.dispose()


async def test_other_database_errors_are_not_retried(pg_database: URL) -> None:
    engine = sa.create_engine(normalise_url(pg_database.render_as_string(hide_password=False)))
    writer = BatchWriter(engine)
    try:
        handler, calls = _raiser("23505", times=1)  # unique_violation: running it again changes nothing
        with pytest.raises(DBAPIError):
            await writer.submit(handler, 1)
        assert len(calls) == 1 and writer.stats.transient_retries == 0
    finally:
        await writer.close()
        engine.dispose()
