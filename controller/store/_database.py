"""Engines, connection settings and schema migrations.

SQLite is configured per connection (WAL, ``synchronous``, ``busy_timeout``, foreign keys) and
SQLAlchemy, not the ``sqlite3`` module, issues BEGIN: writes use ``BEGIN IMMEDIATE`` so a write
transaction takes the database's write lock up front instead of failing half-way when another
process wrote in between. PostgreSQL goes through psycopg 3.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.pool import NullPool, StaticPool

from ._alembic import Config, MigrationContext, ScriptDirectory, command
from ._types import SchemaStatus

T = TypeVar("T")

SQLITE_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
SQLITE_BUSY_TIMEOUT_MS = 10_000
READ_POOL_SIZE = 4
#: the TCP keepalive of every PostgreSQL connection, at both ends (seconds idle, between probes,
#: probes): about a minute before a peer that went away without a word is given up
KEEPALIVE = (30, 10, 3)
#: libpq's TCP settings for every PostgreSQL connection, where the URL does not set them: a server
#: behind a network that went silent (a partition, a dropped route: no reset comes back) fails a
#: connect after `connect_timeout` and a query after `tcp_user_timeout` (data unacknowledged) or
#: the keepalives (an idle connection), about a minute, instead of the kernel's retransmissions
#: (about 15 minutes) while the writer thread waits; the pool then reconnects as after any outage
POSTGRES_TCP = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": KEEPALIVE[0],
    "keepalives_interval": KEEPALIVE[1],
    "keepalives_count": KEEPALIVE[2],
    "tcp_user_timeout": 60_000,
}

# Serialises `upgrade()` across processes sharing one PostgreSQL database (arbitrary constant).
_MIGRATION_LOCK_KEY = 0x64657663  # "devc"


class SchemaOutdatedError(RuntimeError):
    """The database schema is not at the head revision this code needs."""

    def __init__(self, status: SchemaStatus, display_url: str) -> None:
        self.status = status
        if status.newer:
            super().__init__(newer_schema_message(status))
            return
        current = status.current or "empty (no schema)"
        super().__init__(
            f"database schema at {display_url} is {current}, this version needs {status.head}; "
            "run `devicectl db upgrade` (or start `devicectl serve` with --auto-upgrade)"
        )


class SchemaNewerError(RuntimeError):
    """The database is at a revision this code does not ship: a newer release migrated it."""

    def __init__(self, status: SchemaStatus) -> None:
        self.status = status
        super().__init__(newer_schema_message(status))


def newer_schema_message(status: SchemaStatus) -> str:
    """What to do when a newer release's schema meets this code (a rollback of the binary):
    only the newer release knows how to undo its own migrations."""
    return (
        f"the database schema {status.current} is newer than this devicectl (newest {status.head}): "
        f"run the newer release's `devicectl db downgrade {status.head}`, or upgrade devicectl"
    )


def normalise_url(url: str | URL) -> URL:
    """Parse a database URL, pinning PostgreSQL to psycopg 3 and SQLite to the stdlib driver."""
    parsed = make_url(url) if isinstance(url, str) else url
    backend = parsed.get_backend_name()
    if backend in ("postgresql", "postgres"):
        if parsed.drivername != "postgresql+psycopg":
            parsed = parsed.set(drivername="postgresql+psycopg")
    elif backend == "sqlite":
        if parsed.get_driver_name() != "pysqlite":
            raise ValueError(f"unsupported SQLite driver in {parsed.drivername!r}; use sqlite:///PATH")
    else:
        raise ValueError(f"unsupported database URL {parsed.render_as_string()!r}: use sqlite or postgresql")
    return parsed


def display_url(url: URL) -> str:
    """The URL with any password masked, for logs and error messages."""
    return url.render_as_string(hide_password=True)


def is_sqlite_memory(url: URL) -> bool:
    """True for URLs that name a private in-memory SQLite database."""
    return url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")


def _sqlite_file(url: URL) -> Path | None:
    if is_sqlite_memory(url) or url.query.get("uri") in ("true", "1") or url.database is None:
        return None
    return Path(url.database)


def _configure_sqlite(engine: Engine, *, synchronous: str, begin: str) -> None:
    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy issue BEGIN (see the module docstring); sqlite3 still issues COMMIT/ROLLBACK.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute(f"PRAGMA synchronous = {synchronous}")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # NOTE: on the driver's connection, not `exec_driver_sql`: every transaction runs this,
        # and SQLAlchemy's statement machinery was two thirds of an empty transaction's cost
        # (190 us); its errors are wrapped as `exec_driver_sql` would (OperationalError: locked)
        try:
            conn.connection.driver_connection.execute(begin)  # type: ignore[union-attr]
        except sqlite3.Error as exc:
            raise sa.exc.DBAPIError.instance(begin, None, exc, sqlite3.Error) from exc


def postgres_engine(url: URL, *, application_name: str | None = None, **options: Any) -> Engine:
    """A PostgreSQL engine (`options` as `sa.create_engine` takes them) whose every connection
    sets libpq's `POSTGRES_TCP` where `url`'s query does not (an operator's own setting wins), and
    asks the server for the same keepalive (`tcp_keepalives_*`): a controller that vanished
    mid-transaction or holding a lock (its node died, a cut) lets go of its row and advisory locks
    in about a minute, not after the server's default of two hours and more."""
    connect_args: dict[str, Any] = {k: v for k, v in POSTGRES_TCP.items() if k not in url.query}
    if application_name is not None:
        connect_args["application_name"] = application_name
    engine = sa.create_engine(url, connect_args=connect_args, **options)

    @sa.event.listens_for(engine, "connect")
    def _keep_alive_at_server(dbapi_connection: Any, _record: Any) -> None:
        idle, interval, count = KEEPALIVE
        cursor = dbapi_connection.cursor()
        cursor.execute(
            "SELECT set_config('tcp_keepalives_idle', %s, false), "
            "set_config('tcp_keepalives_interval', %s, false), set_config('tcp_keepalives_count', %s, false)",
            (str(idle), str(interval), str(count)),
        )
        cursor.close()
        dbapi_connection.commit()

    return engine


def create_engines(
    url: URL, *, sqlite_synchronous: str = "FULL", read_pool_size: int = READ_POOL_SIZE
) -> tuple[Engine, Engine]:
    """Build ``(write_engine, read_engine)`` for ``url``.

    The write engine holds one connection, used only by the writer thread. For a private in-memory
    SQLite database both are the same single-connection engine (the caller must then serialise
    reads with writes).
    """
    if url.get_backend_name() == "sqlite":
        sync = sqlite_synchronous.upper()
        if sync not in SQLITE_SYNCHRONOUS:
            raise ValueError(
                f"sqlite_synchronous must be one of {SQLITE_SYNCHRONOUS}, got {sqlite_synchronous!r}"
            )
        connect_args = {"check_same_thread": False}
        if is_sqlite_memory(url):
            engine = sa.create_engine(url, connect_args=connect_args, poolclass=StaticPool)
            _configure_sqlite(engine, synchronous=sync, begin="BEGIN IMMEDIATE")
            return engine, engine
        path = _sqlite_file(url)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        writer = sa.create_engine(url, connect_args=connect_args, pool_size=1, max_overflow=0)
        _configure_sqlite(writer, synchronous=sync, begin="BEGIN IMMEDIATE")
        reader = sa.create_engine(url, connect_args=connect_args, pool_size=read_pool_size, max_overflow=0)
        _configure_sqlite(reader, synchronous=sync, begin="BEGIN")
        return writer, reader
    writer = postgres_engine(url, pool_size=1, max_overflow=0, pool_pre_ping=True)
    reader = postgres_engine(url, pool_size=read_pool_size, max_overflow=0, pool_pre_ping=True)
    return writer, reader


def create_outcome_engine(url: URL) -> Engine | None:
    """PostgreSQL: one more writing connection, for delivery outcomes only (``_store``); None on
    SQLite, where a second writer would only wait for the first one's lock."""
    if url.get_backend_name() == "sqlite":
        return None
    return postgres_engine(url, pool_size=1, max_overflow=0, pool_pre_ping=True)


def create_migration_engine(url: URL, *, sqlite_synchronous: str = "FULL") -> Engine:
    """A short-lived engine for migrations and schema checks (no pooled connections left behind)."""
    if url.get_backend_name() == "sqlite":
        path = _sqlite_file(url)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url, connect_args={"check_same_thread": False}, poolclass=NullPool)
        _configure_sqlite(engine, synchronous=sqlite_synchronous.upper(), begin="BEGIN IMMEDIATE")
        return engine
    return postgres_engine(url, poolclass=NullPool)


