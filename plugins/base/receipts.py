"""Receipts: every device write an operation makes (or, in a dry run, would make), as data.

Plugins call `write_log()` at their single write choke point (the Redfish PATCH/POST, the NVML
setter). `run_operation` opens the log for the operation (a context variable, so it follows the
operation into threads and tasks it starts) and returns the entries on `Outcome.writes`; the
controller stores them with the journal. In a dry run (`DeviceContext.dry_run`, also every request
of a controller in shadow mode) the choke point records the write as planned and does not send it;
`WriteLog.write` refuses to open a write in a dry run, so a choke point that forgot to check
raises `WriteRefusedError` before it sends anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from collections.abc import Awaitable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

from plugins.base._errors import DeviceControllerError

T = TypeVar("T")


@dataclass(frozen=True)
class DeviceWrite:
    """One write to a device.

    Attributes:
        target: the resource path (Redfish) or the NVML call with its GPU (NVML).
        method: `PATCH`, `POST`, or the NVML function name.
        body: what was sent (never credentials).
        component: the component label the write is for (e.g. `GPU 0`), when known.
        before: watts in force before the write, when known.
        after: watts read back after the write, when read (None in a dry run).
        status: the HTTP status, `ok`, `error: ...`, or `planned` (dry run).
        duration_ms: how long the write took (0 when planned).
        note: rounding, the allowed range, or why nothing was sent.
    """

    target: str
    method: str
    body: Mapping[str, Any] = field(default_factory=dict)
    component: str = ""
    before: float | None = None
    after: float | None = None
    status: str = ""
    duration_ms: float = 0.0
    note: str = ""

    @property
    def planned(self) -> bool:
        return self.status == "planned"


class WriteRefusedError(DeviceControllerError):
    """A write was attempted in a dry run (a plan, or a controller in shadow mode): nothing was sent."""

    code = "WRITE_REFUSED"


class WriteLog:
    """The writes of one operation, in order. Thread-safe (NVML work runs in threads)."""

    def __init__(self, *, dry_run: bool = False) -> None:
        self.dry_run = dry_run
        self._entries: list[DeviceWrite] = []
        #: changes to entries not applied yet, by index (`_update`)
        self._changes: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def write(
        self,
        target: str,
        method: str,
        body: Mapping[str, Any] | None = None,
        *,
        component: str = "",
        before: float | None = None,
        note: str = "",
    ) -> _Writing:
        """Time one write and record its status; the `with` block gets the entry's index (see
        `read_back`).

        In a dry run the caller must not send anything: check `dry_run` first and use `plan`. A
        caller that does not is stopped here, before its `with` body (the send) runs.
        """
        return _Writing(self, target, method, body, component, before, note)

    def plan(
        self,
        target: str,
        method: str,
        body: Mapping[str, Any] | None = None,
        *,
        component: str = "",
        before: float | None = None,
        note: str = "",
    ) -> int:
        """Record a write a dry run would make."""
        return self._add(
            DeviceWrite(target, method, dict(body or {}), component, before, None, "planned", 0.0, note)
        )

    def skip(
        self,
        target: str,
        body: Mapping[str, Any] | None = None,
        *,
        component: str = "",
        before: float | None = None,
        note: str = "",
    ) -> int:
        """Record a write a dry run would not make (already in force, out of range), with why."""
        return self._add(
            DeviceWrite(target, "-", dict(body or {}), component, before, before, "skipped", 0.0, note)
        )

    def record(self, entries: Iterable[DeviceWrite]) -> None:
        """Add receipts made elsewhere (an out-of-process plugin's, from its reply or its error),
        or one the caller writes for a call that never answered (`unknown`)."""
        with self._lock:
            self._entries.extend(entries)

    def set_status(self, index: int, status: str) -> None:
        """A more precise status than `ok` (e.g. the HTTP status)."""
        self._change(index, {"status": status})

    def read_back(self, index: int | None, after: float | None, note: str = "") -> None:
        """Attach the value read back after the write at `index`."""
        self._change(index, {"after": after, "note": note} if note else {"after": after})

    @property
    def last(self) -> int:
        """Index of the latest entry (-1 when none)."""
        with self._lock:
            return len(self._entries) - 1

    def entries(self) -> tuple[DeviceWrite, ...]:
        with self._lock:
            for index, changes in self._changes.items():
                self._entries[index] = _replaced(self._entries[index], changes)
            self._changes.clear()
            return tuple(self._entries)

    def _add(self, entry: DeviceWrite) -> int:
        with self._lock:
            self._entries.append(entry)
            return len(self._entries) - 1

    def _update(self, index: int | None, **changes: Any) -> None:
        """Change an entry's fields; kept with the entry's earlier changes and applied once, when
        the entries are read (a write changes its receipt three times: answer, status, read-back)."""
        unknown = changes.keys() - _FIELDS
        if unknown:
            raise TypeError(f"DeviceWrite has no field(s) {sorted(unknown)}")
        self._change(index, changes)

    def _change(self, index: int | None, changes: dict[str, Any]) -> None:
        """`_update` with fields named by this module itself (not checked again on every write)."""
        with self._lock:  # an unknown index (None from a wrapped choke point) changes nothing
            if isinstance(index, int) and 0 <= index < len(self._entries):
                kept = self._changes.get(index)
                if kept is None:
                    self._changes[index] = changes
                else:
                    kept.update(changes)


def unanswered_status(exc: BaseException) -> str:
    """The receipt status of a write that raised: `error: <HTTP status>` where the device answered
    (it refused), else `unknown: <why>`: the write was sent (or about to be) and no answer came back
    (a deadline, a cancel, a cut connection), so it may have landed."""
    answered = getattr(exc, "status", "")
    if answered:
        return f"error: {answered}"
    return f"unknown: {type(exc).__name__} (no answer: the write may have landed)"


_FIELDS = frozenset(f.name for f in dataclasses.fields(DeviceWrite))
#: every field's default (`_Writing` sets the others)
_DEFAULTS = {
    f.name: f.default for f in dataclasses.fields(DeviceWrite) if f.default is not dataclasses.MISSING
}


class _Writing:
    """One write being timed (`WriteLog.write`): a class, not `@contextmanager`, which builds a
    generator and its wrapper per write."""

    __slots__ = (
        "_before",
        "_body",
        "_component",
        "_index",
        "_log",
        "_method",
        "_note",
        "_started",
        "_target",
    )

    def __init__(
        self,
        log: WriteLog,
        target: str,
        method: str,
        body: Mapping[str, Any] | None,
        component: str,
        before: float | None,
        note: str,
    ) -> None:
        self._log = log
        self._target = target
        self._method = method
        self._body = body
        self._component = component
        self._before = before
        self._note = note

    def __enter__(self) -> int:
        log = self._log
        if log.dry_run:
            raise _refused(self._method, self._target)
        self._started = time.monotonic()
        # NOTE: built as `_replaced` builds one (a frozen dataclass's `__init__` costs a write's
        # receipt as much again): every field set, those not given to their defaults
        entry = object.__new__(DeviceWrite)
        entry.__dict__.update(
            _DEFAULTS,
            target=self._target,
            method=self._method,
            body=dict(self._body or {}),
            component=self._component,
            before=self._before,
            note=self._note,
        )
        self._index = log._add(entry)
        return self._index

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        status = "ok" if exc is None else unanswered_status(exc)
        elapsed = round((time.monotonic() - self._started) * 1000.0, 3)
        self._log._change(self._index, {"status": status, "duration_ms": elapsed})


def _replaced(entry: DeviceWrite, changes: Mapping[str, Any]) -> DeviceWrite:
    """`dataclasses.replace` without its per-call introspection (fields named by this module)."""
    new = object.__new__(DeviceWrite)
    new.__dict__.update(entry.__dict__)
    new.__dict__.update(changes)
    return new


_CURRENT: ContextVar[WriteLog | None] = ContextVar("devicectl_write_log", default=None)


def write_log() -> WriteLog:
    """The current operation's log; outside an operation a throwaway one (writes still happen)."""
    log = _CURRENT.get()
    return log if log is not None else WriteLog()


@contextlib.contextmanager
def recording(log: WriteLog) -> Iterator[WriteLog]:
    """Make `log` the current operation's write log."""
    token = _CURRENT.set(log)
    try:
        yield log
    finally:
        _CURRENT.reset(token)


def refuse_in_dry_run(method: str, target: str) -> None:
    """A guard for a plugin's lower layers (the Redfish client's `patch`/`post`): in a dry run (a
    plan, or a controller in shadow mode) raise `WriteRefusedError` before anything is sent."""
    if write_log().dry_run:
        raise _refused(method, target)


def _refused(method: str, target: str) -> WriteRefusedError:
    return WriteRefusedError(
        f"{method} {target}: refused, nothing was sent (a dry run or shadow mode writes nothing)"
    )


async def gather_writes(*writes: Awaitable[T]) -> list[T]:
    """Await an operation's writes together (`asyncio.gather`), their results in order. Where one
    raises (an unexpected error: a write's own failure is its result), the others are cancelled and
    awaited before the error is raised, so none goes on writing the device after the operation has
    ended and the device is free for the next one."""
    tasks = [asyncio.ensure_future(w) for w in writes]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        for task in tasks:  # a second task's own error is not left for the loop to log
            if not task.cancelled():
                task.exception()
        raise
