"""Writing a request's completion: retried in place until the journal takes it, so nothing newer
for the device runs first (the runner awaits it inside the device's lane).

A database outage is waited out with capped backoff; a completion the database refuses as such
(not an outage: a state PostgreSQL's JSONB cannot hold, say) is stored, after a few attempts,
without its result, as an error saying why, rather than block the device's lane for good.

A completed request that reached its device, or failed to, is also an access to it (its
reachability: `devicectl devices health`). The accesses of one completion tick are recorded
together, handed to the store in the same loop turn as the tick's completions (so the group commit
writes them in the same transaction), and a failure to record them touches no completion.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

from controller import translate
from controller.config import Settings
from controller.observability import metrics, reachability
from controller.process.supervise import Outage, describe
from controller.store import BmcAccess, Completion, Store, StoreClosedError, is_outage
from plugins.base import RequestKind

log = logging.getLogger(__name__)

#: a completion the database refuses this many times (not an outage) is stored without its result
REFUSED_COMPLETIONS = 3


@dataclass(frozen=True, slots=True)
class Written:
    #: the completion committed (False: completed elsewhere before, or fenced: lease lost)
    done: bool
    #: it was stored as given (False: without its result, see the module docstring)
    as_is: bool


class CompletionWriter:
    """Writes completions for the runner (see the module docstring)."""

    def __init__(self, store: Store, settings: Settings, on_complete: Callable[[str], None]) -> None:
        self._store = store
        self._settings = settings
        self._on_complete = on_complete
        #: accesses of this tick not yet handed to the store (see the module docstring)
        self._accesses: list[BmcAccess] = []
        self._recording: set[asyncio.Task[None]] = set()
        self._recording_failed = False

    async def write(self, completion: Completion, access: BmcAccess | None = None) -> Written:
        """Write the completion, retrying until it is written. A retry after a commit whose
        acknowledgement was lost finds the request completed (done False), like any recovery race.
        `access`: what the request found of its device's reachability, recorded alongside."""
        outage = Outage(
            f"completion of {completion.request_id}", log, cap=self._settings.completion_retry_max
        )
        refused = 0  # failures that are no outage: the database refuses this very completion
        as_is = True
        await _next_tick()
        if access is not None:
            self._accessed(access)
        while True:
            try:
                done = await self._store.complete(completion)
                break
            except (LookupError, StoreClosedError):
                raise
            except Exception as exc:
                if not is_outage(exc):
                    refused += 1
                    if refused == REFUSED_COMPLETIONS and as_is:
                        completion = without_result(completion, exc)
                        as_is = False
                await asyncio.sleep(outage.failed(exc))
        outage.ok()
        if done:
            metrics.request_done(completion.kind, completion.outcome)
        self._on_complete(completion.request_id)
        return Written(done, as_is)

    def _accessed(self, access: BmcAccess) -> None:
        """Note one access: its gauges now, its row with the others of this tick. The first of a
        tick starts the task that records them all; its first step runs in the next loop turn,
        ahead of the store writer's drain that this completion schedules (one started earlier may
        leave them to the next transaction: correct, only dearer)."""
        reachability.BMC_HEALTH.record(access.device, access.error, access.at.timestamp())
        self._accesses.append(access)
        if len(self._accesses) == 1:
            task = asyncio.ensure_future(self._record_accesses())
            self._recording.add(task)
            task.add_done_callback(self._recording.discard)

    async def _record_accesses(self) -> None:
        accesses, self._accesses = self._accesses, []
        try:
            await self._store.record_bmc_access(accesses)
        except StoreClosedError:
            return
        except Exception as exc:  # reachability only: the completions are what must be written
            if not self._recording_failed:
                log.warning(
                    "could not record the reachability of %d devices: %s", len(accesses), describe(exc)
                )
            self._recording_failed = True
            return
        if self._recording_failed:
            log.info("recording device reachability again")
            self._recording_failed = False


#: completions are handed to the store on a grid of this many seconds (see `_next_tick`)
COMPLETION_TICK = 0.02


async def _next_tick() -> None:
    """Wait for the next `COMPLETION_TICK` of the loop's clock.

    NOTE: calls end one by one, and a completion alone in its transaction cost ~4x its share of a
    batch (the reads, statements and commit are per transaction). Completions that end within one
    tick are handed over in the same loop turn, and the store's group commit writes them in one
    transaction; a response waits at most one tick more."""
    loop = asyncio.get_running_loop()
    tick: asyncio.Future[None] = loop.create_future()
    # the tick itself as the deadline (not a delay from now): the timers of one tick fire together
    loop.call_at(math.ceil(loop.time() / COMPLETION_TICK) * COMPLETION_TICK, _wake, tick)
    await tick


def _wake(tick: asyncio.Future[None]) -> None:
    if not tick.done():  # cancelled meanwhile
        tick.set_result(None)


def without_result(c: Completion, exc: BaseException) -> Completion:
    """The completion as an error: no state, audit or verification, just why it failed."""
    error = f"the result could not be stored ({describe(exc)}); the device may have been changed"
    log.error("%s", error)
    response = translate.error_response(
        RequestKind(c.kind), error, device=c.device, request_id=c.request_id, trace_id=c.trace_id
    )
    return Completion(
        request_id=c.request_id,
        device=c.device,
        outcome="failed",
        error=error,
        finished_at=c.finished_at,
        response=response.SerializeToString(),
        new_state=None,
        touch_device=False,
        trace_id=c.trace_id,
        kind=c.kind,
        internal=c.internal,
        fence=c.fence,
        started_at=c.started_at,
    )
