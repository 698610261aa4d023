"""Real database faults for tests, on SQLite and PostgreSQL alike (no mocked store).

- `CompletionFault`: a trigger makes the outbox insert of chosen request ids fail inside the
  completion's transaction until cleared. On PostgreSQL the error is a connection failure
  (SQLSTATE 08006, an outage to the controller); SQLite can only raise a constraint error, which
  the controller treats as the database refusing that completion.
- `DatabaseOutage`: the whole database goes away. PostgreSQL: the database stops accepting
  connections and the controller's backends are terminated. SQLite: the outbox and verification
  tables vanish (reads of them fail) and another connection holds the write lock (every commit
  fails).
- `JournalLock`: another session holds the journal's write lock: writes hang instead of failing.
"""

from __future__ import annotations

import sqlite3

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from tests.conftest import pg_admin_url

_SQLITE_TRIGGER = """
CREATE TRIGGER fail_outbox BEFORE INSERT ON outbox
WHEN EXISTS (SELECT 1 FROM test_fault WHERE request_id = NEW.request_id)
BEGIN SELECT RAISE(ABORT, 'injected fault: outbox insert refused'); END
"""
_PG_FUNCTION = """
CREATE FUNCTION fail_outbox() RETURNS trigger AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM test_fault WHERE request_id = NEW.request_id) THEN
    RAISE EXCEPTION 'injected fault: outbox insert refused' USING ERRCODE = '08006';
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql
"""
_PG_TRIGGER = "CREATE TRIGGER fail_outbox BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION fail_outbox()"


def _engine(url: str) -> sa.Engine:
    return sa.create_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT")


class CompletionFault:
    """Completions of the listed request ids fail (a real database error) until `clear()`."""

    def __init__(self, url: str) -> None:
        self._engine = _engine(url)
        with self._engine.connect() as conn:
            conn.exec_driver_sql("CREATE TABLE test_fault (request_id VARCHAR PRIMARY KEY)")
            if conn.dialect.name == "sqlite":
                conn.exec_driver_sql(_SQLITE_TRIGGER)
            else:
                conn.exec_driver_sql(_PG_FUNCTION)
                conn.exec_driver_sql(_PG_TRIGGER)

    def fail(self, *request_ids: str) -> None:
        with self._engine.connect() as conn:
            for rid in request_ids:
                conn.execute(sa.text("INSERT INTO test_fault (request_id) VALUES (:r)"), {"r": rid})

    def clear(self) -> None:
        with self._engine.connect() as conn:
            conn.exec_driver_sql("DELETE FROM test_fault")

    def close(self) -> None:
        self._engine.dispose()


class DatabaseOutage:
    """The database becomes unusable between `start()` and `end()`."""

    def __init__(self, url: str) -> None:
        self._url = make_url(url)
        self._lock: sqlite3.Connection | None = None

    @property
    def _sqlite_path(self) -> str:
        return str(self._url.database)

    def start(self) -> None:
        if self._url.get_backend_name() == "sqlite":
            conn = sqlite3.connect(self._sqlite_path, isolation_level=None, timeout=30)
            conn.execute("ALTER TABLE outbox RENAME TO outbox_gone")
            conn.execute("ALTER TABLE verifications RENAME TO verifications_gone")
            conn.execute("BEGIN EXCLUSIVE")  # held: every other commit fails with "locked"
            self._lock = conn
            return
        admin = _engine(pg_admin_url().render_as_string(hide_password=False))
        name = self._url.database
        with admin.connect() as conn:
            conn.exec_driver_sql(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            conn.execute(
                sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :d"),
                {"d": name},
            )
        admin.dispose()

    def end(self) -> None:
        if self._url.get_backend_name() == "sqlite":
            assert self._lock is not None
            self._lock.execute("ALTER TABLE outbox_gone RENAME TO outbox")
            self._lock.execute("ALTER TABLE verifications_gone RENAME TO verifications")
            self._lock.execute("COMMIT")
            self._lock.close()
            self._lock = None
            return
        admin = _engine(pg_admin_url().render_as_string(hide_password=False))
        with admin.connect() as conn:
            conn.exec_driver_sql(f'ALTER DATABASE "{self._url.database}" ALLOW_CONNECTIONS true')
        admin.dispose()


class JournalLock:
    """Another session holds the journal's write lock between `start()` and `end()`: writes hang
    (they wait for the lock) rather than fail. PostgreSQL: `LOCK TABLE requests IN ACCESS EXCLUSIVE
    MODE` in an open transaction. SQLite: `BEGIN EXCLUSIVE` on the database file."""

    def __init__(self, url: str) -> None:
        self._url = make_url(url)
        self._sqlite: sqlite3.Connection | None = None
        self._pg: sa.Connection | None = None
        self._engine: sa.Engine | None = None

    def start(self) -> None:
        if self._url.get_backend_name() == "sqlite":
            self._sqlite = sqlite3.connect(str(self._url.database), isolation_level=None, timeout=30)
            self._sqlite.execute("BEGIN EXCLUSIVE")
            return
        # not `_engine`'s autocommit: LOCK TABLE needs a transaction, held open until `end()`
        self._engine = sa.create_engine(self._url.render_as_string(hide_password=False), poolclass=NullPool)
        self._pg = self._engine.connect()
        self._pg.begin()
        self._pg.exec_driver_sql("SET LOCAL lock_timeout = '30s'")
        self._pg.exec_driver_sql("LOCK TABLE requests IN ACCESS EXCLUSIVE MODE")

    def end(self) -> None:
        if self._sqlite is not None:
            self._sqlite.execute("COMMIT")
            self._sqlite.close()
            self._sqlite = None
        if self._pg is not None:
            self._pg.rollback()
            self._pg.close()
            self._pg = None
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
