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
    try:
        state = json.loads(d.state_json) if d.state_json else None
    except ValueError:
        state = None  # not JSON: the limits the controller keeps still show
    return in_force(state, d.desired)


def device_dict(d: apb.DeviceRecord) -> dict[str, Any]:
    """A device as JSON: its fields and what is in force."""
    return {**as_dict(d), "in_force": dataclasses.asdict(view(d))}


def watts(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:.0f}" if value == int(value) else f"{value:g}"


def allowed(c: Component) -> str:
    return f"{watts(c.min)}..{watts(c.max)}" if c.min is not None or c.max is not None else ""


def caps(v: InForce) -> str:
    """A device's caps on one line: `node 5000/4980 gpu/0 700/700` (requested/enforced)."""
    return " ".join(
        f"{c.component} {watts(c.requested) or '-'}/{watts(c.enforced) or '-'}"
        for c in v.components
        if c.requested is not None or c.enforced is not None
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
    """One row per device and component (`-o csv --no-headers` for scripts, as nvidia-smi's)."""
    table(
        "limits in force (W)",
        ("device", "component", "requested", "enforced", "min", "max", "drift", "changed", "resource groups"),
        (
            (
                d.id,
                c.component,
                watts(c.requested),
                watts(c.enforced),
                watts(c.min),
                watts(c.max),
                c.drift,
                c.changed_at,
                ",".join(v.resource_groups),
            )
            for d in rows
            for v in (view(d),)
            for c in v.components
        ),
    )


def show_in_force(d: apb.DeviceRecord) -> None:
    """`devices show`: the in-force table and the active resource groups, policies and profiles."""
    v = view(d)
    if v.components:
        table(
            "in force",
            ("component", "requested W", "enforced W", "allowed W", "drift", "changed"),
            [
                (c.component, watts(c.requested), watts(c.enforced), allowed(c), c.drift, c.changed_at)
                for c in v.components
            ],
        )
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
    """`ok`, `UNREACHABLE since …`, or `never checked`."""
    if h.HasField("inaccessible_since"):
        return f"UNREACHABLE since {when(h.inaccessible_since)}"
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
