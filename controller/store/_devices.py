"""Devices: inventory sync and the device views (a completion's state change: `_state_changes`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ._database import by_code_point, dialect_insert, one_of
from ._models import DEVICES, STATE_AUDIT, UTCDateTime
from ._types import AuditView, DeviceUpsert, DeviceView

D = DEVICES
A = STATE_AUDIT

_DEVICE_FIELDS = tuple(c.name for c in D.columns)


def normalise_json(value: Any) -> Any:
    """The value as it will read back from a JSON column (tuples become lists, keys strings...).

    Comparing normalised values keeps "did the state change?" exact: a state that only differs
    in Python-side representation is not a change, and a non-JSON value fails here, loudly.
    """
    return json.loads(json.dumps(value, allow_nan=False))


_INVENTORY_UPDATE = (
    sa.update(D)
    .where(D.c.id == sa.bindparam("b_id"))
    .values(
        plugin=sa.bindparam("b_plugin"),
        model_json=sa.bindparam("b_model_json", type_=D.c.model_json.type),
        in_inventory=sa.bindparam("b_in_inventory", type_=sa.Boolean()),
        updated_at=sa.bindparam("b_updated_at", type_=UTCDateTime()),
    )
)


def sync_inventory_one(conn: Connection, devices: Sequence[DeviceUpsert]) -> None:
    """Make the devices table match an inventory; states and request history are kept."""
    now = datetime.now(UTC)
    listed = {d.id: d for d in devices}  # a later entry for the same id wins
    existing = {
        row.id: row for row in conn.execute(sa.select(D.c.id, D.c.plugin, D.c.model_json, D.c.in_inventory))
    }
    inserts: list[dict[str, Any]] = []
    updates: list[dict[str, Any]] = []
    for d in listed.values():
        model = normalise_json(d.model_json)
        row = existing.get(d.id)
        if row is None:
            inserts.append(
                {
                    "id": d.id,
                    "plugin": d.plugin,
                    "model_json": model,
                    "state_json": None,
                    "state_version": 0,
                    "created_at": now,
                    "updated_at": now,
                    "last_request_id": "",
                    "last_kind": "",
                    "last_outcome": "",
                    "last_error": "",
                    "in_inventory": d.in_inventory,
                }
            )
        elif (row.plugin, row.model_json, row.in_inventory) != (d.plugin, model, d.in_inventory):
            updates.append(
                {
                    "b_id": d.id,
                    "b_plugin": d.plugin,
                    "b_model_json": model,
                    "b_in_inventory": d.in_inventory,
                    "b_updated_at": now,
                }
            )
    for device_id, row in existing.items():
        if device_id not in listed and row.in_inventory:
            updates.append(
                {
                    "b_id": device_id,
                    "b_plugin": row.plugin,
                    "b_model_json": row.model_json,
                    "b_in_inventory": False,
                    "b_updated_at": now,
                }
            )
    if inserts:
        # Upsert, not insert: another controller may be syncing the same inventory right now.
        stmt = dialect_insert(conn, D)
        stmt = stmt.on_conflict_do_update(
            index_elements=[D.c.id],
            set_={
                "plugin": stmt.excluded.plugin,
                "model_json": stmt.excluded.model_json,
                "in_inventory": stmt.excluded.in_inventory,
                "updated_at": stmt.excluded.updated_at,
            },
        )
        conn.execute(stmt, inserts)
    if updates:
        conn.execute(_INVENTORY_UPDATE, updates)


def sync_inventory_many(conn: Connection, args: list[Sequence[DeviceUpsert]]) -> list[None]:
    """Group-commit handler for ``sync_inventory`` (each inventory applied in turn)."""
    for devices in args:
        sync_inventory_one(conn, devices)
    return [None for _ in args]


# --- reads ----------------------------------------------------------------------------------------


def _device_view(row: Any) -> DeviceView:
    m = row._mapping
    return DeviceView(**{name: m[name] for name in _DEVICE_FIELDS})


def device_state(conn: Connection, device_id: str) -> tuple[dict[str, Any] | None, int]:
    """The device's state and its version; ``(None, 0)`` for an unknown device."""
    row = conn.execute(sa.select(D.c.state_json, D.c.state_version).where(D.c.id == device_id)).first()
    if row is None:
        return None, 0
    return row.state_json, row.state_version


def get_devices(conn: Connection, device_ids: Sequence[str]) -> dict[str, DeviceView]:
    """The devices of `device_ids` that exist, by id (`CoalescedReads`' query)."""
    rows = conn.execute(sa.select(D).where(one_of(conn, D.c.id, device_ids)))
    return {row.id: _device_view(row) for row in rows}


def list_devices(
    conn: Connection, limit: int, after: str = "", ids: Sequence[str] | None = None
) -> list[DeviceView]:
    """Devices ordered by id (code point order): after `after`, of `ids` when given."""
    key = by_code_point(conn, D.c.id)  # the order of Python's sorted ids and of the page token
    query = sa.select(D).where(key > after)
    if ids is not None:
        query = query.where(one_of(conn, D.c.id, ids))
    return [_device_view(row) for row in conn.execute(query.order_by(key).limit(limit))]


def list_audit(conn: Connection, device: str | None, limit: int) -> list[AuditView]:
    """State changes, newest first."""
    query = sa.select(A)
    if device is not None:
        query = query.where(A.c.device == device)
    query = query.order_by(A.c.id.desc()).limit(limit)
    return [AuditView(**dict(row._mapping)) for row in conn.execute(query)]
