"""Who this process is towards devices: an identity no other live process on this host holds.

A plugin marks what it leaves on a device (a Redfish session's `Context`) with its identity, and
deletes what an earlier process of the same identity left after a crash. That is safe only if no
live process holds the same identity, so an identity is a lease: an OS lock (`flock`) on
`<run dir>/identity/<id>.<digest>.lock`, held for the process's life and released by the kernel when it
dies, however it dies. The first identity asked for (the controller's instance id, `<id>-plugin`
for `plugin launch`) is taken when free; while a live process holds it the next free of
`<id>~1`, `<id>~2`, … is. So a restarted process takes back the identity of the one that died,
and two live processes (`serve` beside `plugin launch`, two replicas with one host name) never
share one.

Beside the lock, `<id>.jsonl` records the device resources (Redfish session URIs, per BMC origin)
the holders of the identity created and have not deleted: what a killed holder left is provably its
successor's to delete, whatever a request's device state says. Both live in a directory only
this user can open (`DEVICECTL_RUN_DIR`, else `<tmp>/devicectl-<uid>`).

The record is append-only: one JSON line per creation or deletion (`["+", origin, uri]`,
`["-", origin, uri]`), appended by one writer thread (never on the caller's event loop), so a
login costs the same with 500 BMCs in the record as with 10,000. A line is one `write(2)` on an
`O_APPEND` descriptor: a killed process leaves whole lines; a torn last line (power loss) is
skipped when read. The record is compacted (the live entries written whole to a temporary file
that replaces it) when an identity is taken and when the lines outnumber the live entries by far;
a record of the earlier whole-file format (`<id>.json`) is read once and folded in.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import queue
import secrets
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: the environment variable naming the directory of identity locks and records
RUN_DIR_ENV = "DEVICECTL_RUN_DIR"
#: identities tried after the one asked for (`<id>~1` … `<id>~N`)
MAX_SLOTS = 64
#: resources kept per device origin in a record (a BMC's session table holds 4 to 64)
MAX_KEPT = 64
#: lines a record may hold per live entry before the writer compacts it (and at least this many)
COMPACT_RATIO = 4
COMPACT_MIN_LINES = 4096


def run_dir() -> Path:
    """Where identity locks and records live (one directory per user unless configured)."""
    configured = os.environ.get(RUN_DIR_ENV)
    if configured:
        return Path(configured)
    return Path(tempfile.gettempdir()) / f"devicectl-{os.getuid()}"


def try_lock(path: Path) -> int | None:
    """An open descriptor holding an exclusive `flock` on `path` (created 0600), or None when a
    live process holds it. The lock lasts until the descriptor is closed or the process dies."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_holder(fd: int, **fields: object) -> None:
    """Write who holds a lock into the locked file (for the refusal message of the next one)."""
    text = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), **fields}, sort_keys=True)
    os.ftruncate(fd, 0)
    os.pwrite(fd, text.encode(), 0)


