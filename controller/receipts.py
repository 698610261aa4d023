"""Receipts on the admin API: the device writes stored with a request, as `DeviceWrite` messages."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from controller._proto.devicecontroller.v1 import admin_pb2 as apb


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