def migrations_dir() -> Path:
    """The packaged ``migrations`` directory (Alembic's script location)."""
    import migrations

    # ``__path__`` rather than ``__file__``: an editable install made before ``migrations`` had an
    # ``__init__.py`` still maps it as a namespace package, which has no ``__file__``.
    return Path(next(iter(migrations.__path__))).resolve()


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config for the packaged migrations; ``connection`` is handed to ``env.py``."""
    config = Config(str(migrations_dir() / "alembic.ini"))
    config.set_main_option("script_location", str(migrations_dir()))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest revision shipped with this code."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:  # pragma: no cover - the package always ships a revision
        raise RuntimeError("no Alembic revisions found in the migrations package")
    return head


def revisions() -> list[str]:
    """Every revision shipped with this code, oldest first."""
    script = ScriptDirectory.from_config(alembic_config())
    return [s.revision for s in reversed(list(script.walk_revisions()))]


def schema_status(engine: Engine) -> SchemaStatus:
    """Compare the database's revision with the head revision."""
    head = head_revision()
    with engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    newer = current is not None and current not in revisions()
    return SchemaStatus(current=current, head=head, up_to_date=current == head, newer=newer)


def _locked(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        # Two controllers starting with --upgrade-db at once must not both run the DDL.
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY})


