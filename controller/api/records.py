"""Store rows as admin API records: requests with their receipts, devices with what is in force
and their labels (their state JSON only when asked), verifications."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime

from google.protobuf import timestamp_pb2

from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller.api import selectors
from controller.desired.in_force import InForce, from_verification, in_force
from controller.desired.receipts import desired_records, in_force_record, write_records
from controller.inventory import DeviceEntry
from controller.store import BmcCheckRow, DesiredLimit, DeviceView, RequestView, VerificationRow

STATUS = {"queued": apb.QUEUED, "running": apb.RUNNING, "completed": apb.COMPLETED}


def ts(value: datetime | None) -> timestamp_pb2.Timestamp | None:
    if value is None:
        return None
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(value)
    return ts


def request_record(view: RequestView) -> apb.RequestRecord:
    record = apb.RequestRecord(
        request_id=view.request_id,
        device=view.device,
        kind=view.kind,
        trace_id=view.trace_id,
        status=STATUS.get(view.status, apb.REQUEST_STATUS_UNSPECIFIED),
        outcome=view.outcome or "",
        error=view.error or "",
        attempts=view.attempts,
        delivery_attempts=view.delivery_attempts or 0,
        delivery_error=view.delivery_error or "",
        accepted_at=ts(view.accepted_at),
        started_at=ts(view.started_at),
        finished_at=ts(view.finished_at),
        deadline_at=ts(view.deadline_at),
        delivered_at=ts(view.delivered_at),
        dead_lettered_at=ts(view.dead_lettered_at),
    )
    if view.response:
        record.response.ParseFromString(view.response)
    record.writes.extend(write_records(view.writes or ()))
    return record


def device_record(
    view: DeviceView,
    queued: int,
    entry: DeviceEntry | None,
    desired: list[DesiredLimit],
    *,
    state: bool = True,
    verified: BmcCheckRow | None = None,
) -> apb.DeviceRecord:
    """A device as the admin API shows it: what is in force and its labels; its state JSON (about
    9 KB on a GB200 node) only with `state`."""
    record = apb.DeviceRecord(
        id=view.id,
        plugin=view.plugin or "",
        model_json=json.dumps(view.model_json or {}).encode(),
        state_json=json.dumps(view.state_json).encode() if state and view.state_json is not None else b"",
        state_version=view.state_version,
        created_at=ts(view.created_at),
        updated_at=ts(view.updated_at),
        last_request_id=view.last_request_id or "",
        last_kind=view.last_kind or "",
        last_outcome=view.last_outcome or "",
        last_error=view.last_error or "",
        queued=queued,
        in_inventory=entry is not None,
        labels=entry.all_labels() if entry is not None else {},
    )
    record.desired.extend(desired_records(desired))
    shown = in_force(view.state_json, desired)
    source = ""
    if not shown.components and verified is not None and verified.finished_at is not None:
        shown = InForce(components=from_verification(verified.result))
        at = verified.finished_at.isoformat(timespec="seconds")
        source = f"read by verify {verified.check_id} at {at}" if shown.components else ""
    record.in_force.CopyFrom(in_force_record(shown, _unknown_reason(view), source))
    return record


def _unknown_reason(view: DeviceView) -> str:
    """Why no limit of the device is known (what `devices limits` says beside `unknown`)."""
    if view.last_outcome and view.last_outcome != "ok" and view.last_error:
        return f"the last request ({view.last_kind}) failed: {view.last_error}"
    if view.state_json is None:
        return "never read: no request has reached the device yet"
    return f"its {view.plugin or 'plugin'} state holds no power limit yet"


def selected(inventory: Mapping[str, DeviceEntry], selector: str) -> list[str] | None:
    """The inventory devices `selector` picks, sorted (None: no selector)."""
    return selectors.select(inventory.values(), selector) if selector.strip() else None


def verification_record(row: VerificationRow) -> apb.VerificationRecord:
    return apb.VerificationRecord(
        verification_id=row.verification_id,
        device=row.device,
        request_id=row.request_id,
        kind=row.kind,
        status=row.status,
        detail=row.detail or "",
        created_at=ts(row.created_at),
        due_at=ts(row.due_at),
        finished_at=ts(row.finished_at),
    )
