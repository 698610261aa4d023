"""Printing receipts and dry-run plans: one row per device write."""

from __future__ import annotations

from collections.abc import Sequence

from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller.cli._render import table


def _watts(msg: apb.DeviceWrite, field: str) -> str:
    return f"{getattr(msg, field):g} W" if msg.HasField(field) else "-"


def render_writes(writes: Sequence[apb.DeviceWrite], title: str = "device writes") -> None:
    table(
        title,
        ("#", "component", "method", "target", "body", "before", "after", "status", "ms", "note"),
        [
            (
                i + 1,
                w.component,
                w.method,
                w.target,
                w.body_json,
                _watts(w, "before_watts"),
                _watts(w, "after_watts"),
                w.status,
                f"{w.duration_ms:.1f}",
                w.note,
            )
            for i, w in enumerate(writes)
        ],
    )
