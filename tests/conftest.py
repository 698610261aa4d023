"""Shared fixtures: a database URL per backend (SQLite file, fresh PostgreSQL database) and a Store.

PostgreSQL comes from ``DEVICECTL_TEST_PG_URL`` (default: the local ``test`` database, used only as
the admin connection that creates and drops one throw-away database per test). When PostgreSQL is
unreachable the postgres variants are skipped locally but fail in CI (``CI`` set), so CI can never
go green without having run them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import NullPool

from controller.delivery.sink import TopologySink
from controller.store import Store

DEFAULT_PG_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"

_pg_unreachable: str | None = None
_pg_checked = False


def pg_admin_url() -> URL:
    """The admin connection's URL (normalised to psycopg 3)."""
    url = make_url(os.environ.get("DEVICECTL_TEST_PG_URL", DEFAULT_PG_ADMIN_URL))
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    return url


def _admin_engine() -> sa.Engine:
    return sa.create_engine(
        pg_admin_url(),
        isolation_level="AUTOCOMMIT",  # CREATE/DROP DATABASE cannot run in a transaction
        poolclass=NullPool,
        connect_args={"connect_timeout": 3},
    )


def _require_postgres() -> None:
    global _pg_checked, _pg_unreachable
    if not _pg_checked:
        _pg_checked = True
        engine = _admin_engine()
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
        except Exception as exc:
            _pg_unreachable = f"{type(exc).__name__}: {exc}".splitlines()[0]
        finally:
            engine.dispose()
    if _pg_unreachable is not None:
        where = pg_admin_url().render_as_string(hide_password=True)
        message = f"PostgreSQL at {where} is unreachable ({_pg_unreachable}); set DEVICECTL_TEST_PG_URL"
        if os.environ.get("CI"):
            pytest.fail(f"{message}. CI must run the PostgreSQL tests.", pytrace=False)
        pytest.skip(message)


@pytest.fixture
def pg_database() -> Iterator[URL]:
    """A fresh, empty PostgreSQL database for one test, dropped afterwards."""
    _require_postgres()
    name = f"devicectl_test_{uuid.uuid4().hex[:16]}"
    engine = _admin_engine()
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        yield pg_admin_url().set(database=name)
    finally:
        with engine.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database's URL: a temporary SQLite file or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'var' / 'devicectl.db'}"
    url: URL = request.getfixturevalue("pg_database")
    return url.render_as_string(hide_password=False)


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    """A migrated, started Store on ``db_url``; closed after the test."""
    s = Store.from_url(db_url)
    s.upgrade()
    await s.start()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def sink() -> AsyncIterator[TopologySink]:
    """A topology sink on a free port: the callback address controllers deliver responses to."""
    s = TopologySink("127.0.0.1:0")
    await s.start()
    yield s
    await s.stop()


# ---- running in parallel (`make test`: pytest-xdist, `--dist loadfile`) -------------------------


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: two workers per core, at most 8. Most tests spend their time waiting on child
    processes, sockets and timers (the serial suite keeps about half a core busy), so one worker
    per core would leave the cores idle half the time."""
    return min(8, 2 * len(os.sched_getaffinity(0)))


@pytest.fixture(autouse=True, scope="session")
def _identity_run_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Identity leases of this test run's processes (plugins.base.identity) in a directory of its
    own, inherited by child processes: another run on the same host holds none of them."""
    saved = os.environ.get("DEVICECTL_RUN_DIR")
    path = tmp_path_factory.mktemp("run")
    path.chmod(0o700)
    os.environ["DEVICECTL_RUN_DIR"] = str(path)
    yield
    if saved is None:
        os.environ.pop("DEVICECTL_RUN_DIR", None)
    else:
        os.environ["DEVICECTL_RUN_DIR"] = saved
