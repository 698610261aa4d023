"""Runs the follow-up checks plugins ask for (e.g. that enabled workload profiles took effect)
and records each outcome in the verifications table, visible through the admin API and CLI."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta

from controller.execution.runner import RequestRunner
from controller.observability.logs import request_context
from controller.process.supervise import Outage
from controller.store import Store, VerificationRow
from plugins.base import DeviceContext, DeviceControllerError, PendingVerification

log = logging.getLogger(__name__)


class Verifier:
    def __init__(self, store: Store, runner: RequestRunner, *, check_timeout: float = 30.0) -> None:
        self._store = store
        self._runner = runner
        self._check_timeout = check_timeout

    async def run(self, interval: float = 0.5) -> None:
        outage = Outage("verifier", log)
        while True:
            try:
                await self.pass_once()
                outage.ok()
                await asyncio.sleep(interval)
            except Exception as exc:  # a database outage must not end verification for good
                await asyncio.sleep(max(outage.failed(exc), interval))

    async def pass_once(self) -> int:
        # each executor checks the verifications of the shards it leases (all: None)
        due = await self._store.due_verifications(
            datetime.now(UTC), limit=100, shards=self._runner.shards.serving()
        )
        await asyncio.gather(*(self._check(row) for row in due))
        return len(due)

    async def _check(self, row: VerificationRow) -> None:
        with request_context(row.device, row.request_id, ""):
            checks = row.checks + 1
            try:
                resolved = await self._runner.resolve(row.device, b"", b"")
                ctx = DeviceContext(
                    device_id=row.device,
                    model=resolved.model,
                    endpoint=resolved.endpoint,
                    request_id=row.request_id,
                    deadline=time.monotonic() + self._check_timeout,
                    state=resolved.state,
                )
                pending = PendingVerification(row.verification_id, 0.0, row.payload, row.max_checks)
                result = await asyncio.wait_for(resolved.plugin.verify(ctx, pending), self._check_timeout)
                done, status, detail = result.done, result.status, result.detail
            except (DeviceControllerError, TimeoutError) as exc:
                done, status, detail = False, "pending", f"check {checks} failed: {exc or 'timed out'}"
            now = datetime.now(UTC)
            if not done and checks >= row.max_checks:
                done, status = True, "failed"
                detail = f"not verified after {checks} checks: {detail}"
            if done:
                log.info("verification %s: %s %s", row.verification_id, status, detail)
            await self._store.update_verification(
                row.verification_id,
                status,
                detail,
                due_at=None if done else now + timedelta(seconds=min(2**checks, 30)),
                checks=checks,
                finished_at=now if done else None,
            )
