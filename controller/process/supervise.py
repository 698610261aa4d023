"""Keeping background work alive: a failing pass is logged once per outage, backed off (capped)
and tried again, so no database or network fault ends a loop for good.

`Outage` tracks one activity's run of failures; `supervise` restarts a whole loop that escaped
its own guard (the last line of defence for the tasks `controller.app` starts).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import grpc

from controller.store import is_outage

log = logging.getLogger(__name__)


def describe(exc: BaseException, limit: int = 300) -> str:
    """One bounded line naming the error (database messages can span lines)."""
    if isinstance(exc, grpc.aio.AioRpcError):  # its str() starts with a line that says nothing
        return describe(RuntimeError(f"{exc.code().name}: {exc.details()}"), limit).removeprefix(
            "RuntimeError: "
        )
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Outage:
    """Failures of one activity: the first is logged, the rest only counted, the recovery logged once.

    `failed()` returns how long to wait before the next try: `base` doubling up to `cap`.
    """

    def __init__(self, what: str, logger: logging.Logger = log, *, base: float = 0.1, cap: float = 5.0):
        self.what = what
        self._log = logger
        self._base = base
        self._cap = cap
        self.failures = 0
        self.since: float | None = None  # time.time() of the first failure
        self.reason = ""

    @property
    def failing(self) -> bool:
        return self.failures > 0

    def failed(self, exc: BaseException, *, traceback: bool | None = None) -> float:
        """Count a failure (logged if it is the first); returns the delay before the next try.
        A traceback is logged only for the unexpected, unless `traceback` says otherwise."""
        self.failures += 1
        self.reason = describe(exc)
        if self.failures == 1:
            self.since = time.time()
            # a traceback only for the unexpected; a database outage is an operational event
            self._log.warning(
                "%s failing (%s); retrying with backoff, logged again when it recovers",
                self.what,
                self.reason,
                exc_info=not is_outage(exc) if traceback is None else traceback,
            )
        return self.delay()

    def delay(self) -> float:
        return float(min(self._base * 2 ** max(self.failures - 1, 0), self._cap))

    def ok(self) -> None:
        if self.failures:
            took = time.time() - (self.since or time.time())
            self._log.warning(
                "%s recovered after %d failed attempts over %.1f s", self.what, self.failures, took
            )
        self.failures = 0
        self.since = None
        self.reason = ""


async def supervise(name: str, loop: Callable[[], Awaitable[None]], *, cap: float = 5.0) -> None:
    """Run `loop()` until cancelled; if it raises or returns, log it and start it again."""
    outage = Outage(f"background task {name}", cap=cap)
    while True:
        started = time.monotonic()
        try:
            await loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if time.monotonic() - started > 60:
                outage.ok()  # a crash after a long healthy run is a new outage: log it
            delay = outage.failed(exc)
        else:
            return  # a loop that ends on its own (e.g. delivery with no callback) is done
        await asyncio.sleep(delay)
