"""Receipts and desired state on the admin API: stored rows as `DeviceWrite` / `DesiredLimit` messages;
what the receipts of a failed operation say it changed."""

from __future__ import annotations

import dataclasses
import json
import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller.desired.in_force import InForce
from controller.translate import datetime_to_timestamp
from plugins.base import DeviceWrite, WriteOutcome
from plugins.base.codec import encode

if TYPE_CHECKING:
    from controller.store import DesiredLimit


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


#: statuses a gateway (a proxy in front of the device, or its own front end) answers when it gave up
_GATEWAY = frozenset({"502", "503", "504"})


def write_outcome(write: DeviceWrite) -> WriteOutcome | None:
    """What one receipt says its write did (None: planned, skipped or shadow, nothing was sent)."""
    if write.method == "-" or write.status in ("planned", "skipped", "shadow"):
        return None
    status = write.status
    if status == "ok" or status.startswith("ok (") or (status.isdigit() and 200 <= int(status) < 300):
        return WriteOutcome.WRITTEN  # "ok (read back; ...)": a read showed that an unknown write landed
    answered = status.removeprefix("error: ")
    if answered in _GATEWAY or status.startswith("unknown"):
        return WriteOutcome.UNKNOWN  # a gateway gave up on it: the device may have applied it
    if answered.isdigit() and int(answered) >= 400:
        return WriteOutcome.NOT_WRITTEN  # the device answered, refusing it
    return WriteOutcome.UNKNOWN  # cancelled, cut off or timed out after it was sent


def failed_writes_note(writes: Iterable[DeviceWrite]) -> str:
    """For a request that failed as a whole (a deadline, an error the plugin raised): what its
    writes did, per component, so that the response never says less than what happened."""
    outcomes: dict[str, list[WriteOutcome]] = {}
    read_back: dict[str, float | None] = {}  # the last accepted write's read-back
    for write in writes:
        outcome = write_outcome(write)
        if outcome is None:
            continue
        component = write.component or write.target
        outcomes.setdefault(component, []).append(outcome)
        if outcome is WriteOutcome.WRITTEN:
            read_back[component] = write.after
    parts = []
    for component, seen in outcomes.items():
        outcome = WriteOutcome.of_all(seen)
        after = read_back.get(component) if outcome is WriteOutcome.WRITTEN else None
        parts.append(
            f"{component} {outcome.value}" + (f", {after:g} W read back" if after is not None else "")
        )
    if not parts:
        return ""
    return "writes before the failure: " + "; ".join(parts)


def receipts(writes: Sequence[DeviceWrite]) -> list[dict[str, Any]] | None:
    """Receipts as stored with the journal (JSON objects), None when nothing was written.

    `encode`'s output, field by field without its generic dispatch (every write of every request):
    the fields are strings and numbers, the body any JSON value."""
    out = [dict(zip(_WRITE_FIELDS, _write_fields(w), strict=True)) for w in writes]
    for entry, w in zip(out, writes, strict=True):
        entry["body"] = encode(w.body)  # JSON's own types by exact type first
    return out or None


_WRITE_FIELDS = tuple(f.name for f in dataclasses.fields(DeviceWrite))
_write_fields = operator.attrgetter(*_WRITE_FIELDS)


def in_force_record(view: InForce, unknown_reason: str = "", source: str = "") -> apb.InForceView:
    """What is in force (`controller.desired.in_force`) as the admin message lists carry instead of
    the whole state JSON; `unknown_reason` says why no component is known."""
    out = apb.InForceView(
        resource_groups=view.resource_groups,
        policies=view.policies,
        unknown_reason="" if view.components else unknown_reason,
        source=source,
    )
    for c in view.components:
        row = out.components.add(
            component=c.component, drift=c.drift, changed_at=c.changed_at, removed=c.removed
        )
        if c.capped is not None:
            row.capped = c.capped
        for name, value in (
            ("requested_watts", c.requested),
            ("enforced_watts", c.enforced),
            ("min_watts", c.min),
            ("max_watts", c.max),
        ):
            if value is not None:
                setattr(row, name, value)
    for key, ids in view.profiles.items():
        out.profiles[key].ids.extend(ids)
    return out
