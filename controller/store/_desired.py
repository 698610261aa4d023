"""Desired state and drift: the limits each component should hold, and what checks found."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ._database import chunks, insert_for
from ._direct import Direct
from ._models import DESIRED_LIMITS as D
from ._models import DEVICES, REQUESTS
from ._models import STATE_AUDIT as A
from ._types import Completion, DesiredLimit, DriftCheck


def record(conn: Connection, completions: Sequence[Completion]) -> None:
    """Upsert each completion's desired limits (in the completion's transaction). The last drift
    found stays: it is history, and `devicectl devices show` reports it next to the new value.

    One executemany of a statement built once per backend for the whole batch: the completion
    path runs it for every request, and a statement per component showed in its profile."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}  # one row per component: the last one wins
    for c in completions:
        for name, watts in sorted((c.desired or {}).items()):
            rows[c.device, name] = {
                "device": c.device,
                "component": name,
                "watts": watts,
                "request_id": c.request_id,
                "set_at": c.finished_at,
                "drift_detail": "",
            }
    _record_statement(conn.dialect.name).many(conn, list(rows.values()))


@functools.cache
def _record_statement(dialect: str) -> Direct:
    stmt = insert_for(dialect, D)
    upsert = stmt.on_conflict_do_update(
        index_elements=[D.c.device, D.c.component],
        set_={name: stmt.excluded[name] for name in ("watts", "request_id", "set_at")},
    )
    return Direct(upsert, columns=("device", "component", "watts", "request_id", "set_at", "drift_detail"))


def desired_for(conn: Connection, device: str) -> list[DesiredLimit]:
    rows = conn.execute(sa.select(D).where(D.c.device == device).order_by(D.c.component))
    return [DesiredLimit(**dict(row._mapping)) for row in rows]


def desired_for_devices(conn: Connection, devices: list[str]) -> dict[str, list[DesiredLimit]]:
    out: dict[str, list[DesiredLimit]] = {}
    for part in chunks(devices):
        query = sa.select(D).where(D.c.device.in_(part)).order_by(D.c.device, D.c.component)
        for row in conn.execute(query):
            limit = DesiredLimit(**dict(row._mapping))
            out.setdefault(limit.device, []).append(limit)
    return out


def devices_with_desired(conn: Connection) -> list[str]:
    return [r[0] for r in conn.execute(sa.select(D.c.device).distinct().order_by(D.c.device))]


def request_ids_since(conn: Connection, device: str, prefix: str, since: datetime) -> list[str]:
    """The device's journaled request ids starting with `prefix`, accepted at `since` or later."""
    query = sa.select(REQUESTS.c.request_id).where(
        REQUESTS.c.device == device,  # ix_requests_device_seq narrows it to the device's rows
        REQUESTS.c.accepted_at >= since,
        REQUESTS.c.request_id.startswith(prefix, autoescape=True),
    )
    return [r[0] for r in conn.execute(query)]


def record_checks_many(conn: Connection, checks: list[DriftCheck]) -> list[None]:
    """Store what each check found; a drift also gets an audit row (kind `drift`)."""
    for check in checks:
        for component, enforced in check.enforced.items():
            values: dict[str, Any] = {"enforced_watts": enforced, "checked_at": check.at}
            if component in check.drifted:
                values.update(drift_at=check.at, drift_detail=check.drifted[component])
            conn.execute(
                sa.update(D).where(D.c.device == check.device, D.c.component == component).values(**values)
            )
        if check.drifted:
            version = conn.execute(
                sa.select(DEVICES.c.state_version).where(DEVICES.c.id == check.device)
            ).scalar()
            conn.execute(
                sa.insert(A).values(
                    device=check.device,
                    request_id=check.action.removeprefix("reapply: ")
                    if check.action.startswith("reapply: ")
                    else "",
                    kind="drift",
                    at=check.at,
                    state_version=int(version or 0),
                    summary=_summary(check),
                )
            )
    return [None for _ in checks]


def _summary(check: DriftCheck) -> dict[str, Any]:
    """The audit row's summary: what drifted, what was done, and (for a node read both ways) which
    path saw what."""
    summary: dict[str, Any] = {"drift": dict(check.drifted), "action": check.action}
    if check.paths:
        summary["paths"] = {c: dict(check.paths[c]) for c in check.drifted if c in check.paths}
        summary["findings"] = {c: list(f) for c, f in check.findings.items()}
    return summary
