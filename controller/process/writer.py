"""One writer per BMC: a controller refuses to start beside a live process that would drive the
same BMCs (docs/reliability.md, "One writer per BMC").

- SQLite serves one process: `serve` holds an OS lock (`flock`) on the database file itself for its
  whole life, so the lock follows the file (its device and inode), not the name: a hard link, a
  symlink or a relative path to a held database is refused alike. Who holds it is written to
  `<database>.lock` (locked too) and, for a holder reached through another name, read from the
  kernel's lock table (`/proc/locks`). A second process on the same file is refused with one line
  naming the holder (pid, host, instance id, start time). The kernel releases the lock when the
  holder dies, however it dies, so a restart after a crash is never blocked. (SQLite's own locks
  are POSIX record locks, which on a local file system never meet `flock`.)
- On any database, one live process per instance id: on PostgreSQL a session advisory lock keyed
  by the instance id, held on a connection of its own for the process's life (the server drops it
  when that connection ends). The refusal names the holder's connection (its `application_name`
  says pid and host, with its address and start time). Like every PostgreSQL connection it asks
  the server for TCP keepalives of about a minute (`controller.store.postgres_engine`), so a
  holder that vanished (its node died) frees the id for its replacement then, not hours later;
  and a retake after a connection lost on this side only ends the server's side of it first (it
  would hold the id against its own process).
- A schema change (`db upgrade`, `db downgrade`) holds the database for its whole run
  (`schema_change_lock`): on SQLite the same file locks `serve` takes, on PostgreSQL an exclusive
  advisory lock on the database's schema key, which every live `serve` holds shared for its life.
  So a migration never starts under a live controller, and a `serve` started while one runs is
  refused (after the same grace as for another writer) instead of serving a schema being changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from controller.store import is_sqlite_memory, normalise_url, postgres_engine
from plugins.base.identity import read_holder, try_lock, write_holder

log = logging.getLogger(__name__)


class WriterConflictError(RuntimeError):
    """Another live process holds the database (SQLite) or this instance id (any database)."""


class SchemaChangeError(WriterConflictError):
    """A schema change (`db upgrade`, `db downgrade`) holds the database (PostgreSQL)."""


#: how often the PostgreSQL lock's connection is checked (a lost connection lost the lock)
CHECK_SECONDS = 5.0
#: how long a retake waits for this process's own lost connection, ended at the server, to let go
END_WAIT_SECONDS = 5.0
#: how long a start waits for a holder that is going away (the server notices a dead
#: connection at once on one host, a reaped process has released its file lock) before refusing
GRACE_SECONDS = 3.0


class WriterLock:
    """This process's claim to be the one writer: `acquire()` at start, `release()` at stop."""

    def __init__(self, database_url: str, instance_id: str) -> None:
        self._url: URL = normalise_url(database_url)
        self._instance_id = instance_id
        self._fd: int | None = None
        #: the flock on the database file itself (the lock that follows the inode)
        self._file_fd: int | None = None
        self._pg: sa.Connection | None = None
        self._engine: sa.Engine | None = None
        #: whether a PostgreSQL lock is to be kept (from its first acquisition to `release()`)
        self._keeping = False
        #: the server's process of the lock's connection: its pid and start time
        self._backend: tuple[int, datetime] | None = None

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
        self._end_lost_backend()
        try:
            self._lock_postgres()
        except SchemaChangeError as exc:
            log.error("%s; this process's lock on the database was lost meanwhile", exc)
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
        for fd in (self._fd, self._file_fd):
            if fd is not None:
                os.close(fd)
        self._fd = self._file_fd = None
        self._drop_postgres()

    def _end_lost_backend(self) -> None:
        """End the server's side of the lock's lost connection, where the server still keeps it.

        A connection lost on this side only (a reset that reached this end, a middlebox's timeout)
        lives on at the server, idle and holding the instance id, until the server gives up on it:
        the retake would find "another live devicectl" that is this process's own past. Its
        server process is matched by pid and start time, so a pid reused since is never touched.
        Until the server has been asked (it may be out of reach now), the next check asks again."""
        if self._backend is None:
            return
        pid, started = self._backend
        engine = self._new_engine()
        try:
            with engine.connect() as conn:
                ended = conn.execute(
                    sa.text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE pid = :p AND backend_start = :s"
                    ),
                    {"p": pid, "s": started},
                ).scalar()
                conn.commit()
                self._backend = None
                if not ended:
                    return  # the server had let it go already
                log.warning(
                    "ended this process's lost connection at the server (backend pid %d), "
                    "which still held instance id %r",
                    pid,
                    self._instance_id,
                )
                give_up = time.monotonic() + END_WAIT_SECONDS
                while time.monotonic() < give_up:  # the server process exits after the signal
                    held = conn.execute(sa.text("SELECT count(*) FROM pg_locks WHERE pid = :p"), {"p": pid})
                    if not held.scalar_one():
                        return
                    conn.commit()
                    time.sleep(0.05)
        except sa.exc.SQLAlchemyError as exc:
            log.warning(
                "could not end this process's lost connection at the server (backend pid %d): %s",
                pid,
                type(exc).__name__,
            )
        finally:
            engine.dispose()

    def _new_engine(self) -> sa.Engine:
        """An engine for one of this process's lock connections (named for a refusal's holder)."""
        return postgres_engine(self._url, application_name=_connection_name(), poolclass=NullPool)

    def _drop_postgres(self) -> None:
        pg, self._pg = self._pg, None
        if pg is not None:
            with contextlib.suppress(Exception):
                pg.close()
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.dispose()

    def _lock_sqlite(self) -> None:
        path = sqlite_file(self._url)
        if path is None:
            return  # a private in-memory database: no one else can open it
        path.parent.mkdir(parents=True, exist_ok=True)
        file_fd = _lock_file_itself(path)
        if file_fd is None:
            raise WriterConflictError(
                f"the database {path} is in use by another live devicectl ({_sqlite_holder(path)}); "
                "one process serves a SQLite database: stop that one, or give this one its own database"
            )
        lock = path.with_name(path.name + ".lock")
        fd = try_lock(lock)
        if fd is None:  # a holder between its two locks: the same conflict
            os.close(file_fd)
            raise WriterConflictError(
                f"the database {path} is in use by another live devicectl ({_holder(read_holder(lock))}); "
                "one process serves a SQLite database: stop that one, or give this one its own database"
            )
        write_holder(fd, instance_id=self._instance_id, started=time.time())
        self._fd, self._file_fd = fd, file_fd

    def _lock_postgres(self) -> None:
        self._engine = self._new_engine()
        conn = self._engine.connect()
        key = _advisory_key(self._instance_id)
        taken = conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar_one()
        conn.commit()
        if not taken:
            who = _pg_key_holder(conn, key) or "unknown"
            conn.close()
            self._drop_postgres()
            raise WriterConflictError(
                f"instance id {self._instance_id!r} is held by another live devicectl on this database "
                f"({who}); each process needs its own --instance-id"
            )
        if not conn.execute(
            sa.text("SELECT pg_try_advisory_lock_shared(:k)"), {"k": SCHEMA_KEY}
        ).scalar_one():
            who = _pg_schema_holders(conn)
            conn.close()  # its instance id lock goes with the connection
            self._drop_postgres()
            raise SchemaChangeError(
                f"the database schema is being changed ({who or 'holder unknown'}); "
                "start again when that is done"
            )
        pid, started = conn.execute(
            sa.text("SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()")
        ).one()
        conn.commit()
        self._pg, self._keeping, self._backend = conn, True, (pid, started)


