"""Outbox delivery: post each response to the topology callback, in per-device order, retrying
with capped exponential backoff and jitter until it is acknowledged.

Retries are persisted (attempts, next attempt time) rather than held in a retry loop, so they
outlive topology outages and controller restarts; tenacity's wait strategy computes the delays.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime, timedelta

import grpc
import tenacity

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import topology_callback_pb2_grpc as cb
from controller.store import OutboxItem, Store
from controller.tls import ClientTls, client_channel

log = logging.getLogger(__name__)


def _backoff(max_backoff: float) -> tenacity.wait.wait_base:
    return tenacity.wait_exponential_jitter(multiplier=0.2, exp_base=2, max=max_backoff, jitter=0.5)


def backoff_delay(attempt: int, max_backoff: float) -> float:
    """Seconds to wait after the `attempt`-th failed delivery (1-based)."""
    state = tenacity.RetryCallState(retry_object=tenacity.AsyncRetrying(), fn=None, args=(), kwargs={})
    state.attempt_number = attempt
    return float(_backoff(max_backoff)(state))


class Delivery:
    """Delivers due outbox rows; `notify()` wakes it when new rows are committed."""

    def __init__(
        self,
        store: Store,
        target: str,
        *,
        concurrency: int,
        max_backoff: float,
        timeout: float,
        tls: ClientTls | None = None,
    ) -> None:
        self._store = store
        self._target = target
        self._tls = tls or ClientTls()
        self._max_backoff = max_backoff
        self._timeout = timeout
        self._slots = asyncio.Semaphore(concurrency)
        self._wake = asyncio.Event()
        self._busy: set[str] = set()  # devices with a delivery in flight: keeps per-device order
        # A due-rows query that began before a device's delivery finished may still list the
        # delivered row: remember which pass each device last finished in, and skip stale rows.
        self._passes = 0
        self._finished: dict[str, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._channel: grpc.aio.Channel | None = None
        self._stub: cb.TopologyCallbackStub | None = None
        self.delivered = 0
        self._stopping = False

    def notify(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        if not self._target:
            log.warning("no topology callback address configured: responses stay in the outbox")
            return
        self._channel = client_channel(self._target, self._tls, what="topology callback")
        self._stub = cb.TopologyCallbackStub(self._channel)
        try:
            while not self._stopping:
                self._wake.clear()
                await self.pass_once()
                # asyncio.timeout, unlike wait_for on 3.11, never swallows a cancellation
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.5):
                        await self._wake.wait()
                        # let completions that land together share one outbox query
                        await asyncio.sleep(0.005)
        finally:
            await self._stop_tasks()
            await self._channel.close()

    async def pass_once(self) -> int:
        """Start deliveries for every due head-of-device row not already in flight."""
        this_pass = self._passes
        self._passes += 1
        due = await self._store.due_outbox(datetime.now(UTC), limit=2000)
        started = 0
        for item in due:
            if item.device in self._busy or self._finished.get(item.device, -1) >= this_pass:
                continue
            self._busy.add(item.device)
            task = asyncio.create_task(self._deliver(item))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            started += 1
        self._finished = {d: p for d, p in self._finished.items() if p >= this_pass}
        return started

    def stop(self) -> None:
        """Ask the delivery loop to end after its current pass."""
        self._stopping = True
        self._wake.set()

    async def flush(self, timeout: float) -> None:
        """Best effort at shutdown: deliver what is due now, within `timeout`."""
        if self._stub is None:
            return
        try:
            await asyncio.wait_for(self._flush(), timeout)
        except TimeoutError:
            log.warning(
                "shutdown: %d responses still undelivered; they are sent after restart",
                await self._store.undelivered_count(),
            )

    async def _flush(self) -> None:
        while await self.pass_once() or self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _deliver(self, item: OutboxItem) -> None:
        try:
            async with self._slots:
                assert self._stub is not None
                response = pb.DeviceControllerResponse.FromString(item.response)
                try:
                    await self._stub.DeviceResponse(response, timeout=self._timeout)
                except grpc.aio.AioRpcError as exc:
                    delay = backoff_delay(item.attempts + 1, self._max_backoff)
                    error = f"{exc.code().name}: {exc.details()}"
                    log.warning(
                        "delivery of %s to %s failed (attempt %d): %s; next in %.1f s",
                        item.request_id,
                        self._target,
                        item.attempts + 1,
                        error,
                        delay,
                    )
                    await self._store.delivery_failed(
                        item.id, error, datetime.now(UTC) + timedelta(seconds=delay)
                    )
                    return
                await self._store.mark_delivered(item.id, datetime.now(UTC))
                self.delivered += 1
        finally:
            self._busy.discard(item.device)
            self._finished[item.device] = self._passes
            self._wake.set()  # the device's next response may be due now

    async def _stop_tasks(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
