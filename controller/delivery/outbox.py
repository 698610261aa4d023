"""Outbox delivery: post each response to the topology callback, in per-device order, retrying
until it is acknowledged.

A pass reads the due head of every device (or only of the devices whose delivery just ended)
and starts one delivery per device; that delivery goes on with the device's next responses (read
ahead in batches), each recorded before the next is sent, so a backlog drains at the pace of the
receiver and the database, not of the passes. Outside a backlog's drain, one response in the
whole process at a time is sent but not yet recorded (what a SIGKILL repeats). Failures
(`controller.delivery.wire`): a receiver that is down gets one probe at a time, its first success
releases the whole backlog; a response refused for good is dead-lettered; any other failure backs
that row off, persisted. A failing database never ends the loop: a failed pass is logged once per
outage and retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime, timedelta

import grpc

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import topology_callback_pb2_grpc as cb
from controller.delivery.records import Records
from controller.delivery.wire import (
    DEAD_LETTER,
    DESTINATION_DOWN,
    SendWindow,
    Transport,
    attempt_kind,
    backoff_delay,
    probe_on_reconnect,
    reconnect_options,
)
from controller.observability import metrics
from controller.observability.logs import request_context
from controller.process.supervise import Outage
from controller.security.tls import ClientTls, client_channel
from controller.store import OutboxItem, Store, StoreClosedError

log = logging.getLogger(__name__)

#: seconds a woken delivery loop waits for more completions before its pass; when at least
#: `_BUSY` deliveries are in flight (a pass would mostly re-read their heads), `_BUSY_COALESCE`
_COALESCE = 0.005
_BUSY = 32
_BUSY_COALESCE = 0.02
#: while `_BUSY` deliveries are in flight, a pass over every device's head (after new completions)
#: runs at most this often; the passes between look only at devices whose delivery just ended
_FULL_PASS_EVERY = 0.1
#: with nothing waking it, the loop still passes over every device this often (rows whose own
#: back-off ended); a backlog must never drain at this pace
_IDLE_PASS_EVERY = 0.5
#: a device's delivery reads its next responses this many at a time (one indexed read)
_READ_AHEAD = 32
#: a device with at least this many responses waiting (its read-ahead) is draining a backlog:
#: its sends no longer wait for the one-unrecorded window (`SendWindow`)
_DRAIN_DEPTH = 8
#: at shutdown, how long outcomes being written (an acknowledged response's) may still take
_RECORD_GRACE = 3.0


class Delivery:
    """Delivers due outbox rows; `notify()` wakes it when new rows are committed.

    `transport` replaces the unary callback (the agent stream); `owns` limits delivery to the
    devices of one transport when both run in one process."""

    def __init__(
        self,
        store: Store,
        target: str,
        *,
        concurrency: int,
        max_backoff: float,
        timeout: float,
        tls: ClientTls | None = None,
        probe_max: float = 5.0,
        transport: Transport | None = None,
        owns: Callable[[str], bool] | None = None,
        shards: Callable[[], Sequence[int] | None] | None = None,
    ) -> None:
        self._store = store
        #: the shards whose responses this process delivers now (None: all; controller/cluster/shards.py)
        self._shards = shards
        #: deliveries in flight per shard (a shard being released waits for its own)
        self.in_flight_shards: Counter[int] = Counter()
        self._transport = transport
        self._owns = owns
        self._target = target
        self._tls = tls or ClientTls()
        self._max_backoff = max_backoff
        self._timeout = timeout
        self._sends = SendWindow(concurrency)
        self._wake = asyncio.Event()
        self._notified = False  # completions since the last full pass
        self._full_pass_due = False  # a failed pass: the next one looks at every device
        self._last_full_pass = 0.0  # time.monotonic()
        self._freed: set[str] = set()  # devices whose delivery ended since the last pass
        self._busy: set[str] = set()  # devices with a delivery in flight: keeps per-device order
        # A due-rows query that began before a device's delivery finished may still list the
        # delivered row: remember, per device, how many passes had started when its delivery
        # finished; a pass numbered below that began before the end and skips the device.
        self._passes = 0
        self._finished: dict[str, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._channel: grpc.aio.Channel | None = None
        self._stub: cb.TopologyCallbackStub | None = None
        self.delivered = 0
        self.dead_lettered = 0
        self._stopping = False
        #: deliveries draining a backlog now, and the most at once since the last went from 0
        self._draining = 0
        self._draining_peak = 0
        #: the destination's state: while it fails, only one probe at a time, at `_next_probe`
        self.destination = Outage(target if transport is not None else f"topology callback {target}", log)
        self._probe_max = probe_max
        self._next_probe = 0.0  # time.monotonic()
        self._probing = False
        #: the database side of delivery (passes, recording outcomes)
        self.database = Outage("delivery's database access", log)
        self._records = Records(self.database, lambda: self._stopping)

    def notify(self) -> None:
        """New responses are in the outbox (a completion)."""
        self._notified = True
        self._wake.set()

    def _pass_devices(self, woken: bool) -> set[str] | None:
        """The devices the next pass looks at; None: every device (a full pass).

        NOTE: the heads query reads every undelivered device; under load, most of them have a
        delivery in flight. Between full passes (new completions, at most every
        `_FULL_PASS_EVERY` s while busy; every timeout, failure and probe), a pass looks only at
        the devices whose delivery just ended, whose next response may now be due."""
        now = time.monotonic()
        busy = len(self._tasks) >= _BUSY
        if (
            not woken
            or self._full_pass_due
            or self.destination.failing
            or (self._notified and (not busy or now - self._last_full_pass >= _FULL_PASS_EVERY))
        ):
            self._notified = self._full_pass_due = False
            self._last_full_pass = now
            self._freed.clear()
            return None
        freed, self._freed = self._freed, set()
        return freed

    async def run(self) -> None:
        if not self._target and self._transport is None:
            if self._owns is None:
                log.warning("no topology callback address configured: responses stay in the outbox")
            else:  # agent mode: the agent's devices answer on its stream
                log.info(
                    "no topology callback: responses of devices outside agent_devices stay in the outbox"
                )
            return
        watcher: asyncio.Task[None] | None = None
        if self._transport is None:
            self._channel = client_channel(
                self._target, self._tls, what="topology callback", options=reconnect_options(self._probe_max)
            )
            self._stub = cb.TopologyCallbackStub(self._channel)
            watcher = asyncio.create_task(
                probe_on_reconnect(self._channel, lambda: self.destination.failing, self.retry_now),
                name="callback channel",
            )
        try:
            woken = False  # the first pass is a full one
            while not self._stopping:
                devices = self._pass_devices(woken)
                self._wake.clear()
                wait = _IDLE_PASS_EVERY
                try:
                    if devices is None or devices:
                        await self.pass_once(devices)
                    self.database.ok()
                except Exception as exc:  # a database outage must not end delivery for good
                    wait = self.database.failed(exc)
                    self._full_pass_due = True
                if self.destination.failing and not self._probing:
                    wait = min(wait, max(self._next_probe - time.monotonic(), 0.01))
                if self._notified:  # new responses wait for the next full pass
                    wait = min(wait, max(self._last_full_pass + _FULL_PASS_EVERY - time.monotonic(), 0.0))
                woken = False
                # asyncio.timeout, unlike wait_for on 3.11, never swallows a cancellation
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._wake.wait()
                        woken = True
                        # let completions that land together share one outbox query; with
                        # many deliveries in flight a pass mostly finds heads already under
                        # way, so passes are spaced wider
                        await asyncio.sleep(_BUSY_COALESCE if len(self._tasks) >= _BUSY else _COALESCE)
        finally:
            await self._stop_tasks()
            if watcher is not None:
                watcher.cancel()
            if self._channel is not None:
                await self._channel.close()

    async def pass_once(self, devices: Collection[str] | None = None) -> int:
        """Start deliveries for every due head-of-device row not already in flight (of `devices`
        only, when given); while the destination is down, only one probe (the oldest due row)
        once its backoff has passed."""
        probe = self.destination.failing
        if probe and (self._probing or time.monotonic() < self._next_probe):
            return 0
        this_pass = self._passes
        self._passes += 1
        shards = self._shards() if self._shards is not None else None
        heads = await self._store.due_heads(datetime.now(UTC), limit=2000, shards=shards, devices=devices)
        chosen: dict[int, int] = {}  # head id -> the device's responses waiting
        for head in heads:
            if head.device in self._busy or self._stale(head.device, this_pass):
                continue
            if self._owns is not None and not self._owns(head.device):
                continue  # the other transport's device
            chosen[head.id] = head.waiting
            if probe:
                break
        started = 0
        for item in await self._store.outbox_items(list(chosen)):
            if item.device in self._busy or self._stale(item.device, this_pass):
                continue  # started by a concurrent pass (the shutdown flush)
            self._busy.add(item.device)
            self.in_flight_shards[item.shard] += 1
            if probe:
                self._probing = True
            task = asyncio.create_task(self._deliver(item, probe=probe, more=chosen[item.id] > 1))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            started += 1
        self._finished = {d: p for d, p in self._finished.items() if p > this_pass}
        return started

    def _stale(self, device: str, this_pass: int) -> bool:
        """Whether pass `this_pass` began before the device's last delivery ended (its rows may
        predate that delivery's records). NOTE: `>` not `>=`: the pass numbered as the count at
        the end began after it; skipping it left a drained device idle until the next timed
        full pass (0.5 s), which capped a backlog's drain at two responses per device a second."""
        return self._finished.get(device, -1) > this_pass

    def retry_now(self) -> None:
        """The destination is reachable again (an agent stream reconnected): probe at once."""
        self._next_probe = 0.0
        self._wake.set()

    def stop(self) -> None:
        """Ask the delivery loop to end after its current pass."""
        self._stopping = True
        self._wake.set()

    async def flush(self, timeout: float) -> None:
        """Best effort at shutdown: deliver what is due now, within `timeout`."""
        if self._stub is None and self._transport is None:
            return
        try:
            await asyncio.wait_for(self._flush(), timeout)
        except TimeoutError:
            try:
                left = await self._store.undelivered_count()
            except Exception:  # the database may be what is failing
                left = -1
            log.warning(
                "shutdown: %s responses still undelivered; they are sent after restart",
                left if left >= 0 else "some",
            )
        except Exception as exc:
            log.warning("shutdown: delivery flush stopped (%s); responses are sent after restart", exc)

    async def _flush(self) -> None:
        if self.destination.failing:
            return  # the receiver is down: nothing to gain at shutdown
        while await self.pass_once() or self._tasks:
            # NOTE: not gather, whose cancellation (the timeout) cancels the deliveries: a
            # cancelled one frees its device while its record may be pending, and a pass of the
            # still running loop could send the row again; `stop` ends them
            await asyncio.wait(list(self._tasks))

    async def _deliver(self, item: OutboxItem, *, probe: bool, more: bool = True) -> None:
        """Deliver `item`, then the device's next responses one by one while each is delivered
        (or dead-lettered), reading them ahead in small batches.

        `more`: the pass saw more of the device's responses waiting. Else nothing is read ahead
        (it was a read per response in steady state): the pass after the delivery ends (the
        device is freed) finds a later one, with many devices' heads in one read.

        NOTE: each response is recorded as delivered before the device's next is sent, and
        outside a drain (fewer than `_DRAIN_DEPTH` waiting on the device) before any device's
        next: a pass's burst of heads went out together and a kill before their records repeated
        them all (22 in one kill, docs/reliability.md). So a SIGKILL repeats at most one response,
        plus one per device draining a backlog (`SendWindow`). A probe delivers one response (its success
        releases the whole backlog through a full pass)."""
        device, shard = item.device, item.shard
        ahead: list[OutboxItem] = []
        draining = False
        try:
            while True:
                async with self._sends.sending(draining=draining):
                    response = pb.DeviceControllerResponse.FromString(item.response)
                    with request_context(item.device, item.request_id, response.trace_id):
                        done = await self._send(item, response, probe=probe)
                if not done or probe or self._stopping or self.destination.failing:
                    return
                if not ahead:
                    if not more:
                        return
                    try:
                        ahead = await self._store.next_outbox(device, item.id, _READ_AHEAD)
                    except StoreClosedError:
                        return
                    except Exception as exc:  # the next pass finds the device's head again
                        self.database.failed(exc)
                        self._full_pass_due = True
                        return
                    ahead.reverse()
                    if (len(ahead) >= _DRAIN_DEPTH) != draining:
                        draining = not draining
                        self._drain_changed(device, len(ahead), draining)
                if not ahead or not self._may_continue(ahead[-1]):
                    return
                item = ahead.pop()
                if item.shard != shard:
                    self.in_flight_shards[item.shard] += 1
                    self._shard_done(shard)
                    shard = item.shard
        finally:
            if draining:
                self._drain_changed(device, 0, False)
            if probe:
                self._probing = False
            self._busy.discard(device)
            self._shard_done(shard)
            self._finished[device] = self._passes
            self._freed.add(device)
            self._wake.set()  # the device's next response (or the whole backlog) may be due now

    def _drain_changed(self, device: str, waiting: int, draining: bool) -> None:
        """A delivery starts or stops draining a backlog. Logged when the first starts and when the
        last ends (drained, or given up: a stop, the receiver down, a failed read): meanwhile a
        SIGKILL may repeat one response per device draining, not one in all (`SendWindow`); the
        crash drill reads these lines to know which bound a kill had."""
        if draining:
            self._draining += 1
            self._draining_peak = max(self._draining_peak, self._draining)
            if self._draining == 1:
                log.info(
                    "delivering a backlog (%s: %d responses waiting): until it is delivered a crash "
                    "may repeat one response per device with a backlog",
                    device,
                    waiting,
                )
            return
        self._draining -= 1
        if not self._draining:
            log.info("backlog delivery ended (up to %d devices had one at once)", self._draining_peak)
            self._draining_peak = 0

    def _may_continue(self, item: OutboxItem) -> bool:
        """Whether a device's delivery may go on with `item`: never tried (a row that failed
        keeps its own back-off, and passes find it) and of a shard this process still serves."""
        if item.attempts:
            return False
        shards = self._shards() if self._shards is not None else None
        return shards is None or item.shard in shards

    def _shard_done(self, shard: int) -> None:
        self.in_flight_shards[shard] -= 1
        if not self.in_flight_shards[shard]:
            del self.in_flight_shards[shard]

    async def _send(self, item: OutboxItem, response: pb.DeviceControllerResponse, *, probe: bool) -> bool:
        """Send one response and record the outcome; True when the device's next may follow."""
        sent = time.monotonic()
        try:
            if self._transport is not None:
                await self._transport.send(response, self._timeout)
            else:
                assert self._stub is not None
                await self._stub.DeviceResponse(response, timeout=self._timeout)
        except grpc.aio.AioRpcError as exc:
            return await self._failed(item, exc, probe=probe)
        metrics.DELIVERY_SECONDS.observe(time.monotonic() - sent)
        metrics.child(metrics.DELIVERY_ATTEMPTS, "ok").inc()
        metrics.DELIVERY_LAG_SECONDS.observe((datetime.now(UTC) - item.created_at).total_seconds())
        if self.destination.failing:
            self.destination.ok()
            self._full_pass_due = True  # every device's backlog, not only the probed one's
            log.info("%s is back: releasing the backlog", self.destination.what)
        recorded = await self._records.record(self._store.mark_delivered, item.id, datetime.now(UTC))
        self.delivered += 1
        return recorded

    async def _failed(self, item: OutboxItem, exc: grpc.aio.AioRpcError, *, probe: bool) -> bool:
        code = exc.code()
        error = f"{code.name}: {exc.details()}"
        now = datetime.now(UTC)
        if code not in DESTINATION_DOWN and self.destination.failing:
            self.destination.ok()  # it answered: the receiver is up, only this response failed
        metrics.DELIVERY_ATTEMPTS.labels(attempt_kind(code)).inc()
        if code in DEAD_LETTER:
            log.error(
                "delivery of %s to %s refused for good (%s): dead-lettered; the device's later "
                "responses go on (devicectl requests list --dead-letter)",
                item.request_id,
                self._target,
                error,
            )
            self.dead_lettered += 1
            return await self._records.record(self._store.dead_letter, item.id, error, now)
        if code in DESTINATION_DOWN:
            # Deliveries already in flight when the receiver went away fail together: only the
            # first of them (or a probe) counts towards the destination's backoff.
            if probe or not self.destination.failing:
                delay = backoff_delay(self.destination.failures + 1, self._probe_max)
                self.destination.failed(exc, traceback=False)
                self._next_probe = time.monotonic() + delay
            # recorded on the row for operators; due again at once, the destination gates it
            await self._records.record(self._store.delivery_failed, item.id, error, now)
            return False
        delay = backoff_delay(item.attempts + 1, self._max_backoff)
        log.warning(
            "delivery of %s to %s failed (attempt %d): %s; next in %.1f s",
            item.request_id,
            self._target,
            item.attempts + 1,
            error,
            delay,
        )
        await self._records.record(
            self._store.delivery_failed, item.id, error, now + timedelta(seconds=delay)
        )
        return False

    async def _stop_tasks(self) -> None:
        self._stopping = True  # a record failing from now on is given up
        for task in list(self._tasks):
            task.cancel()  # a send not yet acknowledged is sent again after restart
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self._records.finish(_RECORD_GRACE)  # an acknowledged response's record (shielded)
