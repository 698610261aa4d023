"""The front door: the gRPC server on a thread and event loop of its own, so acks never wait for a wave.

One process accepts and executes. On a single event loop a wave's thousands of BMC replies fill
every turn of the loop (a turn runs every callback that is ready), and each of an ack's few steps
(the call arrives, the journal's insert commits, the reply goes out) waits a whole turn: seconds
at 2,000 BMCs. Here the gRPC server (DeviceController, the admin API, health, reflection) runs on
a loop of its own thread. When that thread has work the interpreter hands it the GIL within its
switch interval (5 ms), so an ack waits for its own steps and the journal's commit, not for the
execution's backlog: priority for the ack path inside one process. `serve --workers N` remains
the layout beyond one core (docs/operations.md, "Several processes").

What crosses between the two loops, and how:
- an accepted request is handed to the execution loop's dispatcher in acceptance order
  (`Handover`: one wake-up of that loop per burst, not one per request);
- the admin API's methods run on the execution loop (`OnLoop`): they read and start the
  execution's work (dry runs, verifications, waits for a request's completion); an abort there
  is carried back and made on the server's loop, where grpc sends the status;
- the health servicer's status is set on the front door's loop (`on_loop`), where its watchers wait.
The store is shared as it is: its writer thread answers each caller on the caller's own loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from typing import Any, Generic, NoReturn, TypeVar

import grpc

from controller.process.supervise import describe

log = logging.getLogger(__name__)

T = TypeVar("T")
J = TypeVar("J")

#: seconds a stop waits for the front door's thread to end (its loop has nothing left by then)
JOIN_TIMEOUT = 5.0


async def on_loop(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` on `loop` and return its result here; directly when `loop` is this one.

    Cancelling the caller cancels the coroutine on the other loop."""
    if loop is asyncio.get_running_loop():
        return await coro
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))


class FrontDoor:
    """The gRPC server's thread and event loop (see the module docstring)."""

    def __init__(self, name: str = "devicectl-front-door") -> None:
        self._name = name
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("the front door is not started")
        return self._loop

    def start(self) -> None:
        """Start the thread and its loop; returns once the loop runs."""
        if self._thread is not None:
            raise RuntimeError("the front door is already started")
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name=self._name, daemon=True)
        self._thread.start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        loop.call_soon(ready.set)
        try:
            loop.run_forever()
        finally:
            try:
                leftovers = asyncio.all_tasks(loop)
                for task in leftovers:
                    task.cancel()
                if leftovers:
                    loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                loop.close()

    async def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the front door's loop and return its result to the caller's loop."""
        return await on_loop(self.loop, coro)

    async def stop(self) -> None:
        """Stop the loop (what still runs on it is cancelled) and wait for the thread to end."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        self._thread = None
        if not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, JOIN_TIMEOUT)
        if thread.is_alive():
            log.error("shutdown: the gRPC server's thread did not end within %.0f s", JOIN_TIMEOUT)


class Aborted(Exception):
    """`ContextOnLoop.abort` on the execution's loop: the call ends with this status."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class ContextOnLoop:
    """A servicer context for a call that runs on another loop than the gRPC server's.

    `abort` sends the status at once, on the loop it is awaited on, so it must be awaited on the
    server's: here it ends the call with `Aborted`, which `OnLoop` turns into the real abort on
    the server's loop. Everything else (peer, metadata, deadline) is read from the real context."""

    def __init__(self, context: grpc.aio.ServicerContext) -> None:
        self._context = context

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()) -> NoReturn:
        raise Aborted(code, details)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


class OnLoop:
    """A servicer whose RPC methods (its coroutine functions) run on another event loop.

    The gRPC server looks each method up by name on this object and awaits it on its own loop;
    the call runs on `loop` with a `ContextOnLoop`, and an abort there is made here."""

    def __init__(self, servicer: object, loop: asyncio.AbstractEventLoop) -> None:
        self._servicer = servicer
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._servicer, name)
        loop = self._loop
        if inspect.isasyncgenfunction(method):  # a server stream: each item made on `loop`

            async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                items = method(request, ContextOnLoop(context))
                making = False  # an item is being made: a cancel reaches the stream there and ends it
                try:
                    while True:
                        making = True
                        try:
                            item = await on_loop(loop, _next(items))
                        except Aborted as aborted:
                            await context.abort(aborted.code, aborted.details)
                        making = False
                        if item is _END:
                            return
                        yield item
                finally:
                    if not making:  # the caller stopped between items: close the stream there
                        with contextlib.suppress(Exception):  # the execution loop is closed
                            await on_loop(loop, _close(items))

            stream.__name__ = stream.__qualname__ = name
            return stream
        if not inspect.iscoroutinefunction(method):
            return method

        async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                return await on_loop(loop, method(request, ContextOnLoop(context)))
            except Aborted as aborted:
                await context.abort(aborted.code, aborted.details)

        call.__name__ = call.__qualname__ = name
        return call


#: what `_next` returns at the end of a stream
_END = object()


async def _close(items: Any) -> None:
    await items.aclose()


async def _next(items: AsyncIterator[Any]) -> Any:
    """The stream's next item, or `_END` (StopAsyncIteration does not cross loops as a result)."""
    try:
        return await anext(items)
    except StopAsyncIteration:
        return _END


class Handover(Generic[J]):
    """Jobs handed from any thread to one event loop, in the order given, one wake-up per burst.

    `give` may be called from the target loop itself (agent mode accepts there): the jobs then
    still run from that loop's next turn, after the ones handed before them. `holds(key)` says
    whether a job is handed over and not yet taken (`key` names a job)."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, take: Callable[[J], None], key: Callable[[J], str]
    ) -> None:
        self._loop = loop
        self._take = take
        self._key = key
        self._lock = threading.Lock()
        self._jobs: deque[J] = deque()
        #: keys of the jobs handed over and not yet taken
        self._held: set[str] = set()
        self._scheduled = False

    def holds(self, key: str) -> bool:
        with self._lock:
            return key in self._held

    def give(self, jobs: Iterable[J]) -> None:
        with self._lock:
            for job in jobs:
                self._jobs.append(job)
                self._held.add(self._key(job))
            if self._scheduled or not self._jobs:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the execution loop is closed: the jobs stay journaled
            with self._lock:
                self._jobs.clear()
                self._held.clear()
                self._scheduled = False
            log.warning("the execution loop is closed: accepted requests stay journaled for a restart")

    def _drain(self) -> None:
        with self._lock:
            jobs = list(self._jobs)
            self._jobs.clear()
            self._scheduled = False
        for job in jobs:
            try:
                self._take(job)
            except Exception as exc:  # one job's failure must not strand the others
                log.error("a request could not be queued (it stays journaled): %s", describe(exc))
        with self._lock:  # only now: until taken, a job is neither here nor in the dispatcher
            self._held.difference_update(self._key(job) for job in jobs)
