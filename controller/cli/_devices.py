"""`devices list`, `devices show` and `devices limits`: what is in force per device and component
(requested, enforced, allowed range, drift, resource groups), like `nvidia-smi --query-gpu=
power.limit` or `dpsctl resource-group list` (`controller.desired.in_force` reads it)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller.cli._render import as_dict, clip_cell, short_id, table, when, when_short
from controller.desired.in_force import Component, InForce, in_force


def view(d: apb.DeviceRecord) -> InForce:
    """What is in force: as the server read it (lists carry no state JSON), else from the state."""
    if d.HasField("in_force"):
        return from_record(d.in_force)
    try:
        state = json.loads(d.state_json) if d.state_json else None
    except ValueError:
        state = None  # not JSON: the limits the controller keeps still show
    return in_force(state, d.desired)


def from_record(record: apb.InForceView) -> InForce:
    def number(c: apb.ComponentInForce, name: str) -> float | None:
        return getattr(c, name) if c.HasField(name) else None

    return InForce(
        components=[
            Component(
                component=c.component,
                requested=number(c, "requested_watts"),
                enforced=number(c, "enforced_watts"),
                min=number(c, "min_watts"),
                max=number(c, "max_watts"),
                drift=c.drift,
                changed_at=c.changed_at,
                capped=c.capped if c.HasField("capped") else None,
                removed=c.removed,
            )
            for c in record.components
        ],
        resource_groups=list(record.resource_groups),
        policies=dict(record.policies),
        profiles={k: list(v.ids) for k, v in record.profiles.items()},
    )


def device_dict(d: apb.DeviceRecord) -> dict[str, Any]:
    """A device as JSON: its fields and what is in force (with why it is unknown, when it is)."""
    data = as_dict(d)
    data.pop("in_force", None)
    if not d.state_json:  # lists carry none (`devices show` has it): null, not ""
        data["state_json"] = None
    more = {"unknown_reason": d.in_force.unknown_reason, "source": d.in_force.source}
    return {**data, "in_force": {**dataclasses.asdict(view(d)), **more}}


def watts(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:.0f}" if value == int(value) else f"{value:g}"


def requested(c: Component) -> str:
    return "none" if c.removed else watts(c.requested)


def enforced(c: Component) -> str:
    """The limit in force; "1200 (no cap)" where the device reports none (its default)."""
    return f"{watts(c.enforced)} (no cap)".lstrip() if c.capped is False else watts(c.enforced)


def allowed(c: Component) -> str:
    return f"{watts(c.min)}..{watts(c.max)}" if c.min is not None or c.max is not None else ""


def caps(v: InForce) -> str:
    """A device's caps on one line: `node 5000/4980 gpu/0 700/700` (requested/enforced)."""
    return " ".join(
        f"{c.component} {watts(c.requested) or '-'}/{watts(c.enforced) or '-'}"
        for c in v.components
        if c.requested is not None or (c.enforced is not None and c.capped is not False)
    )


def devices_table(rows: Sequence[apb.DeviceRecord], *, wide: bool) -> None:
    views = [view(d) for d in rows]
    drifted = [",".join(c.component for c in v.components if c.drift == "drifted") for v in views]
    table(
        "devices",
        (
            "device",
            "plugin",
            "inventory",
            "state v",
            "last request",
            "kind",
            "outcome",
            "queued",
            "updated",
            "caps (requested/enforced W)",
            "resource groups",
            "drift",
            "error",
        ),
        (
            (
                d.id,
                d.plugin,
                "yes" if d.in_inventory else "no",
                d.state_version,
                short_id(d.last_request_id, wide),
                d.last_kind,
                d.last_outcome,
                d.queued,
                when(d.updated_at) if wide else when_short(d.updated_at),
                caps(v),
                ",".join(v.resource_groups),
                drift,
                clip_cell(d.last_error, wide),
            )
            for d, v, drift in zip(rows, views, drifted, strict=True)
        ),
        wide_columns=("state v", "caps (requested/enforced W)", "resource groups", "drift"),
        cut_first=("error",),
    )


def limits_table(rows: Sequence[apb.DeviceRecord]) -> None:
    """One row per device and component (`-o csv --no-headers` for scripts, as nvidia-smi's); a
    device with no limit known is one row, `unknown`, with why in the last column."""
    columns = ("device", "component", "requested", "enforced", "min", "max", "drift", "changed")
    table(
        "limits in force (W)",
        (*columns, "resource groups", "note"),
        (row for d in rows for row in _limit_rows(d)),
        cut_first=("note",),
    )


def _limit_rows(d: apb.DeviceRecord) -> list[tuple[str, ...]]:
    v = view(d)
    groups = ",".join(v.resource_groups)
    if not v.components:
        reason = d.in_force.unknown_reason or "no limit known"
        return [(d.id, "-", "", "unknown", "", "", "", "", groups, reason)]
    return [
        (
            d.id,
            c.component,
            requested(c),
            enforced(c),
            watts(c.min),
            watts(c.max),
            c.drift,
            c.changed_at,
            groups,
            d.in_force.source,
        )
        for c in v.components
    ]


def show_in_force(d: apb.DeviceRecord) -> None:
    """`devices show`: the in-force table and the active resource groups, policies and profiles."""
    v = view(d)
    if v.components:
        table(
            "in force",
            ("component", "requested W", "enforced W", "allowed W", "drift", "changed"),
            [
                (c.component, requested(c), enforced(c), allowed(c), c.drift, c.changed_at)
                for c in v.components
            ],
        )
    if v.refused:
        table("refused caps", ("component", "why"), sorted(v.refused.items()))
    policies = ", ".join(f"{scope}: {name}" for scope, name in sorted(v.policies.items()))
    profiles = ", ".join(f"{key}: {ids}" for key, ids in sorted(v.profiles.items()))
    table(
        "",
        ("active", "value"),
        [
            ("resource groups", ", ".join(v.resource_groups) or "none"),
            ("policies", policies or "none"),
            ("profiles", profiles or "none"),
        ],
    )


def reachability(h: apb.BmcHealth) -> str:
    """`ok`, `UNREACHABLE since …`, `reached, answered an error` (its last access was answered
    with an error of the BMC's own, a 503: see `last error`), or `never checked`."""
    if h.HasField("inaccessible_since"):
        return f"UNREACHABLE since {when(h.inaccessible_since)}"
    if h.last_error and h.HasField("last_error_at"):
        if (
            not h.HasField("last_success_at")
            or h.last_error_at.ToNanoseconds() > h.last_success_at.ToNanoseconds()
        ):
            return "reached, answered an error"
    return "ok" if h.HasField("last_success_at") else "never checked"


def health_table(rows: Sequence[apb.BmcHealth], *, wide: bool) -> None:
    """`devicectl devices health`: DPS's check status per device."""
    table(
        "BMC health",
        ("device", "reachable", "last success", "last error", "error at", "sync", "certificate expires"),
        [
            (
                h.device,
                reachability(h),
                when(h.last_success_at) if h.HasField("last_success_at") else "never",
                h.last_error if wide else clip_cell(h.last_error),
                when(h.last_error_at) if h.HasField("last_error_at") else "",
                "in progress" if h.sync_in_progress else "",
                when(h.cert_not_after) if h.HasField("cert_not_after") else "",
            )
            for h in rows
        ],
    )
