"""One writer per BMC: a controller refuses to start beside a live process that would drive the
same BMCs (docs/reliability.md, "One writer per BMC").

- SQLite serves one process: `serve` holds an OS lock (`flock`) on `<database>.lock` for its whole
  life. A second process on the same file is refused with one line naming the holder (pid, host,
  instance id, start time). The kernel releases the lock when the holder dies, however it dies,
  so a restart after a crash is never blocked.
- On any database, one live process per instance id: on PostgreSQL a session advisory lock keyed
  by the instance id, held on a connection of its own for the process's life (the server drops it
  when that connection ends). The refusal names the holder's connection (its `application_name`
  says pid and host, with its address and start time).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import socket
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from controller.store._database import is_sqlite_memory, normalise_url
from plugins.base._identity import read_holder, try_lock, write_holder

log = logging.getLogger(__name__)


class WriterConflictError(RuntimeError):
    """Another live process holds the database (SQLite) or this instance id (any database)."""


#: how often the PostgreSQL lock's connection is checked (a lost connection lost the lock)
CHECK_SECONDS = 5.0
#: how long a start waits for a holder that is going away (the server notices a dead
#: connection at once on one host, a reaped process has released its file lock) before refusing
GRACE_SECONDS = 3.0


class WriterLock:
    """This process's claim to be the one writer: `acquire()` at start, `release()` at stop."""

    def __init__(self, database_url: str, instance_id: str) -> None:
        self._url: URL = normalise_url(database_url)
        self._instance_id = instance_id
        self._fd: int | None = None
        self._pg: sa.Connection | None = None
        self._engine: sa.Engine | None = None
        #: whether a PostgreSQL lock is to be kept (from its first acquisition to `release()`)
        self._keeping = False

    def acquire(self, grace: float = GRACE_SECONDS) -> None:
        """Take the lock, or raise `WriterConflictError` naming who holds it (after `grace`)."""
        backend = self._url.get_backend_name()
        give_up = time.monotonic() + grace
        while True:
            try:
                if backend == "sqlite":
                    self._lock_sqlite()
                elif backend == "postgresql":
                    self._lock_postgres()
                return
            except WriterConflictError:
                if time.monotonic() >= give_up:
                    raise
            time.sleep(0.2)

    @property
    def watched(self) -> bool:
        """Whether the lock needs `watch()` (a PostgreSQL lock; a file lock cannot be lost)."""
        return self._keeping

    async def watch(self) -> None:
        """Keep the PostgreSQL lock: a lost connection (a server restart, a network cut) lost it,
        so it is taken again at once; if another live process took the instance id meanwhile,
        say so every time (two writers: stop one)."""
        while self._keeping:
            await asyncio.sleep(CHECK_SECONDS)
            await asyncio.to_thread(self.check)

    def check(self) -> None:
        """One look at the PostgreSQL lock's connection; take the lock again if it was lost."""
        if not self._keeping:
            return
        pg = self._pg
        if pg is not None:
            try:
                pg.execute(sa.text("SELECT 1")).scalar_one()
                pg.commit()
                return
            except sa.exc.SQLAlchemyError as exc:
                log.warning(
                    "the connection holding instance id %r was lost (%s); taking it again",
                    self._instance_id,
                    type(exc).__name__,
                )
        self._drop_postgres()
        try:
            self._lock_postgres()
        except WriterConflictError as exc:
            log.error("%s: two live processes use it now; stop one of them", exc)
        except sa.exc.SQLAlchemyError as exc:
            log.error(
                "could not take instance id %r again (%s); trying again in %.0f s",
                self._instance_id,
                type(exc).__name__,
                CHECK_SECONDS,
            )

    def release(self) -> None:
        self._keeping = False
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
        self._drop_postgres()

    def _drop_postgres(self) -> None:
        pg, self._pg = self._pg, None
        if pg is not None:
            with contextlib.suppress(Exception):
                pg.close()
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.dispose()

    def _lock_sqlite(self) -> None:
        database = self._url.database
        if is_sqlite_memory(self._url) or not database or database.startswith("file:"):
            return  # a private in-memory database: no one else can open it
        path = Path(database).resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = path.with_name(path.name + ".lock")
        fd = try_lock(lock)
        if fd is None:
            raise WriterConflictError(
                f"the database {path} is in use by another live devicectl ({_holder(read_holder(lock))}); "
                "one process serves a SQLite database: stop that one, or give this one its own database"
            )
        write_holder(fd, instance_id=self._instance_id, started=time.time())
        self._fd = fd

    def _lock_postgres(self) -> None:
        name = f"devicectl pid={os.getpid()} host={socket.gethostname()}"[:63]
        self._engine = sa.create_engine(
            self._url, poolclass=NullPool, connect_args={"application_name": name}
        )
        conn = self._engine.connect()
        key = _advisory_key(self._instance_id)
        taken = conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar_one()
        conn.commit()
        if not taken:
            holder = conn.execute(
                sa.text(
                    "SELECT a.application_name, a.client_addr, a.backend_start FROM pg_locks l "
                    "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
                    "AND l.classid::bigint = :hi AND l.objid::bigint = :lo AND l.objsubid = 1"
                ),
                {"hi": (key >> 32) & 0xFFFFFFFF, "lo": key & 0xFFFFFFFF},
            ).first()
            conn.close()
            self._drop_postgres()
            who = "unknown" if holder is None else _pg_holder(holder)
            raise WriterConflictError(
                f"instance id {self._instance_id!r} is held by another live devicectl on this database "
                f"({who}); each process needs its own --instance-id"
            )
        self._pg, self._keeping = conn, True


def _advisory_key(instance_id: str) -> int:
    """A signed 64-bit advisory lock key for an instance id (PostgreSQL's bigint)."""
    digest = hashlib.sha256(f"devicectl instance {instance_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _holder(data: dict[str, Any]) -> str:
    """What a SQLite lock's holder wrote about itself, in a few words."""
    if not data:
        return "holder unknown"
    started = data.get("started")
    when = (
        datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds")
        if isinstance(started, int | float)
        else "?"
    )
    return (
        f"pid {data.get('pid', '?')} on host {data.get('host', '?')}, instance id "
        f"{data.get('instance_id', '?')!r}, started {when}"
    )


def _pg_holder(row: Any) -> str:
    started = row.backend_start.isoformat(timespec="seconds") if row.backend_start else "?"
    return f"{row.application_name or 'a client'} from {row.client_addr or 'a local socket'}, since {started}"
