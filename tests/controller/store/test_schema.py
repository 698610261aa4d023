"""Schema management: migrations from empty, schema status, URLs and SQLite settings."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from controller.store import SchemaOutdatedError, Store
from controller.store._database import create_migration_engine, normalise_url
from controller.store._models import Base


def test_upgrade_from_empty_creates_the_models_schema(db_url: str) -> None:
    store = Store.from_url(db_url)
    before = store.schema_status()
    assert before.current is None
    assert not before.up_to_date

    store.upgrade()
    after = store.schema_status()
    assert after.current == after.head == before.head
    assert after.up_to_date

    # The hand-written revision and the models must describe the same schema.
    engine = create_migration_engine(normalise_url(db_url))
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
            tables = set(sa.inspect(conn).get_table_names())
    finally:
        engine.dispose()
    assert {
        "devices",
        "requests",
        "outbox",
        "state_audit",
        "verifications",
        "controller_leases",
    } <= tables

    store.upgrade()  # a second upgrade is a no-op
    assert store.schema_status().up_to_date


def test_ensure_schema_names_the_command_or_upgrades(db_url: str) -> None:
    store = Store.from_url(db_url)
    with pytest.raises(SchemaOutdatedError, match="devicectl db upgrade") as info:
        store.ensure_schema()
    assert info.value.status.current is None
    assert store.ensure_schema(upgrade=True).up_to_date
    assert store.ensure_schema().up_to_date


def test_url_normalisation_and_masking() -> None:
    url = normalise_url("postgresql://alice:s3cret@db.example:5432/devicectl")
    assert url.drivername == "postgresql+psycopg"
    assert normalise_url("postgres://db/x").drivername == "postgresql+psycopg"
    store = Store.from_url("postgresql://alice:s3cret@db.example:5432/devicectl")
    assert "s3cret" not in store.url_for_display
    assert store.url_for_display == "postgresql+psycopg://alice:***@db.example:5432/devicectl"
    assert store.dialect == "postgresql"
    with pytest.raises(ValueError, match="unsupported"):
        normalise_url("mysql://x/y")
    with pytest.raises(ValueError, match="sqlite_synchronous"):
        Store.from_url("sqlite:///x.db", sqlite_synchronous="SOMETIMES")


async def test_sqlite_file_settings(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "devicectl.db"
    store = Store.from_url(f"sqlite:///{path}")
    store.upgrade()
    await store.start()
    try:
        assert path.parent.is_dir()
        with store._write_engine.connect() as conn:
            pragma = {
                name: conn.exec_driver_sql(f"PRAGMA {name}").scalar()
                for name in ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
            }
        assert pragma == {"journal_mode": "wal", "synchronous": 2, "foreign_keys": 1, "busy_timeout": 10000}
    finally:
        await store.close()
    # WAL is a property of the database file, so every other process sees it too.
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)


async def test_sqlite_synchronous_is_configurable(tmp_path: Path) -> None:
    store = Store.from_url(f"sqlite:///{tmp_path / 'x.db'}", sqlite_synchronous="normal")
    try:
        with store._write_engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1
    finally:
        await store.close()


async def test_in_memory_sqlite_works() -> None:
    store = Store.from_url("sqlite://")
    store.upgrade()
    await store.start()
    try:
        assert store.schema_status().up_to_date
        assert await store.list_devices() == []
    finally:
        await store.close()
