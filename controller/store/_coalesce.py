"""`CoalescedReads`: concurrent reads of rows by key, answered by one query per round.

A wave's first requests each resolve a device this process holds no copy of yet
(controller/execution/resolve.py): a thousand single-row reads at once, each its own trip through
the read pool. Most of such a read's CPU is that trip, not the query: four reader threads and the
event loop handing the interpreter lock back and forth cost about 0.6 ms of CPU per read at 1,000
concurrent reads on SQLite, against about 0.05 ms per key when 50 keys share one query
(BENCHMARKS.md, "Coalesced device reads").

A read starts at once when none is running (a lone caller waits for nothing more than before);
keys asked for while it runs are read together by the next round. Every round reads after its
callers asked, so each caller sees the rows as they were at some time after its call, as a read
of its own would; a failed round fails each of its callers with the same error.

Rounds are per event loop: the store serves the execution loop and the front door's (the admin
API runs there, docs/architecture.md, "Two loops in one process"), and an asyncio future may only
be completed on its own loop's thread. Callers on different loops never share a round.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: the most keys one query reads (below every database's limit on a statement's IN list)
ROUND_KEYS = 500


class _Loop(Generic[K, V]):
    """One event loop's callers waiting and the task running their rounds."""

    __slots__ = ("rounds", "waiting")

    def __init__(self) -> None:
        #: key -> the callers waiting for it, in the order they asked (not yet in a round)
        self.waiting: dict[K, list[asyncio.Future[V | None]]] = {}
        self.rounds: asyncio.Task[None] | None = None


class CoalescedReads(Generic[K, V]):
    """Reads by key through `read(fetch, keys)` (the store's reader: a pool thread), coalesced:
    `fetch(conn, keys)` returns the rows found, by key; a key it leaves out reads as None."""

    def __init__(
        self,
        read: Callable[[Callable[..., dict[K, V]], Sequence[K]], Awaitable[dict[K, V]]],
        fetch: Callable[[Any, Sequence[K]], dict[K, V]],
        *,
        round_keys: int = ROUND_KEYS,
    ) -> None:
        self._read = read
        self._fetch = fetch
        self._round_keys = round_keys
        #: each event loop's own (a loop that is gone takes its entry with it)
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Loop[K, V]] = (
            weakref.WeakKeyDictionary()
        )
        #: rounds run (each one query), for tests and benchmarks
        self.rounds = 0

    async def get(self, key: K) -> V | None:
        """The row of `key`, or None where there is none."""
        loop = asyncio.get_running_loop()
        here = self._loops.get(loop)
        if here is None:
            here = self._loops[loop] = _Loop()
        future: asyncio.Future[V | None] = loop.create_future()
        here.waiting.setdefault(key, []).append(future)
        if here.rounds is None:
            # a task, not a read started here: callers in the same turn of the loop join its round
            here.rounds = loop.create_task(self._run_rounds(here))
        return await future

    def running(self) -> list[asyncio.Task[None]]:
        """The tasks running rounds now (one per loop with callers waiting)."""
        return [here.rounds for here in list(self._loops.values()) if here.rounds is not None]

    async def _run_rounds(self, here: _Loop[K, V]) -> None:
        try:
            while here.waiting:
                keys = list(here.waiting)[: self._round_keys]
                callers = {key: here.waiting.pop(key) for key in keys}
                self.rounds += 1
                try:
                    rows = await self._read(self._fetch, keys)
                except BaseException as exc:
                    _fail(callers, exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue  # a failed round fails only its own callers
                for key, futures in callers.items():
                    row = rows.get(key)
                    for future in futures:
                        if not future.done():  # a caller cancelled meanwhile
                            future.set_result(row)
        except asyncio.CancelledError:
            waiting, here.waiting = here.waiting, {}
            _fail(waiting, asyncio.CancelledError())
            raise
        finally:
            here.rounds = None


def _fail(callers: dict[Any, list[asyncio.Future[Any]]], exc: BaseException) -> None:
    for futures in callers.values():
        for future in futures:
            if future.done():
                continue
            if isinstance(exc, asyncio.CancelledError):
                future.cancel()
            else:
                future.set_exception(exc)
