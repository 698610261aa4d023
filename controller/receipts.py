"""Receipts and desired state on the admin API: stored rows as `DeviceWrite` / `DesiredLimit` messages."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller.store import DesiredLimit
from controller.translate import datetime_to_timestamp


def write_records(writes: Iterable[Mapping[str, Any]]) -> list[apb.DeviceWrite]:
    """Stored receipts (the JSON of `plugins.base.DeviceWrite`) as admin messages."""
    out = []
    for w in writes:
        msg = apb.DeviceWrite(
            target=str(w.get("target", "")),
            method=str(w.get("method", "")),
            body_json=json.dumps(w.get("body") or {}, sort_keys=True),
            component=str(w.get("component", "")),
            status=str(w.get("status", "")),
            duration_ms=float(w.get("duration_ms") or 0.0),
            note=str(w.get("note", "")),
        )
        if isinstance(w.get("before"), int | float):
            msg.before_watts = float(w["before"])
        if isinstance(w.get("after"), int | float):
            msg.after_watts = float(w["after"])
        out.append(msg)
    return out


def desired_records(rows: Iterable[DesiredLimit]) -> list[apb.DesiredLimit]:
    """Desired limits with what the last drift check found."""
    out = []
    for row in rows:
        msg = apb.DesiredLimit(
            component=row.component,
            request_id=row.request_id,
            set_at=datetime_to_timestamp(row.set_at),
            drift_detail=row.drift_detail,
        )
        if row.watts is not None:
            msg.desired_watts = row.watts
        if row.enforced_watts is not None:
            msg.enforced_watts = row.enforced_watts
        if row.checked_at is not None:
            msg.checked_at.CopyFrom(datetime_to_timestamp(row.checked_at))
        if row.drift_at is not None:
            msg.drift_at.CopyFrom(datetime_to_timestamp(row.drift_at))
        out.append(msg)
    return out
