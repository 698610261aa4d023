"""Readiness verifications as the admin API sends them and as `devicectl verify` shows them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from google.protobuf import json_format

from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller.desired.receipts import write_records
from plugins.base import HealthQuery

if TYPE_CHECKING:
    from controller.store import BmcCheckRow


def query_of(request: apb.StartVerifyRequest, *, write_cycle: bool) -> HealthQuery:
    """The plugin query of an admin request (0 means the default, as DPS sends it)."""
    return HealthQuery(
        samples_per_telemetry=request.samples_per_telemetry,
        skip_writes=not write_cycle,
        telemetry_interval_ms=request.telemetry_interval_ms,
        write_resolution_timeout_ms=request.write_resolution_timeout_ms,
        latency_samples=request.latency_samples or HealthQuery.latency_samples,
        latency_p95_ms=request.latency_p95_ms or HealthQuery.latency_p95_ms,
        force_writes=request.force,
    )


def record(row: BmcCheckRow) -> apb.BmcCheckRecord:
    msg = apb.BmcCheckRecord(
        check_id=row.check_id,
        batch_id=row.batch_id,
        device=row.device,
        write_cycle=row.write_cycle,
        status=row.status,
        verdict=row.verdict,
        error=row.error,
        result_json=json.dumps(row.result, sort_keys=True) if row.result is not None else "",
        writes=write_records(row.writes or ()),
    )
    for name in ("created_at", "started_at", "finished_at"):
        value = getattr(row, name)
        if value is not None:
            getattr(msg, name).FromDatetime(value)
    return msg


def batch(rows: Iterable[BmcCheckRow]) -> apb.VerifyBatch:
    return apb.VerifyBatch(checks=[record(r) for r in rows])


# ---- the CLI's views ----------------------------------------------------------------------------


def as_json(msg: apb.BmcCheckRecord) -> dict[str, Any]:
    """One verification for `-o json`: the record with its result decoded."""
    data = json_format.MessageToDict(msg, preserving_proto_field_name=True)
    data.pop("result_json", None)
    data["result"] = json.loads(msg.result_json) if msg.result_json else None
    return data


def progress_of(counts: Mapping[tuple[str, str], int]) -> apb.VerifyProgress:
    """A run's progress from its count per (status, verdict)."""
    out = apb.VerifyProgress(total=sum(counts.values()))
    verdicts = {"pass": "passed", "warn": "warned", "fail": "failed_checks"}
    for (status, verdict), n in counts.items():
        if status in ("queued", "running", "done", "failed", "interrupted"):
            setattr(out, status, getattr(out, status) + n)
        if status == "done" and verdict in verdicts:
            setattr(out, verdicts[verdict], getattr(out, verdicts[verdict]) + n)
    return out


def counted(checks: Iterable[apb.BmcCheckRecord]) -> apb.VerifyProgress:
    """The progress of these verifications (a server that sent no `progress`)."""
    counts: dict[tuple[str, str], int] = {}
    for c in checks:
        counts[(c.status, c.verdict)] = counts.get((c.status, c.verdict), 0) + 1
    return progress_of(counts)


def unfinished(p: apb.VerifyProgress) -> int:
    """How many verifications of the run are still queued or running."""
    return p.queued + p.running


def progress(p: apb.VerifyProgress) -> str:
    """`12/500 done (10 pass, 1 warn, 1 fail), 3 running, 485 queued, 0 failed, 0 interrupted`."""
    shown = {"pass": p.passed, "warn": p.warned, "fail": p.failed_checks}
    verdicts = ", ".join(f"{n} {k}" for k, n in shown.items() if n)
    rest = ", ".join(
        f"{n} {k}"
        for k, n in (
            ("running", p.running),
            ("queued", p.queued),
            ("failed", p.failed),
            ("interrupted", p.interrupted),
        )
    )
    return f"{p.done}/{p.total} done" + (f" ({verdicts})" if verdicts else "") + f", {rest}"


def summary_rows(checks: Sequence[apb.BmcCheckRecord]) -> list[list[str]]:
    """One row per device: id, device, status, verdict, and the checks that did not pass."""
    rows = []
    for c in checks:
        result = json.loads(c.result_json) if c.result_json else {}
        bad = [
            f"{x['name']}: {x['status']}" for x in result.get("checks", ()) if x["status"] in ("warn", "fail")
        ]
        why = c.error or "; ".join(bad) or "-"
        rows.append(
            [
                c.check_id,
                c.device,
                c.status + (" (write cycle)" if c.write_cycle else ""),
                c.verdict or "-",
                why,
            ]
        )
    return rows


def check_rows(msg: apb.BmcCheckRecord) -> list[list[str]]:
    """Every check of one verification: name, status, detail."""
    result: Mapping[str, Any] = json.loads(msg.result_json) if msg.result_json else {}
    return [[c["name"], c["status"], c["detail"]] for c in result.get("checks", ())]