def read_holder(path: Path) -> dict[str, Any]:
    """What the holder of a lock wrote about itself ({} when unreadable)."""
    try:
        data = json.loads(path.read_text()[:4096])
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class ProcessIdentity:
    """This process's identity lease (see the module docstring). `acquire()`, then `release()`."""

    def __init__(self, wanted: str) -> None:
        self.wanted = wanted
        #: the identity held: `wanted`, `wanted~N`, or `wanted~<boot>` when no lock can be taken
        self.client_id = wanted
        #: random per acquisition: tells this process's marks from those of earlier holders
        self.boot = secrets.token_hex(4)
        #: whether the identity is a held lease (only then are earlier holders' marks ours to delete)
        self.held = False
        self._fd: int | None = None
        self._record: Path | None = None
        self._writer: RecordWriter | None = None
        #: origin -> resources created under this identity and not deleted (earlier holders' too)
        self._created: dict[str, list[str]] = {}
        #: (origin, resource) created by this process: live, never an earlier holder's leftover
        self._mine: set[tuple[str, str]] = set()

    def acquire(self) -> ProcessIdentity:
        """Take the first free identity; without a usable run directory, one no one else can hold."""
        if self._fd is not None:
            return self
        directory = run_dir() / "identity"
        try:
            _private_directory(directory.parent)
            _private_directory(directory)
            for slot in range(MAX_SLOTS + 1):
                name = _file_name(self.wanted if slot == 0 else f"{self.wanted}~{slot}")
                fd = try_lock(directory / f"{name}.lock")
                if fd is not None:
                    break
            else:
                raise OSError(f"all {MAX_SLOTS + 1} identities {self.wanted}~N are held by live processes")
        except OSError as exc:
            # NOTE: unique but never taken back: a later process cannot claim what this one leaves
            self.client_id = f"{self.wanted}~{self.boot}"
            log.warning(
                "no identity lease under %s (%s); acting as %s: what a crash of this process leaves "
                "on devices is not deleted by the next one",
                directory,
                exc,
                self.client_id,
            )
            return self
        self._fd, self.held = fd, True
        self.client_id = self.wanted if slot == 0 else f"{self.wanted}~{slot}"
        write_holder(fd, identity=self.client_id, boot=self.boot, started=time.time())
        self._record = directory / f"{name}.jsonl"
        legacy = directory / f"{name}.json"
        self._created = _read_record(self._record, legacy)
        self._writer = RecordWriter(self._record, self._created)
        with contextlib.suppress(OSError):
            legacy.unlink()  # folded into the record the writer has just written whole
        if slot:
            log.info(
                "identity %s is held by a live process; this one acts as %s", self.wanted, self.client_id
            )
        return self

    def release(self) -> None:
        """Give the identity back (at a clean stop; death releases it too)."""
        fd, self._fd, self.held = self._fd, None, False
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()  # what was noted is written before the lease is given up
        if fd is not None:
            os.close(fd)

    def inherited(self, origin: str) -> list[str]:
        """Resources on a device earlier holders of this identity created and did not delete: the
        leftovers of dead processes (none while the identity is not a held lease)."""
        if not self.held:
            return []
        return [u for u in self._created.get(origin, []) if (origin, u) not in self._mine]

    def recorded(self, origin: str) -> list[str]:
        """Every resource on a device the record holds now (this process's own included)."""
        return list(self._created.get(origin, ())) if self.held else []

    def note_created(self, origin: str, uri: str) -> concurrent.futures.Future[None]:
        """A resource this process created: recorded before it is used (the future is done once
        the record's line is written; wait for it before using the resource)."""
        self._mine.add((origin, uri))
        _apply(self._created, "+", origin, uri)
        return self._append("+", origin, uri)

    def note_deleted(self, origin: str, uri: str) -> concurrent.futures.Future[None]:
        """A resource created under this identity is gone."""
        self._mine.discard((origin, uri))
        if uri not in self._created.get(origin, ()):
            return _done()
        _apply(self._created, "-", origin, uri)
        return self._append("-", origin, uri)

    def flush(self) -> None:
        """Wait until every line noted so far is written."""
        if self._writer is not None:
            self._writer.append(None).result()

    def _append(self, op: str, origin: str, uri: str) -> concurrent.futures.Future[None]:
        if self._writer is None or not self.held:
            return _done()
        return self._writer.append((op, origin, uri))


def _done() -> concurrent.futures.Future[None]:
    done: concurrent.futures.Future[None] = concurrent.futures.Future()
    done.set_result(None)
    return done


def _apply(created: dict[str, list[str]], op: str, origin: str, uri: str) -> int:
    """One line of the record applied to its live entries (at most `MAX_KEPT` per origin); the
    change in their number."""
    kept = created.get(origin)
    before = len(kept) if kept is not None else 0
    if kept is not None and uri in kept:
        kept.remove(uri)
    if op == "+":
        if kept is None:
            kept = created[origin] = []
        kept.append(uri)
        del kept[:-MAX_KEPT]
    elif kept is not None and not kept:
        del created[origin]
    return (len(kept) if kept is not None else 0) - before


_Line = tuple[str, str, str]


