"""Alembic environment: migrates the schema described by `controller.store._models`.

The store passes an open connection in ``config.attributes["connection"]``. Run by hand, the URL
comes from ``-x url=...`` or the ``DEVICECTL_DB_URL`` environment variable.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy.engine import Connection

from controller.store._database import create_migration_engine, normalise_url
from controller.store._models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or os.environ.get("DEVICECTL_DB_URL")
    if not url:
        raise RuntimeError("no database URL: pass -x url=... or set DEVICECTL_DB_URL")
    return url


def run_migrations_offline() -> None:
    """Emit SQL to stdout instead of applying it (`alembic upgrade head --sql`)."""
    url = normalise_url(_url())
    context.configure(
        url=url,
        target_metadata=target_metadata,
        compare_type=True,
        literal_binds=True,
        render_as_batch=url.get_backend_name() == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def _run(connection: Connection) -> None:
    # SQLite cannot ALTER most things in place; batch mode rebuilds tables instead.
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Apply migrations on the store's connection, or on a fresh one when run by hand."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_migration_engine(normalise_url(_url()))
    try:
        with engine.begin() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
