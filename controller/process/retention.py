"""Retention: the `retention_*` settings as the store's policy, and serve's loop that prunes old
finished rows (controller/store/_retention.py) every `retention_interval`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from controller.config import Settings
from controller.process.supervise import Outage
from controller.store import RetentionPolicy, Store, prune

log = logging.getLogger("controller.app")


def retention_policy(s: Settings) -> RetentionPolicy:
    """The retention_* settings as the store's policy (serve's loop and `devicectl db prune`)."""
    return RetentionPolicy(
        journal_days=s.retention_journal_days,
        outbox_days=s.retention_outbox_days,
        dead_letter_days=s.retention_dead_letter_days,
        audit_days=s.retention_audit_days,
        batch=max(1, s.retention_batch),
    )


async def prune_forever(store: Store, settings: Settings, stopped: Callable[[], bool]) -> None:
    """Prune every retention_interval until `stopped()`; a failing pass is backed off, not fatal."""
    outage = Outage("retention", log)
    while not stopped():
        try:
            result = await prune(store, retention_policy(settings), datetime.now(UTC))
            outage.ok()
            if result.total:
                log.info("retention: deleted %s", result.deleted)
        except Exception as exc:
            await asyncio.sleep(outage.failed(exc))
            continue
        await asyncio.sleep(settings.retention_interval)