def sqlite_file(url: URL) -> Path | None:
    """The real file behind a SQLite URL (symlinks and relative paths resolved), or None for a
    private in-memory database."""
    database = url.database
    if is_sqlite_memory(url) or not database:
        return None
    if database.startswith("file:"):  # a URI filename (`?uri=true`): the path before its query
        path, _, query = database[len("file:") :].partition("?")
        if not path or path == ":memory:" or "mode=memory" in query or url.query.get("mode") == "memory":
            return None
        return Path(path).resolve()
    return Path(database).resolve()


def _lock_file_itself(path: Path) -> int | None:
    """An exclusive `flock` on the database file (created empty when missing: SQLite takes an
    empty file as a new database), or None when a live process holds it."""
    return try_lock(path)


def _sqlite_holder(path: Path) -> str:
    """Who holds the database file: what the holder wrote beside the name we were given, else the
    kernel's lock table (a holder that opened the same file through another name)."""
    data = read_holder(path.with_name(path.name + ".lock"))
    try:
        st = path.stat()
    except OSError:
        return _holder(data)
    pid = _flock_holder_pid(st.st_dev, st.st_ino)
    if pid is None or (data and data.get("pid") == pid):
        return _holder(data)
    return (
        f"pid {pid} on this host, through another name for the same file (a hard link or a copy of the path)"
    )


def _flock_holder_pid(dev: int, ino: int) -> int | None:
    """The pid holding an exclusive `flock` on device/inode, from /proc/locks (None when unknown)."""
    want = f"{os.major(dev):02x}:{os.minor(dev):02x}:{ino}"
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[3] == "WRITE" and fields[5] == want:
            with contextlib.suppress(ValueError):
                return int(fields[4])
    return None


#: the advisory lock key every live `serve` holds shared on its database, and a schema change
#: exclusively (one key per database: advisory locks are per database)
SCHEMA_KEY = int.from_bytes(hashlib.sha256(b"devicectl schema").digest()[:8], "big", signed=True)