class RecordWriter:
    """The one thread that appends to an identity's record (and compacts it), in the order noted.

    Lines queued together are written with one `write(2)`; each caller's future is done once its
    line is in the file (the page cache: a killed process loses nothing written)."""

    def __init__(self, path: Path, created: dict[str, list[str]]) -> None:
        self.path = path
        #: the live entries as written so far (the writer thread's own copy)
        self._live = {origin: list(uris) for origin, uris in created.items()}
        self._live_count = sum(len(uris) for uris in self._live.values())
        self._queue: queue.SimpleQueue[tuple[_Line | None, concurrent.futures.Future[None]] | None] = (
            queue.SimpleQueue()
        )
        self._fd: int | None = None
        self._lines = 0
        self._compact()  # the record starts from its live entries alone
        self._thread = threading.Thread(target=self._run, name="identity-record", daemon=True)
        self._thread.start()

    def append(self, line: _Line | None) -> concurrent.futures.Future[None]:
        """Queue a line (None: only a marker to wait for); done when it is written."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        if not self._thread.is_alive():
            future.set_result(None)
            return future
        self._queue.put((line, future))
        return future

    def close(self) -> None:
        """Write what is queued, then stop."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            with contextlib.suppress(queue.Empty):
                while len(batch) < 4096:
                    batch.append(self._queue.get_nowait())
            stop = None in batch
            items = [b for b in batch if b is not None]
            self._write([line for line, _ in items if line is not None])
            for _, future in items:
                # NOTE: a waiter that gave up (a cancelled `asyncio.wrap_future`) cancelled its
                # future; the line is written all the same, and the thread goes on
                with contextlib.suppress(concurrent.futures.InvalidStateError):
                    future.set_result(None)
            if stop:
                return

    def _write(self, lines: list[_Line]) -> None:
        if not lines:
            return
        for op, origin, uri in lines:
            self._live_count += _apply(self._live, op, origin, uri)
        data = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines).encode()
        try:
            if self._fd is None:
                raise OSError("the record is not open")
            os.write(self._fd, data)
        except OSError as exc:
            log.warning("could not record resources created in %s: %s", self.path, exc)
            self._compact()  # try once more, whole
            return
        self._lines += len(lines)
        if self._lines > max(COMPACT_MIN_LINES, COMPACT_RATIO * self._live_count):
            self._compact()

    def _compact(self) -> None:
        """Write the live entries whole to a temporary file that replaces the record."""
        tmp = self.path.with_suffix(".compact.tmp")
        lines = [("+", origin, uri) for origin, uris in sorted(self._live.items()) for uri in uris]
        data = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines).encode()
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            tmp.replace(self.path)  # whole or not at all, even if we die mid-write
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            log.warning("could not write the record of resources created in %s: %s", self.path, exc)
            with contextlib.suppress(OSError):
                tmp.unlink()
            return
        if self._fd is not None:
            os.close(self._fd)
        self._fd, self._lines = fd, len(lines)


def _file_name(identity: str) -> str:
    """The lock's file name: one per identity (a digest of it, however it is spelled), readable."""
    readable = "".join(c if c.isalnum() or c in "-_.@~" else "_" for c in identity)[:60]
    return f"{readable}.{hashlib.sha256(identity.encode()).hexdigest()[:16]}"


def _private_directory(path: Path) -> None:
    """Create `path` (0700) or check that it is this user's alone: another user who could write
    in it could forge the record of what we created, or hold our identities."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise OSError(f"{path} is not this user's alone (owner uid {st.st_uid}, mode {st.st_mode & 0o777:o})")


def _read_record(path: Path, legacy: Path) -> dict[str, list[str]]:
    """The resources earlier holders recorded; malformed lines (a torn last one) are skipped. A
    record in the earlier whole-file format is folded in first."""
    created: dict[str, list[str]] = {}
    for origin, uris in _read_legacy(legacy).items():
        for uri in uris:
            _apply(created, "+", origin, uri)
    try:
        with path.open("rb") as f:
            for raw in f:
                try:
                    line = json.loads(raw)
                except ValueError:
                    continue
                if (
                    isinstance(line, list)
                    and len(line) == 3
                    and line[0] in ("+", "-")
                    and all(isinstance(part, str) for part in line)
                ):
                    _apply(created, line[0], line[1], line[2])
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("ignoring unreadable identity record %s: %s", path, exc)
    return created


def _read_legacy(path: Path) -> dict[str, list[str]]:
    """A record of the earlier whole-file format (removed once the new record holds it)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable identity record %s: %s", path, exc)
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        str(origin): [u for u in uris if isinstance(u, str)][-MAX_KEPT:]
        for origin, uris in data.items()
        if isinstance(uris, list)
    }
