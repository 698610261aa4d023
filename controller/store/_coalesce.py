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
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: the most keys one query reads (below every database's limit on a statement's IN list)
ROUND_KEYS = 500


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
        #: key -> the callers waiting for it, in the order they asked (not yet in a round)
        self._waiting: dict[K, list[asyncio.Future[V | None]]] = {}
        self._rounds: asyncio.Task[None] | None = None
        #: rounds run (each one query), for tests and benchmarks
        self.rounds = 0

    async def get(self, key: K) -> V | None:
        """The row of `key`, or None where there is none."""
        future: asyncio.Future[V | None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append(future)
        if self._rounds is None:
            # a task, not a read started here: callers in the same turn of the loop join its round
            self._rounds = asyncio.get_running_loop().create_task(self._run_rounds())
        return await future

    async def _run_rounds(self) -> None:
        try:
            while self._waiting:
                keys = list(self._waiting)[: self._round_keys]
                callers = {key: self._waiting.pop(key) for key in keys}
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
            waiting, self._waiting = self._waiting, {}
            _fail(waiting, asyncio.CancelledError())
            raise
        finally:
            self._rounds = None


def _fail(callers: dict[Any, list[asyncio.Future[Any]]], exc: BaseException) -> None:
    for futures in callers.values():
        for future in futures:
            if future.done():
                continue
            if isinstance(exc, asyncio.CancelledError):
                future.cancel()
            else:
                future.set_exception(exc)
