"""Each device's reachability (``bmc_health``), as DPS's `dpsctl check status` gives it per node:
last successful access, since when it has been inaccessible, the last access error, whether a check
is running, and the BMC certificate's expiry. Written by the drift sweep (every check is an access)
and by readiness verifications (the certificate); read by `devicectl devices health`, `devices
show`, `status` and the per-device metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ._database import chunks
from ._models import BMC_HEALTH

H = BMC_HEALTH


@dataclass(frozen=True, slots=True)
class BmcHealthRow:
    """One row of ``bmc_health``."""

    device: str
    last_success_at: datetime | None
    inaccessible_since: datetime | None
    last_error: str
    last_error_at: datetime | None
    sync_in_progress: bool
    cert_not_after: datetime | None
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class BmcAccess:
    """One access to a device: `error` empty when it answered. `cert_not_after` (when known) is
    recorded whatever the outcome; `syncing` marks a check as started and `ended` one that ended
    without reaching the device (skipped: busy, or another process's), changing nothing else."""

    device: str
    at: datetime
    error: str = ""
    syncing: bool = False
    ended: bool = False
    cert_not_after: datetime | None = None


def _row(row: Any) -> BmcHealthRow:
    return BmcHealthRow(**dict(row._mapping))


def record_many(conn: Connection, args: list[list[BmcAccess]]) -> list[None]:
    accesses = [a for batch in args for a in batch]
    devices = list(dict.fromkeys(a.device for a in accesses))
    since: dict[str, datetime | None] = {}
    for part in chunks(devices):
        query = sa.select(H.c.device, H.c.inaccessible_since).where(H.c.device.in_(list(part)))
        since.update({r.device: r.inaccessible_since for r in conn.execute(query)})
    for a in accesses:
        values: dict[str, Any] = {"updated_at": a.at, "sync_in_progress": a.syncing}
        if a.cert_not_after is not None:
            values["cert_not_after"] = a.cert_not_after
        if not (a.syncing or a.ended):
            if a.error:  # the first failure of a run starts it; later ones keep its start
                began = since.get(a.device) or a.at
                values.update(inaccessible_since=began, last_error=a.error[:2000], last_error_at=a.at)
            else:
                began = None
                values.update(last_success_at=a.at, inaccessible_since=None)
        if a.device in since:
            conn.execute(sa.update(H).where(H.c.device == a.device).values(**values))
        else:
            conn.execute(sa.insert(H).values(device=a.device, **values))
        if not (a.syncing or a.ended):
            since[a.device] = began
        else:
            since.setdefault(a.device, None)
    return [None for _ in args]


def list_health(conn: Connection, devices: Sequence[str] | None, limit: int) -> list[BmcHealthRow]:
    query = sa.select(H)
    if devices is not None:
        query = query.where(H.c.device.in_(list(devices)))
    return [_row(r) for r in conn.execute(query.order_by(H.c.device).limit(limit))]
