"""The warm-up at start: every device this process runs is read once in the background (a
`std_metrics` read through its plugin, as the drift check reads, for plugins that say it helps:
`DevicePlugin.warm_up`, the Redfish plugin's), so the first wave after a start
or a restart finds each BMC logged in, its leftover sessions swept and its Redfish service
discovered, and runs at steady-state cost.

Bounded (`warmup_concurrency` devices at once, 0: off) and yielding: while any request runs or
waits in a lane, no new device is started (the ones in flight finish), and a device with work of
its own is skipped (its request warms it). Nothing is written to a device and nothing is stored:
the read's outcome is dropped, what stays is the plugin's own connection, session and discovery
cache. Progress: the `devicectl_warmup_devices{state}` gauge and `progress` (`devicectl status`).

With shard leases (`serve --workers`, several controllers) the shards settle after the start: the
first executor up leases them all and hands half on once its peer is there. The devices of a shard
gained after the start (`gained`) are warmed then, by the process that now runs them, under the same
bound; `progress` counts them too and is finished again once they are done. The devices of a shard
a lease round hands on (`handed_on`) are let go: their BMC sessions are logged out here, since the
process that now runs them logs in with its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from controller.config import Settings
from controller.execution.dispatch import Dispatcher
from controller.execution.runner import RequestRunner
from controller.observability import metrics
from controller.observability.logs import clip
from controller.process.supervise import describe
from plugins.base import DeviceContext, Empty, RequestKind, run_operation

log = logging.getLogger(__name__)

#: request id of the warm-up's reads (never journaled, never answered)
WARMUP_REQUEST_ID = "internal-warmup"
#: how often a paused warm-up looks whether the requests it yields to are done
YIELD_POLL_SECONDS = 0.05


@dataclass
class WarmupProgress:
    """How far the warm-up is."""

    total: int = 0
    done: int = 0
    failed: int = 0
    #: skipped: the device had work of its own (its request warmed it)
    skipped: int = 0
    finished: bool = False

    @property
    def pending(self) -> int:
        return self.total - self.done - self.failed - self.skipped


class Warmup:
    """Reads each device once, a bounded number at a time, yielding to requests."""

    def __init__(self, runner: RequestRunner, dispatcher: Dispatcher, settings: Settings) -> None:
        self._runner = runner
        self._dispatcher = dispatcher
        self._settings = settings
        self.progress = WarmupProgress()
        self._task: asyncio.Task[None] | None = None
        #: warm-ups of shards gained after the start (`gained`), while they run
        self._later: set[asyncio.Task[None]] = set()
        #: lettings-go of shards handed on (`handed_on`), while they run
        self._letting_go: set[asyncio.Task[None]] = set()
        self._devices: list[str] = []
        #: devices read at once, the start's and the gained shards' together
        self._slots = asyncio.Semaphore(max(settings.warmup_concurrency, 1))

    def start(self, devices: Iterable[str]) -> None:
        """Run the warm-up in the background (once)."""
        if self._task is None:
            self._devices = list(devices)
            self._task = asyncio.get_running_loop().create_task(self.run(self._devices), name="warm-up")

    def gained(self, shards: frozenset[int]) -> None:
        """Warm, in the background, the devices of `shards`: leased here after the start (their
        former holder released them, or its lease lapsed), so their first request here would log
        in otherwise. Nothing before the start's own warm-up (it reads every shard run then)."""
        if self._task is None or self._settings.warmup_concurrency <= 0:
            return
        router = self._runner.shards
        devices = [d for d in self._devices if router.shard_for_model(d, None) in shards]
        devices = [d for d in devices if router.runs(router.shard_for_model(d, None))]
        if not devices:
            return
        self.progress.total += len(devices)  # counted now: `status` is never finished meanwhile
        self.progress.finished = False
        self._publish()
        task = asyncio.get_running_loop().create_task(self.run(devices, later=True), name="warm-up (gained)")
        self._later.add(task)
        task.add_done_callback(self._later.discard)

    def handed_on(self, shards: frozenset[int]) -> None:
        """Let go, in the background, of the devices of `shards`, which a lease round handed on
        to another process: their BMC sessions are logged out (`RequestRunner.release`), or each
        BMC would hold this process's session beside its new holder's until it timed out (seen:
        72-87 BMCs per restart of a 2,000-BMC `--workers 2`). Bounded like the warm-up; a device
        whose shard is run here again meanwhile, or that has work here, is left as it is."""
        router = self._runner.shards
        devices = [d for d in self._devices if router.shard_for_model(d, None) in shards]
        if not devices:
            return
        task = asyncio.get_running_loop().create_task(self._release(devices), name="handed on")
        self._letting_go.add(task)  # apart from the warm-ups: never counted in `progress`
        task.add_done_callback(self._letting_go.discard)

    async def _release(self, devices: list[str]) -> None:
        router = self._runner.shards
        slots = asyncio.Semaphore(max(self._settings.warmup_concurrency, 1))
        released = 0

        async def one(device: str) -> None:
            nonlocal released
            async with slots:
                if router.runs(router.shard_for_model(device, None)) or self._dispatcher.busy(device):
                    return  # ours again, or it has work here: kept
                try:
                    await self._runner.release(device)
                    released += 1
                except Exception as exc:  # a logout that fails leaves the session to its timeout
                    log.info("letting go of %s: %s", device, describe(exc))

        await asyncio.gather(*(one(d) for d in devices))
        log.info("%d devices of shards handed on let go (their BMC sessions logged out)", released)

    def stop(self) -> None:
        """Cancel a warm-up still at work (at a stop)."""
        for task in [self._task, *self._later, *self._letting_go]:
            if task is not None and not task.done():
                task.cancel()

    async def run(self, devices: Iterable[str], *, later: bool = False) -> None:
        """Warm every device of `devices` this process runs (`progress` says how far it is);
        `later`: devices of shards gained after the start, added to the progress."""
        try:
            await self._run(devices, later)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the warm-up is an optimisation: it never stops the process
            log.warning("warm-up stopped: %s", describe(exc))
            self.progress.finished = True

    async def _run(self, devices: Iterable[str], later: bool = False) -> WarmupProgress:
        """Warm `devices`: at the start, those this process runs; `later`: devices of gained
        shards, already chosen and counted by `gained`."""
        progress = self.progress
        if later:
            mine = list(devices)
        else:
            shards = self._runner.shards
            mine = [d for d in devices if shards.runs(shards.shard_for_model(d, None))]
            mine = mine if self._settings.warmup_concurrency > 0 else []
            progress.total += len(mine)  # the start's devices (once; `gained` may add more)
            progress.finished = not mine and self._done()
            self._publish()
        if not mine:
            return progress
        began = time.monotonic()
        tasks: set[asyncio.Task[None]] = set()
        try:
            for device in mine:
                await self._slots.acquire()
                await self._yield_to_requests()
                task = asyncio.create_task(self._one(device, self._slots), name=f"warm-up {device}")
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if tasks:
                await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
        progress.finished = self._done()
        log.info(
            "warm-up%s: %d of %d devices ready in %.1f s (%d failed, %d skipped: busy with requests)",
            " of shards gained after the start" if later else "",
            progress.done,
            progress.total,
            time.monotonic() - began,
            progress.failed,
            progress.skipped,
        )
        return progress

    def _done(self) -> bool:
        """Whether no warm-up but the calling one is still at work."""
        current = asyncio.current_task()
        tasks = [self._task, *self._later]
        return not [t for t in tasks if t is not None and not t.done() and t is not current]

    async def _yield_to_requests(self) -> None:
        """Wait while requests run or wait in a lane: a wave goes first."""
        while True:
            if not self._dispatcher.active_lanes:
                return
            await asyncio.sleep(YIELD_POLL_SECONDS)  # lanes come and go: polled, nothing to await

    async def _one(self, device: str, slots: asyncio.Semaphore) -> None:
        try:
            if self._dispatcher.busy(device):
                self.progress.skipped += 1
                return
            ok = await self._read(device)
            if ok is None:
                self.progress.total -= 1  # nothing to warm
            elif ok:
                self.progress.done += 1
            else:
                self.progress.failed += 1
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # one device's failure never stops the others
            self.progress.failed += 1
            log.info("warm-up of %s failed: %s", device, describe(exc))
        finally:
            slots.release()
            self._publish()

    async def _read(self, device: str) -> bool | None:
        """Read the device once; None when its plugin has nothing to warm (`warm_up`), or when its
        shard is no longer leased here (another controller runs it now: never two at one BMC)."""
        shards = self._runner.shards
        shard = shards.shard_for_model(device, None)
        if not shards.runs(shard):
            return None
        # counted as running work of the shard: its lease is not handed on while the read runs
        self._runner.running_shards[shard] += 1
        try:
            return await self._read_leased(device)
        finally:
            self._runner.running_shards[shard] -= 1
            if not self._runner.running_shards[shard]:
                del self._runner.running_shards[shard]

    async def _read_leased(self, device: str) -> bool | None:
        resolved = await self._runner.resolve(device, b"", b"")
        if not getattr(resolved.plugin, "warm_up", False):
            return None
        timeout = self._settings.device_call_timeout
        ctx = DeviceContext(
            device_id=device,
            model=resolved.model,
            endpoint=resolved.endpoint,
            request_id=WARMUP_REQUEST_ID,
            deadline=time.monotonic() + timeout,
            state=resolved.state,
        )
        operation = run_operation(resolved.plugin, RequestKind.STD_METRICS, ctx, Empty())
        outcome = await asyncio.wait_for(operation, timeout)
        if not outcome.result.ok:
            log.info("warm-up of %s: %s", device, clip(outcome.result.error))
        return bool(outcome.result.ok)

    def _publish(self) -> None:
        p = self.progress
        for state, value in (
            ("pending", p.pending),
            ("done", p.done),
            ("failed", p.failed),
            ("skipped", p.skipped),
        ):
            metrics.WARMUP_DEVICES.labels(state).set(value)
