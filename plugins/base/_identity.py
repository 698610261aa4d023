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

Beside the lock, `<id>.json` lists the device resources (Redfish session URIs, per BMC origin) the
holders of the identity created and have not deleted: what a killed holder left is provably its
successor's to delete, whatever a request's device state says. Both live in a directory only
this user can open (`DEVICECTL_RUN_DIR`, else `<tmp>/devicectl-<uid>`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import secrets
import socket
import tempfile
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
        self._record = directory / f"{name}.json"
        self._created = _read_record(self._record)
        if slot:
            log.info(
                "identity %s is held by a live process; this one acts as %s", self.wanted, self.client_id
            )
        return self

    def release(self) -> None:
        """Give the identity back (at a clean stop; death releases it too)."""
        fd, self._fd, self.held = self._fd, None, False
        if fd is not None:
            os.close(fd)

    def inherited(self, origin: str) -> list[str]:
        """Resources on a device earlier holders of this identity created and did not delete: the
        leftovers of dead processes (none while the identity is not a held lease)."""
        if not self.held:
            return []
        return [u for u in self._created.get(origin, []) if (origin, u) not in self._mine]

    def note_created(self, origin: str, uri: str) -> None:
        """A resource this process created (written down before it is used)."""
        self._mine.add((origin, uri))
        kept = [u for u in self._created.get(origin, []) if u != uri]
        self._update(origin, [*kept, uri][-MAX_KEPT:])

    def note_deleted(self, origin: str, uri: str) -> None:
        """A resource created under this identity is gone."""
        self._mine.discard((origin, uri))
        kept = self._created.get(origin, [])
        if uri in kept:
            self._update(origin, [u for u in kept if u != uri])

    def _update(self, origin: str, uris: list[str]) -> None:
        if uris:
            self._created[origin] = uris
        else:
            self._created.pop(origin, None)
        if self._record is None or not self.held:
            return
        tmp = self._record.with_suffix(f".{self.boot}.tmp")
        try:
            tmp.write_text(json.dumps(self._created, sort_keys=True))
            tmp.replace(self._record)  # whole or not at all, even if we die mid-write
        except OSError as exc:
            log.warning("could not record resources created as %s in %s: %s", self.client_id, tmp, exc)
            with contextlib.suppress(OSError):
                tmp.unlink()


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


def _read_record(path: Path) -> dict[str, list[str]]:
    """The resources earlier holders recorded; malformed entries are dropped."""
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