@contextlib.contextmanager
def schema_change_lock(database_url: str | URL, command: str, *, force: bool = False) -> Iterator[None]:
    """Hold the database against every `serve` while `command` changes its schema; raise
    `WriterConflictError` naming the live holder when one serves it. With `force` a held database
    is changed anyway (the lock is still taken when free, so no `serve` starts meanwhile)."""
    url = normalise_url(database_url)
    backend = url.get_backend_name()
    if backend == "sqlite":
        with _sqlite_schema_lock(url, command, force=force):
            yield
    elif backend == "postgresql":
        with _postgres_schema_lock(url, command, force=force):
            yield
    else:
        yield


@contextlib.contextmanager
def _sqlite_schema_lock(url: URL, command: str, *, force: bool) -> Iterator[None]:
    path = sqlite_file(url)
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fds: list[int] = []
    try:
        file_fd = try_lock(path)
        if file_fd is not None:
            fds.append(file_fd)
            fd = try_lock(path.with_name(path.name + ".lock"))
            if fd is not None:
                fds.append(fd)
                write_holder(fd, command=command, started=time.time())
        if len(fds) < 2 and not force:
            raise WriterConflictError(f"{path}: {_sqlite_holder(path)}")
        yield
    finally:
        for fd in fds:
            os.close(fd)


@contextlib.contextmanager
def _postgres_schema_lock(url: URL, command: str, *, force: bool) -> Iterator[None]:
    name = f"devicectl {command} pid={os.getpid()} host={socket.gethostname()}"[:63]
    engine = postgres_engine(url, application_name=name, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            taken = conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": SCHEMA_KEY}).scalar_one()
            if not taken:
                who = _pg_schema_holders(conn) or _pg_instance_holder(conn)
                conn.commit()
                if not force:
                    raise WriterConflictError(who or "a holder of the schema lock")
            else:
                conn.commit()
            yield  # the connection stays open (and the lock held) until the change is done
    finally:
        engine.dispose()


def _connection_name() -> str:
    """The `application_name` of this process's lock connections: who holds them, for a refusal."""
    return f"devicectl pid={os.getpid()} host={socket.gethostname()}"[:63]


def _pg_key_holder(conn: sa.Connection, key: int) -> str:
    """Who holds advisory lock `key` on this database, in a few words, or ''. An advisory lock is
    the database's own: a holder of the same key on another database of the same server (another
    hall's controller with the same instance id) is not the one in the way, and is not named."""
    row = conn.execute(
        sa.text(
            "SELECT a.application_name, a.client_addr, a.backend_start FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND l.classid::bigint = :hi AND l.objid::bigint = :lo AND l.objsubid = 1"
        ),
        {"hi": (key >> 32) & 0xFFFFFFFF, "lo": key & 0xFFFFFFFF},
    ).first()
    return "" if row is None else _pg_holder(row)


def _pg_schema_holders(conn: sa.Connection) -> str:
    """Who else holds the schema key: live `serve`s (shared) or a schema change (exclusive)."""
    rows = conn.execute(
        sa.text(
            "SELECT a.application_name, a.client_addr, a.backend_start FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND l.classid::bigint = :hi AND l.objid::bigint = :lo AND l.objsubid = 1 "
            "AND a.pid <> pg_backend_pid() ORDER BY a.backend_start"
        ),
        {
            "hi": (SCHEMA_KEY >> 32) & 0xFFFFFFFF,
            "lo": SCHEMA_KEY & 0xFFFFFFFF,
        },
    ).all()
    return "; ".join(_pg_holder(row) for row in rows)


def _pg_instance_holder(conn: sa.Connection) -> str:
    """A devicectl connection holding any advisory lock on this database (a `serve` of a release
    that did not take the schema key), in a few words, or ''."""
    row = conn.execute(
        sa.text(
            "SELECT a.application_name, a.client_addr, a.backend_start FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
            "AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE "
            "datname = current_database()) AND a.application_name LIKE 'devicectl pid=%' "
            "AND a.pid <> pg_backend_pid() LIMIT 1"
        )
    ).first()
    return "" if row is None else _pg_holder(row)


def _advisory_key(instance_id: str) -> int:
    """A signed 64-bit advisory lock key for an instance id (PostgreSQL's bigint)."""
    digest = hashlib.sha256(f"devicectl instance {instance_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _holder(data: dict[str, Any]) -> str:
    """What a SQLite lock's holder wrote about itself, in a few words."""
    if not data:
        return "holder unknown"
    if data.get("command"):  # a schema change holds it, not a serve
        return (
            f"`devicectl {data['command']}` running as pid {data.get('pid', '?')} on host "
            f"{data.get('host', '?')}"
        )
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
