"""Which journaled requests this process queues, and when (docs/architecture.md, "Recovery and
the sweep" and "Several controllers, one PostgreSQL").

On SQLite (one process) it claims its own unfinished requests and a dead peer's orphans, at start
and at each sweep. On PostgreSQL an executor claims the unfinished requests of the shards it leases
(controller/cluster/shards.py): at start and at each sweep (its own rows that are in no lane), at each
acquisition (every unfinished row of the gained shards), and every `claim_interval` (rows other
controllers journaled in its shards). Claimed rows go into their device's lane by `seq`.

A gained shard's unfinished write cycles are only marked in the lease round (one database read:
their devices are pending, so no request of theirs runs before its restore); the restores run in a
task of their own, each holding its device's lane, so a slow BMC never holds the lease renewal up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from controller.cluster.shards import ShardLeases, Shards
from controller.config import Settings
from controller.execution.dispatch import Dispatcher, Job, job_of
from controller.execution.runner import RequestRunner
from controller.process.supervise import Outage
from controller.store import JournalRow, Store

log = logging.getLogger(__name__)


class Claims:
    """Claims journaled requests for this process and queues them on the dispatcher."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        dispatcher: Dispatcher,
        runner: RequestRunner,
        shards: Shards,
        role: str,
    ) -> None:
        self._store = store
        self._settings = settings
        self._dispatcher = dispatcher
        self._runner = runner
        self._shards = shards
        self._role = role
        self._me = settings.instance_id
        #: restores of gained shards' unfinished write cycles (apart from the lease rounds)
        self._restores: set[asyncio.Task[None]] = set()

    async def recover(self) -> int:
        """Queue journaled requests that never finished: on PostgreSQL those of the shards we
        lease, on SQLite ours or those orphaned by a dead peer."""
        if isinstance(self._shards, ShardLeases):
            rows = await self._store.claim_shards(self._me, self._shards.runnable())
        else:
            await self._store.heartbeat(self._me, self._role)  # before the claim: see `queue`
            rows = await self._store.claim_unfinished(self._me, self._settings.lease_ttl)
        queued = await self.queue(rows)
        if queued:
            log.info("recovery: %d unfinished requests queued again", queued)
        return queued

    async def queue(self, rows: list[JournalRow]) -> int:
        """Queue claimed journal rows not already in a lane; how many were queued.

        Called as soon as the claim returns, and nothing is awaited before every row is queued:
        a job stays known to the dispatcher until its completion committed, and claims and
        completions are written by one writer whose results come back in commit order, so a
        claim that saw a job unfinished returns while the job is still known. A job finishing
        during an await in between would be queued again though completed (run twice, or refused
        as superseded by a newer one)."""
        queued = 0
        full: list[Job] = []
        for row in rows:
            if self._dispatcher.knows(row.request_id):
                continue
            job = job_of(row)
            if job is None:
                continue
            if not self._dispatcher.submit(job):
                full.append(job)
            queued += 1
        for job in full:
            await self._runner.reject(job, "device queue full during recovery; request not run")
        return queued

    async def gained(self, shards: frozenset[int]) -> None:
        """Shards acquired (or renewed after their lease had lapsed here): another process may
        have changed their devices, so the runner's copies go; their unfinished requests are ours.
        Their devices' unfinished write cycles are marked pending first (no request of such a
        device runs before its restore) and restored in a task of their own, never in this round
        (a read failure raises: the round claims these shards again next time)."""
        self._runner.forget_devices()
        cycles = self._runner.write_cycles
        devices = await cycles.hold(lambda d: self._shards.shard_for(d) in shards)
        self._restore(devices)
        queued = await self.queue(await self._store.claim_shards(self._me, sorted(shards)))
        if queued:
            log.info("%d unfinished requests of gained shards queued", queued)

    def _restore(self, devices: list[str]) -> None:
        """Restore these devices' unfinished write cycles in a task of their own."""
        if devices:
            cycles = self._runner.write_cycles
            task = asyncio.create_task(cycles.restore_held(devices, self._restoring), name="restore")
            self._restores.add(task)
            task.add_done_callback(self._restores.discard)

    @contextlib.asynccontextmanager
    async def _restoring(self, device: str) -> AsyncIterator[None]:
        """Held while a gained journal of `device` is restored: the device's lane (nothing else
        writes the node meanwhile), and its shard counted busy (its lease is not handed on)."""
        async with self._dispatcher.exclusive(device):
            with self._runner.working_in(self._shards.shard_for(device)):
                yield

    def stop_restores(self) -> list[asyncio.Task[None]]:
        """At a stop: cancel the restores of gained shards' journals (a journal not restored stays
        open, for the next holder); the tasks, to wait for."""
        tasks = list(self._restores)
        for task in tasks:
            task.cancel()
        return tasks

    async def poll(self) -> None:
        """Queue the requests other controllers journaled in our shards, every claim_interval."""
        outage = Outage("claiming journaled requests", log)
        interval = max(self._settings.claim_interval, 0.01)
        while True:
            await asyncio.sleep(interval)
            shards = self._shards.runnable()
            if not shards:
                continue
            try:
                rows = await self._store.claim_shards(self._me, shards, others_only=True)
                outage.ok()
            except Exception as exc:
                await asyncio.sleep(outage.failed(exc))
                continue
            await self.queue(rows)

    async def sweep(self) -> None:
        """Sweep the journal: unfinished requests in no lane (an ack that failed after its commit,
        a peer's orphans) are queued again, by seq (see dispatch), and unfinished write cycles due
        to be restored again (`WriteCycles.due`: a failed restore, or a lost test write waited
        out) are restored. On SQLite this also renews our liveness row; on PostgreSQL the shard
        lease rounds do."""
        s = self._settings
        interval = max(min(s.lease_ttl / 3, s.sweep_interval), 0.2)
        if isinstance(self._shards, ShardLeases):
            interval = max(s.sweep_interval, 0.2)
        outage = Outage("lease renewal and journal sweep", log)
        while True:
            await asyncio.sleep(interval)
            self._restore(self._runner.write_cycles.due())
            try:
                await self.recover()
                outage.ok()
            except Exception as exc:
                await asyncio.sleep(outage.failed(exc))
