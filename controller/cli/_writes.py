"""Printing receipts and dry-run plans (one row per device write) and desired vs enforced limits."""

from __future__ import annotations

from collections.abc import Sequence

from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller.cli._render import table, when


def _watts(msg: apb.DeviceWrite | apb.DesiredLimit, field: str) -> str:
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
        wide_columns=("#", "target", "ms"),
    )


def render_plan(writes: Sequence[apb.DeviceWrite]) -> None:
    """A dry run's plan: the writes it would send and those it would skip, with what is in force now."""
    table(
        "",
        ("#", "component", "would", "now", "body", "note", "method", "target"),
        [
            (
                i + 1,
                w.component,
                "send" if w.status == "planned" else w.status,
                _watts(w, "before_watts"),
                w.body_json,
                w.note,
                w.method,
                w.target,
            )
            for i, w in enumerate(writes)
        ],
        wide_columns=("#", "method", "target"),
        cut_first=("note", "body"),
    )


def render_desired(rows: Sequence[apb.DesiredLimit]) -> None:
    table(
        "desired vs enforced",
        ("component", "desired", "enforced", "set by", "read at", "last drift", "drift"),
        [
            (
                r.component,
                _watts(r, "desired_watts") if r.HasField("desired_watts") else "no cap",
                _enforced(r),
                r.request_id,
                when(r.checked_at) if r.HasField("checked_at") else when(r.set_at),
                when(r.drift_at) if r.HasField("drift_at") else "never",
                r.drift_detail,
            )
            for r in rows
        ],
    )


def _enforced(r: apb.DesiredLimit) -> str:
    """The last drift check's reading; before any, the read-back of the write that set it (the
    desired value is that read-back), never "not read yet" for a limit just read back."""
    if r.HasField("enforced_watts"):
        return _watts(r, "enforced_watts")
    desired = _watts(r, "desired_watts") if r.HasField("desired_watts") else "no cap"
    return f"{desired} (read back when set)"