def upgrade(engine: Engine) -> None:
    """Apply all pending migrations in one transaction (a newer release's schema: refused)."""
    with engine.begin() as conn:
        _locked(conn)
        _refuse_newer(conn)
        command.upgrade(alembic_config(conn), "head")


def downgrade(engine: Engine, revision: str) -> None:
    """Undo migrations down to `revision` ("base": an empty schema) in one transaction, for a
    rollback to an older release; refused for a schema this code does not know."""
    if revision != "base" and revision not in revisions():
        raise ValueError(f"unknown revision {revision!r}: one of {', '.join(revisions())} or base")
    with engine.begin() as conn:
        _locked(conn)
        _refuse_newer(conn)
        command.downgrade(alembic_config(conn), revision)


def _refuse_newer(conn: Connection) -> None:
    current = MigrationContext.configure(conn).get_current_revision()
    if current is not None and current not in revisions():
        head = head_revision()
        raise SchemaNewerError(SchemaStatus(current=current, head=head, up_to_date=False, newer=True))


def is_postgres(conn: Connection) -> bool:
    """True on PostgreSQL (row locks, SKIP LOCKED and server-side time are available)."""
    return conn.dialect.name == "postgresql"


def by_code_point(conn: Connection, column: Any) -> Any:
    """`column` compared and ordered by code point, whatever the database's collation, as Python
    orders strings and as page tokens compare them: under PostgreSQL's en_US collation `node_B` sorts
    before `node-a`, so a page after `node-a` would skip or repeat rows. COLLATE "C" on PostgreSQL
    (UTF-8 bytes, code point order); SQLite's default BINARY collation already is that order."""
    return column.collate("C") if is_postgres(conn) else column


def newest_first(
    conn: Connection, query: Any, created: Any, key: Any, after: tuple[datetime, str] | None
) -> Any:
    """`query` ordered newest first (`created` descending, ties by `key` in code point order), from
    just after the row `after` names (a keyset page: rows added between two pages never shift a
    later page, as an offset would, so none is shown twice or skipped)."""
    ordered = by_code_point(conn, key)
    if after is not None:
        when, last = after
        query = query.where(sa.or_(created < when, sa.and_(created == when, ordered > last)))
    return query.order_by(created.desc(), ordered)


def dialect_insert(conn: Connection, table: sa.Table) -> Any:
    """An INSERT that supports ``ON CONFLICT`` on the connection's backend."""
    return insert_for(conn.dialect.name, table)


def insert_for(dialect: str, table: sa.Table) -> Any:
    """An INSERT that supports ``ON CONFLICT`` on the named backend (`conn.dialect.name`)."""
    if dialect == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


#: a list longer than this goes into a statement as ONE parameter (`one_of`)
_LONGEST_IN_LIST = 500


def one_of(conn: Connection, column: sa.ColumnElement[str], values: Sequence[str]) -> sa.ColumnElement[bool]:
    """`column IN values`, for a list of any length: a long one (a selector over a large inventory,
    the devices of every shard one process holds) is passed as one parameter, a JSON array read by
    `json_each` on SQLite and a `text[]` on PostgreSQL, since a statement takes at most 32,766
    (SQLite's default build) or 65,535 (psycopg) bound parameters. The filter of a query with an
    order and a limit (a page) takes this: `chunks` would need every chunk read whole and merged."""
    if len(values) <= _LONGEST_IN_LIST:
        return column.in_(list(values))
    if is_postgres(conn):
        return column == sa.any_(sa.bindparam(None, list(values), type_=postgresql.ARRAY(sa.Text)))
    array = sa.bindparam(None, json.dumps(list(values)), type_=sa.Text)
    listed = sa.func.json_each(array).table_valued("value")
    return column.in_(sa.select(listed.c.value))


def chunks(items: Sequence[T], size: int = 500) -> Iterator[Sequence[T]]:
    """Split ``items`` so IN lists stay well under the backends' bound-parameter limits."""
    for start in range(0, len(items), size):
        yield items[start : start + size]
