"""Each device's reachability (``bmc_health``), as DPS's `dpsctl check status` gives it per node:
last successful access, since when it has been inaccessible, the last access error, whether a check
is running, and the BMC certificate's expiry. Written by every completed request that reached its
device or failed to, by the drift sweep (every check is an access) and by readiness verifications
(the certificate); read by `devicectl devices health`, `devices show`, `status` and the per-device
metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ._database import by_code_point, chunks, one_of
from ._direct import Direct
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
    without reaching the device (skipped: busy, or another process's), changing nothing else.
    `by_request`: an ordinary request's access, not a check's: `sync_in_progress` stays as it is.
    `answered`: the device answered at the HTTP level, with the failure in `error` (a 503): it was
    reached (not inaccessible), and `error` is its last error."""

    device: str
    at: datetime
    error: str = ""
    syncing: bool = False
    ended: bool = False
    cert_not_after: datetime | None = None
    by_request: bool = False
    answered: bool = False


def _row(row: Any) -> BmcHealthRow:
    return BmcHealthRow(**dict(row._mapping))


#: statements built once (building one per access cost more than running it), run on the
#: cursor (`_direct`): every completed request records an access
_SINCE = Direct(
    sa.select(H.c.device, H.c.inaccessible_since).where(
        H.c.device.in_(sa.bindparam("b_devices", expanding=True))
    ),
    expanding="b_devices",
)
_INSERTS: dict[tuple[str, ...], Direct] = {}
_UPDATES: dict[tuple[str, ...], Direct] = {}


def _update(columns: tuple[str, ...]) -> Direct:
    """The UPDATE of these columns of one device's row (bound as `b_device`, `b_COLUMN`)."""
    statement = _UPDATES.get(columns)
    if statement is None:
        statement = Direct(
            sa.update(H)
            .where(H.c.device == sa.bindparam("b_device"))
            .values({c: sa.bindparam(f"b_{c}", type_=H.c[c].type) for c in columns})
        )
        _UPDATES[columns] = statement
    return statement


def _insert(columns: tuple[str, ...]) -> Direct:
    """The INSERT of a row with these columns."""
    statement = _INSERTS.get(columns)
    if statement is None:
        statement = _INSERTS[columns] = Direct(sa.insert(H), columns=columns)
    return statement


def record_many(conn: Connection, args: list[list[BmcAccess]]) -> list[None]:
    """The accesses in order; each device's row is written once, with what they left it (an
    INSERT or UPDATE per set of columns, executemany)."""
    accesses = [a for batch in args for a in batch]
    devices = list(dict.fromkeys(a.device for a in accesses))
    since: dict[str, datetime | None] = {}
    for part in chunks(devices):
        since.update({r.device: r.inaccessible_since for r in _SINCE.select(conn, part)})
    stored = set(since)
    rows: dict[str, dict[str, Any]] = {}
    for a in accesses:
        values: dict[str, Any] = {"updated_at": a.at}
        if not a.by_request:
            values["sync_in_progress"] = a.syncing
        if a.cert_not_after is not None:
            values["cert_not_after"] = a.cert_not_after
        if not (a.syncing or a.ended):
            if a.error and a.answered:  # reached, with an error: never inaccessible
                began = None
                values.update(inaccessible_since=None, last_error=a.error[:2000], last_error_at=a.at)
            elif a.error:  # the first failure of a run starts it; later ones keep its start
                began = since.get(a.device) or a.at
                values.update(inaccessible_since=began, last_error=a.error[:2000], last_error_at=a.at)
            else:
                began = None
                values.update(last_success_at=a.at, inaccessible_since=None)
            since[a.device] = began
        else:
            since.setdefault(a.device, None)
        rows.setdefault(a.device, {}).update(values)  # a later access's columns win
    inserts: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    updates: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for device, values in rows.items():
        columns = tuple(sorted(values))
        if device in stored:
            bound = {"b_device": device, **{f"b_{c}": v for c, v in values.items()}}
            updates.setdefault(columns, []).append(bound)
        else:
            inserts.setdefault(columns, []).append({"device": device, **values})
    for columns, group in updates.items():
        _update(columns).many(conn, group)
    for columns, group in inserts.items():
        _insert(("device", *columns)).many(conn, group)
    return [None for _ in args]


def list_health(
    conn: Connection, devices: Sequence[str] | None, limit: int, after: str = "", unreachable: bool = False
) -> list[BmcHealthRow]:
    """Rows by device id (code point order): after `after` (a page), of `devices` when given, only
    those whose last access failed when `unreachable`; at most `limit`."""
    key = by_code_point(conn, H.c.device)
    query = sa.select(H)
    if after:
        query = query.where(key > after)
    if unreachable:
        query = query.where(H.c.inaccessible_since.is_not(None))
    if devices is not None:
        query = query.where(one_of(conn, H.c.device, devices))
    return [_row(r) for r in conn.execute(query.order_by(key).limit(limit))]
