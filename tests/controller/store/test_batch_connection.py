"""A writer with `hold_connection` (a SQLite file's store) keeps its connection from one transaction
to the next; after a failed transaction it takes a new one, and at close it gives it back. The
store holds it only on a SQLite file, never on PostgreSQL (checked out and pinged per transaction)
or an in-memory database (one connection shared with the reads). Real SQLite files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from controller.store import DeviceUpsert, Store
from controller.store._batch import BatchWriter


class Handler:
    """Inserts its arguments; an argument "fail" raises (its transaction is rolled back). Records
    the connection each call ran on."""

    def __init__(self) -> None:
        self.connections: list[Any] = []

    def __call__(self, conn: Connection, args: list[Any]) -> list[Any]:
        self.connections.append(conn)
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS t (v TEXT)")
        for v in args:
            conn.exec_driver_sql("INSERT INTO t VALUES (?)", (v,))
            if v == "fail":
                raise RuntimeError("refused")
        return list(args)


def _rows(engine: sa.Engine) -> list[str]:
    with engine.connect() as conn:
        return [v for (v,) in conn.exec_driver_sql("SELECT v FROM t ORDER BY rowid")]


async def test_a_held_connection_serves_every_transaction_and_is_replaced_after_a_failure(
    tmp_path: Path,
) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'held.db'}", pool_size=1, max_overflow=0)
    writer = BatchWriter(engine, hold_connection=True)
    handler = Handler()
    try:
        assert await writer.submit(handler, "a") == "a"
        assert await writer.submit(handler, "b") == "b"
        with pytest.raises(RuntimeError, match="refused"):
            await writer.submit(handler, "fail")
        assert await writer.submit(handler, "c") == "c"
        # one connection for the first transactions (committed each), another after the failure
        first, second, failed, after = handler.connections
        assert first is second is failed
        assert after is not failed
        assert engine.pool.checkedout() == 1  # held between transactions
    finally:
        await writer.close()
    assert engine.pool.checkedout() == 0  # given back at close
    assert _rows(engine) == ["a", "b", "c"]  # the failed transaction left nothing
    engine.dispose()


async def test_without_it_each_transaction_checks_a_connection_out(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'plain.db'}", pool_size=1, max_overflow=0)
    writer = BatchWriter(engine)
    try:
        assert await writer.submit(Handler(), "a") == "a"
        assert engine.pool.checkedout() == 0
    finally:
        await writer.close()
        engine.dispose()


@pytest.mark.parametrize("where", ["file", "memory", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_the_store_holds_it_on_a_sqlite_file_only(where: str, tmp_path: Path, request: Any) -> None:
    if where == "file":
        url = f"sqlite:///{tmp_path / 'var' / 'devicectl.db'}"
    elif where == "memory":
        url = "sqlite://"
    else:
        url = request.getfixturevalue("pg_database").render_as_string(hide_password=False)
    store = Store.from_url(url)
    store.upgrade()
    await store.start()
    try:
        await store.sync_inventory([DeviceUpsert("dev1", "redfish")])
        assert (await store.get_device("dev1")) is not None
        assert (store._writer._held is not None) == (where == "file")
    finally:
        await store.close()
