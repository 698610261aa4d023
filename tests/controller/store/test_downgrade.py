"""Rollbacks: every migration shipped undoes itself (`db downgrade`), on SQLite and PostgreSQL,
and a schema newer than this code is named as such. Written over every revision found in
migrations/versions, so a new migration is covered without touching this file."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from controller.cli import main
from controller.store import SchemaNewerError, SchemaOutdatedError, Store
from controller.store._database import alembic_config, create_migration_engine, normalise_url, revisions
from controller.store._models import Base


def _schema(url: str) -> dict[str, Any]:
    """Tables with their columns, indexes and unique constraints, as the database has them."""
    engine = create_migration_engine(normalise_url(url))
    try:
        with engine.connect() as conn:
            inspector = sa.inspect(conn)
            return {
                table: (
                    sorted((c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(table)),
                    sorted((i["name"], tuple(i["column_names"])) for i in inspector.get_indexes(table)),
                    sorted(tuple(u["column_names"]) for u in inspector.get_unique_constraints(table)),
                )
                for table in inspector.get_table_names()
                if table != "alembic_version"
            }
    finally:
        engine.dispose()


def _upgrade_to(url: str, revision: str) -> None:
    engine = create_migration_engine(normalise_url(url))
    try:
        with engine.begin() as conn:
            command.upgrade(alembic_config(conn), revision)
    finally:
        engine.dispose()


def _stamp(url: str, revision: str) -> None:
    engine = create_migration_engine(normalise_url(url))
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE alembic_version SET version_num = :r"), {"r": revision})
    finally:
        engine.dispose()


def test_every_migration_downgrades_to_the_schema_its_upgrade_made(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    shipped = revisions()
    assert len(shipped) >= 5 and shipped[0] == "0001"  # the scan sees the migrations
    made: dict[str, Any] = {"base": _schema(db_url)}
    for revision in shipped:  # one step at a time, keeping what each step made
        _upgrade_to(db_url, revision)
        made[revision] = _schema(db_url)
    store = Store.from_url(db_url)
    assert store.schema_status().up_to_date
    for below in reversed(["base", *shipped[:-1]]):  # `db downgrade` with no revision: one step back
        yes = ["--yes"] if below == "base" else []  # the step to an empty database asks first
        assert main(["db", "downgrade", "--database-url", db_url, *yes]) == 0, capsys.readouterr().err
        current = store.schema_status().current
        assert (current or "base") == below
        assert _schema(db_url) == made[below], f"downgrading to {below} left another schema"
    assert capsys.readouterr().out.count(" -> ") == len(shipped)
    assert main(["db", "upgrade", "--database-url", db_url]) == 0  # and up again, to what the models say
    engine = create_migration_engine(normalise_url(db_url))
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()
    # an explicit revision, several steps at once
    assert main(["db", "downgrade", shipped[1], "--database-url", db_url]) == 0
    assert store.schema_status().current == shipped[1] and _schema(db_url) == made[shipped[1]]
    assert main(["db", "downgrade", "9999", "--database-url", db_url]) == 2
    assert "unknown revision '9999'" in capsys.readouterr().err


def test_a_newer_schema_is_named_with_what_to_do(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store.from_url(db_url)
    store.upgrade()
    head = store.schema_status().head
    ahead = f"{int(head[:4]) + 1:04d}"  # a newer release's revision (ids start with 4 digits)
    _stamp(db_url, ahead)
    status = store.schema_status()
    assert status.newer and not status.up_to_date and status.current == ahead
    expected = (
        f"the database schema {ahead} is newer than this devicectl (newest {head}): "
        f"run the newer release's `devicectl db downgrade {head}`, or upgrade devicectl"
    )
    with pytest.raises(SchemaOutdatedError) as outdated:
        store.ensure_schema()
    assert str(outdated.value) == expected
    with pytest.raises(SchemaNewerError):
        store.ensure_schema(upgrade=True)
    for args in (["upgrade"], ["downgrade"], ["downgrade", head], ["status"]):
        code = main(["db", *args, "--database-url", db_url])
        captured = capsys.readouterr()
        assert code == 1, (args, captured)
        text = captured.out + captured.err
        assert expected in " ".join(text.split()), (args, text)  # not "Can't locate revision"
        assert "Can't locate" not in text and "Traceback" not in text
    assert store.schema_status().current == ahead  # nothing was touched
