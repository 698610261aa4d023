"""Group commit: many concurrent write operations share one transaction (and one fsync).

Callers on the event loop submit an operation and await its future. All operations are executed by
one dedicated writer thread, in submission order. The writer takes everything queued (up to
``batch_max``), runs it in ONE transaction, commits and resolves the futures. Consecutive operations
with the same handler are passed to the handler together, so e.g. 500 ``accept_one`` calls become
one multi-row INSERT rather than 500 statements.

If the shared transaction fails, each operation is re-run in a transaction of its own so one bad
operation fails only its own caller. A future resolves only after its transaction committed, so
an acknowledged write is durable; nothing correctness depends on lives only in this queue.

A database that fails writes is recorded in ``failure`` by the failing transaction; one that makes
them wait (a table lock held elsewhere) fails nothing, so ``failure`` also reports a stall once
the oldest pending write has waited longer than ``stall_after`` seconds for its commit.

An operation submitted with ``first=True`` (a delivery outcome: the receiver already has the
response, and a crash before this commit sends it again) goes into the next transaction ahead of
everything queued without it; such operations keep their order among themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import tenacity
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

from ._types import StoreStats

log = logging.getLogger(__name__)

A = TypeVar("A")
R = TypeVar("R")

#: A batch handler runs several operations of one kind on the batch's connection and returns one
#: result per argument, in order; a ``Failed`` result fails only that operation's caller.
_TRANSIENT_RETRIES = 3


#: a writer that just committed, with fewer than this many operations waiting (but some), sleeps
#: `linger` before it takes them; never when idle: a lone write starts at once. Under a wave the
#: completions come a few at a time, and each transaction's begin, commit and fsync cost more
#: than its statements: at 1,000 BMCs (fan-out benchmark, steady wave) a 3 ms linger took the
#: writer from 3.7 to 5.0 operations per transaction and 2,208 to 1,644 transactions, its thread
#: from 2.29 to 2.04 CPU-s; a write waits at most that much longer for its commit
LINGER_BELOW = 32
#: the store's writers' linger, seconds (`BatchWriter(linger=...)`)
STORE_LINGER = 0.003


def _retry_transient(state: tenacity.RetryCallState) -> bool:
    exc = state.outcome.exception() if state.outcome is not None else None
    return isinstance(exc, DBAPIError) and _is_transient(exc)


#: A transaction PostgreSQL rolled back whole as a deadlock or serialisation victim runs again
#: (running it again is safe): at most _TRANSIENT_RETRIES more times, 5 ms doubling between tries,
#: on this writer thread (it holds no other work meanwhile). Anything else is raised at once.
_TRANSIENT_POLICY = tenacity.Retrying(
    retry=_retry_transient,
    stop=tenacity.stop_after_attempt(_TRANSIENT_RETRIES + 1),
    wait=tenacity.wait_exponential(multiplier=0.005, exp_base=2, min=0.005),
    reraise=True,
)

Handler = Callable[[Connection, list[Any]], Sequence[Any]]


class Failed:
    """A per-operation failure a handler reports without aborting the shared transaction.

    Use it only when the operation had no effect on the database (e.g. validation failures).
    """

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


@dataclass(slots=True)
class _Pending:
    handler: Handler
    arg: Any
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    queued_at: float  # time.monotonic()


class StoreClosedError(RuntimeError):
    """A write was submitted after the store was closed."""


def is_outage(exc: BaseException) -> bool:
    """True for errors meaning the database cannot be reached or cannot commit right now
    (connection lost or refused, SQLite locked, server shutting down), as opposed to a bad
    statement or a constraint violation."""
    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError | sa_exc.DisconnectionError):
        return True
    if isinstance(exc, sa_exc.TimeoutError):  # no pooled connection became free
        return True
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


@dataclass(frozen=True, slots=True)
class WriteFailure:
    """Why the journal cannot commit, since when (``time.time()``).

    ``stalled``: no write failed, the oldest one has just waited too long for its commit (probing
    with another write would only queue behind it).
    """

    since: float
    reason: str
    stalled: bool = False


class BatchWriter:
    """The single writer thread and its queue (see the module docstring)."""

    def __init__(
        self,
        engine: Engine,
        *,
        batch_max: int = 512,
        linger: float = 0.0,
        stats: StoreStats | None = None,
        stall_after: float | None = None,
        hold_connection: bool = False,
    ) -> None:
        if batch_max < 1:
            raise ValueError("batch_max must be at least 1")
        self._engine = engine
        self._batch_max = batch_max
        #: seconds a busy writer waits for a small next batch to fill (see `LINGER`)
        self._linger = linger
        self.stats = stats if stats is not None else StoreStats()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="devicectl-store-writer")
        self._lock = threading.Lock()
        self._queue: deque[_Pending] = deque()
        self._first: deque[_Pending] = deque()  # submitted with first=True: taken before _queue
        # True while a drain is scheduled or running; it owns the queue until it finds it empty.
        self._active = False
        #: the loop whose next turn starts the scheduled drain (None once it is started)
        self._starts_on: asyncio.AbstractEventLoop | None = None
        self._closed = False
        #: queue time of the oldest write in the batch being run (None while idle)
        self._running_since: float | None = None
        #: set while write transactions fail for an outage (see ``is_outage``); cleared by a commit
        self._failure: WriteFailure | None = None
        #: seconds the oldest pending write may wait for its commit before ``failure`` reports a
        #: stall (None: never)
        self.stall_after = stall_after
        #: keep the engine's connection between transactions (see `_connection`)
        self._hold = hold_connection
        self._held: Connection | None = None

    @property
    def failure(self) -> WriteFailure | None:
        """Why writes cannot commit now: the last outage error, else a stall; None while they can."""
        if self._failure is not None:
            return self._failure
        limit = self.stall_after
        waited = self.oldest_pending_age()
        if limit is None or waited <= limit:
            return None
        return WriteFailure(
            time.time() - waited,
            f"the oldest pending write has waited {waited:.0f} s for its commit (limit {limit:g} s); "
            "the database is not completing writes (a lock held by another session?)",
            stalled=True,
        )

    def oldest_pending_age(self) -> float:
        """Seconds the oldest submitted, not yet committed (or failed) write has waited; 0 if none."""
        with self._lock:
            since = self._running_since
            if since is None:
                since = min((q[0].queued_at for q in (self._first, self._queue) if q), default=None)
        return 0.0 if since is None else max(0.0, time.monotonic() - since)

    @property
    def executor(self) -> ThreadPoolExecutor:
        """The writer thread, for work that must be serialised with writes (in-memory SQLite reads)."""
        return self._executor

    def submit(self, handler: Handler, arg: Any, *, first: bool = False) -> asyncio.Future[Any]:
        """Queue one operation; the returned future resolves after its transaction committed.

        ``first``: run it in the next transaction, ahead of the operations queued without it."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            if self._closed:
                raise StoreClosedError("the store is closed")
            (self._first if first else self._queue).append(
                _Pending(handler, arg, future, loop, time.monotonic())
            )
            if self._active:
                if self._starts_on is None or self._starts_on is loop:
                    return future
                # NOTE: the drain waits for another loop's next turn, which a busy loop (a wave's
                # execution) may not give for a while: a caller on this loop (an ack on the gRPC
                # server's) starts it now instead
                self._starts_on = None
                start_now = True
            else:
                self._active = True
                self._starts_on = loop
                start_now = False
        if start_now:
            self._submit_drain()
            return future
        # Start the drain from the loop's next turn, not now: every task that is already runnable
        # gets to enqueue first, so a burst of concurrent callers lands in a single batch.
        loop.call_soon(self._start_drain)
        return future

    def _start_drain(self) -> None:
        with self._lock:
            if self._starts_on is None:  # started from another loop meanwhile
                return
            self._starts_on = None
        self._submit_drain()

    def _submit_drain(self) -> None:
        try:
            self._executor.submit(self._drain)
        except RuntimeError:  # executor shut down under us: fail whatever is queued
            self._fail_queued(StoreClosedError("the store is closed"))

    def _fail_queued(self, exc: BaseException) -> None:
        with self._lock:
            pending = [*self._first, *self._queue]
            self._first.clear()
            self._queue.clear()
            self._active = False
            self._running_since = None
        self._resolve([(p, exc, True) for p in pending])

    def _take(self) -> list[_Pending]:
        """The next batch; when there is none, mark the writer idle (under the same lock)."""
        with self._lock:
            if not self._first and not self._queue:
                self._active = False
                self._running_since = None
                return []
            batch: list[_Pending] = []
            for queue in (self._first, self._queue):
                while queue and len(batch) < self._batch_max:
                    batch.append(queue.popleft())
            # the oldest pending write, wherever it is (``first`` ones may have overtaken it)
            self._running_since = min(
                [p.queued_at for p in batch] + [q[0].queued_at for q in (self._first, self._queue) if q]
            )
            return batch

    def _drain(self) -> None:
        batch = self._take()
        while batch:
            try:
                outcomes = self._run_batch(batch)
            except BaseException as exc:  # never strand a caller, whatever went wrong
                log.exception("store writer failed unexpectedly")
                outcomes = [(p, exc, True) for p in batch]
            waiting = len(self._first) + len(self._queue)  # read without the lock: a hint
            if self._linger > 0 and 0 < waiting < LINGER_BELOW:
                # NOTE: busy, and what waits would make a small transaction: wake this batch's
                # callers and let the next one fill for a moment (their follow-ups join it)
                self._resolve(outcomes)
                outcomes = []
                self.stats.lingered += 1
                time.sleep(self._linger)
            # Take the next batch (or go idle) BEFORE waking the callers: a caller that submits
            # again as soon as it is woken then finds the writer idle, and its burst is gathered
            # into one batch by `submit` instead of being split by a racing writer.
            batch = self._take()
            self._resolve(outcomes)

    def _run_batch(self, batch: list[_Pending]) -> list[tuple[_Pending, Any, bool]]:
        stats = self.stats
        stats.batches += 1
        stats.largest_batch = max(stats.largest_batch, len(batch))
        try:
            return self._transaction(batch)
        except Exception as exc:
            if len(batch) == 1:
                return [(batch[0], exc, True)]
            # One op may have poisoned the shared transaction (a constraint violation, say):
            # re-run each op alone so only the culprit's caller sees the error.
            log.warning("batch of %d writes failed (%s); retrying them one by one", len(batch), exc)
            stats.retried_batches += 1
            outcomes: list[tuple[_Pending, Any, bool]] = []
            for pending in batch:
                try:
                    outcomes.extend(self._transaction([pending]))
                except Exception as one_exc:
                    outcomes.append((pending, one_exc, True))
            return outcomes

    def _transaction(self, batch: list[_Pending]) -> list[tuple[_Pending, Any, bool]]:
        """Run ``batch`` in one transaction, retrying when PostgreSQL chose it as a deadlock or
        serialisation victim (it was rolled back entirely, so running it again is safe)."""
        # NOTE: the first try runs outside the retry policy, which is entered only after a
        # transient failure (replayed to it as its first attempt's): setting the policy up and
        # running an attempt through it cost ~12 us a transaction, as much as an empty one's
        # begin and commit
        try:
            return self._transaction_once(batch)
        except DBAPIError as exc:
            if not _is_transient(exc):
                raise
            failed: DBAPIError | None = exc

        def attempt() -> list[tuple[_Pending, Any, bool]]:
            nonlocal failed
            if failed is not None:
                first, failed = failed, None
                raise first
            return self._transaction_once(batch)

        return _TRANSIENT_POLICY.copy(before_sleep=self._before_retry)(attempt)

    def _before_retry(self, state: tenacity.RetryCallState) -> None:
        self.stats.transient_retries += 1
        exc = state.outcome.exception() if state.outcome is not None else None
        log.info("write transaction rolled back by the database (%s); retrying", getattr(exc, "orig", exc))

    def _connection(self) -> Connection:
        """The connection the next transaction runs on.

        NOTE: with `hold_connection` (a SQLite file: a connection is a file handle, nothing to
        re-check), it is kept from one transaction to the next: checking it out of the pool and
        back (events, the reset on return) cost ~100 us a transaction, a begin and commit on a
        kept one ~30 us. After any failure it is closed and the next transaction checks out a
        new one, as without."""
        if not self._hold:
            return self._engine.connect()
        if self._held is None:
            self._held = self._engine.connect()
        return self._held

    def _release(self) -> None:
        """Close the kept connection (after a failure, at close), on the writer thread."""
        held, self._held = self._held, None
        if held is not None:
            try:
                held.close()
            except Exception as exc:  # a broken connection: the pool discards it
                log.debug("closing the writer's connection failed: %s: %s", type(exc).__name__, exc)

    def _transaction_once(self, batch: list[_Pending]) -> list[tuple[_Pending, Any, bool]]:
        self.stats.transactions += 1
        try:
            conn = self._connection()
            try:
                with conn.begin():
                    outcomes = self._execute(conn, batch)
            finally:
                if not self._hold:
                    conn.close()
        except Exception as exc:
            self._release()
            if is_outage(exc) and self._failure is None:
                reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
                self._failure = WriteFailure(time.time(), f"{type(exc).__name__}: {reason}")
            raise
        self._failure = None
        return outcomes

    def _execute(self, conn: Connection, batch: list[_Pending]) -> list[tuple[_Pending, Any, bool]]:
        """Run the batch's ops in order, grouping consecutive ops that share a handler."""
        outcomes: list[tuple[_Pending, Any, bool]] = []
        i = 0
        while i < len(batch):
            handler = batch[i].handler
            j = i + 1
            while j < len(batch) and batch[j].handler is handler:
                j += 1
            group = batch[i:j]
            results = handler(conn, [p.arg for p in group])
            if len(results) != len(group):  # pragma: no cover - handler bug
                raise RuntimeError(f"{handler!r} returned {len(results)} results for {len(group)} ops")
            for pending, result in zip(group, results, strict=True):
                if isinstance(result, Failed):
                    outcomes.append((pending, result.exc, True))
                else:
                    outcomes.append((pending, result, False))
            i = j
        return outcomes

    def _resolve(self, outcomes: list[tuple[_Pending, Any, bool]]) -> None:
        """Hand results back to the callers' loops, with one wake-up per loop rather than per op."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Pending, Any, bool]]] = {}
        for outcome in outcomes:
            pending, _, is_error = outcome
            self.stats.ops += 1
            if is_error:
                self.stats.failed_ops += 1
            by_loop.setdefault(pending.loop, []).append(outcome)
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_set_results, items)
            except RuntimeError:  # the caller's loop is closed; nobody is waiting any more
                log.debug("dropping %d results for a closed event loop", len(items))

    async def close(self) -> None:
        """Refuse new writes, wait for the queued ones to commit, stop the writer thread."""
        barrier: asyncio.Future[Any] | None = None
        with self._lock:
            already = self._closed
        if not already:
            # A no-op behind everything queued: when it resolves, every earlier write has been done.
            barrier = self.submit(_noop, None)
            with self._lock:
                self._closed = True
        if barrier is not None:
            await barrier
        loop = asyncio.get_running_loop()
        with contextlib.suppress(RuntimeError):  # the executor is shut down already
            await loop.run_in_executor(self._executor, self._release)
        await loop.run_in_executor(None, self._executor.shutdown, True)


def _is_transient(exc: DBAPIError) -> bool:
    # psycopg exposes the SQLSTATE: 40P01 deadlock_detected, 40001 serialization_failure.
    return getattr(exc.orig, "sqlstate", None) in ("40P01", "40001")


def _noop(_conn: Connection, args: list[Any]) -> list[None]:
    return [None for _ in args]


def _set_results(items: list[tuple[_Pending, Any, bool]]) -> None:
    for pending, value, is_error in items:
        if pending.future.done():  # the caller was cancelled; the write still happened
            continue
        if is_error:
            pending.future.set_exception(value)
        else:
            pending.future.set_result(value)


__all__ = ["BatchWriter", "Failed", "Handler", "StoreClosedError", "WriteFailure", "is_outage"]
