"""Shadow mode (DPS 0.11's global shadow mode): every request is validated, planned and recorded, and
answered; no write reaches a device.

DPS: "Supported power-setting operations are acknowledged without changing hardware limits", and
required reads continue. Here every request runs as a dry run (`DeviceContext.dry_run`): the
plugin's write choke point records each write it would make and sends nothing, and
`plugins.base.WriteLog.write` refuses any write a choke point forgot to plan (so do the Redfish
client's `patch`/`post`; an out-of-process plugin built on `plugins.base` gets the same log in its
own process). The controller then checks the receipts an operation returns: one that says a
write was sent fails the request as a shadow-mode violation. A plugin that cannot plan without
writing (`supports_dry_run` false; an out-of-process plugin is true only when its `Capabilities`
RPC vouches for it, as every plugin served by `plugins.base.serving` does for a plugin that plans)
is not called for a request that may write. The plugin state and the desired limits
are not stored (nothing changed on the device), and every receipt's status is `shadow`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from controller import translate
from controller.desired.limits import is_internal
from controller.desired.receipts import receipts, write_outcome
from controller.execution.dispatch import Job
from controller.store import Completion, LeaseFence
from plugins.base import DevicePlugin, DeviceWrite, Outcome, RequestKind
from plugins.base.kinds import kind_of

log = logging.getLogger(__name__)

#: the status of every receipt a request made in shadow mode (nothing was sent)
SHADOW_STATUS = "shadow"
#: the note on a request answered in shadow mode (its error text: the outcome stays ok)
ACKNOWLEDGED = "shadow mode: acknowledged without changing hardware limits"


def refusal(kind: RequestKind, request: Any, plugin: DevicePlugin, plugin_name: str) -> str:
    """Why this request is not run in shadow mode ('' when it is run, as a plan)."""
    if kind is RequestKind.BMC_HEALTH and not getattr(request, "skip_writes", True):
        return (
            "shadow mode: the readiness check's write cycle was not run (no write is sent in shadow "
            "mode); ask for the read-only checks (skip writes)"
        )
    if kind_of(kind).reads_only or plugin.supports_dry_run:
        return ""
    return (
        f"shadow mode: plugin {plugin_name} cannot plan without writing (it does not support dry runs), "
        "so it was not called; nothing was written"
    )


def shadow_receipts(writes: Sequence[DeviceWrite]) -> tuple[DeviceWrite, ...]:
    """The receipts as recorded in shadow mode: each planned write's status `shadow`, its note
    saying it was not sent. Skipped writes keep `skipped`; a sent one keeps its status (see `sent`)."""
    out = []
    for write in writes:
        if write.status == "planned":
            note = "not sent (shadow mode)" + (f"; {write.note}" if write.note else "")
            write = dataclasses.replace(write, status=SHADOW_STATUS, note=note)
        out.append(write)
    return tuple(out)


def sent(writes: Sequence[DeviceWrite]) -> list[DeviceWrite]:
    """Receipts that say a write left for a device (in shadow mode: a violation)."""
    return [w for w in writes if w.status != SHADOW_STATUS and write_outcome(w) is not None]


def violation(writes: Sequence[DeviceWrite]) -> str:
    """The error of a request whose plugin sent a write in shadow mode ('' when none did)."""
    bad = sent(writes)
    if not bad:
        return ""
    targets = ", ".join(f"{w.method} {w.target} ({w.status})" for w in bad[:5])
    return (
        f"shadow mode violated: the plugin reports {len(bad)} write(s) sent ({targets}); "
        "they may have changed the device"
    )


def acknowledged(writes: Sequence[DeviceWrite]) -> str:
    """The note on a request answered in shadow mode."""
    count = sum(1 for w in writes if w.status == SHADOW_STATUS)
    return f"{ACKNOWLEDGED} ({count} write{'' if count == 1 else 's'} not sent)"


def answer(
    job: Job,
    plugin: str,
    outcome: Outcome[Any],
    request: Any,
    fence: LeaseFence | None,
    started_at: datetime | None,
) -> Completion:
    """The completion of a request planned in shadow mode: the response the plan makes, its receipts
    (marked shadow), the note that nothing was written; the device's state and desired limits are
    left as they were (nothing changed on the device)."""
    kind = job.kind
    writes = shadow_receipts(outcome.writes)
    violated = violation(writes)
    if violated:  # a plugin that wrote anyway: the request fails, with what it reports sent
        log.error("%s: %s", job.request_id, violated)
        response = translate.error_response(
            kind,
            violated,
            device=job.device,
            request_id=job.request_id,
            trace_id=job.trace_id,
            request=request,
        )
        ok, error, note = False, violated, ""
    else:
        response = translate.response_to_proto(
            kind,
            outcome.result,
            device=job.device,
            request_id=job.request_id,
            trace_id=job.trace_id,
            ping_time=outcome.reached_at,
            ping_error=outcome.reach_error,
        )
        response = translate.bounded_response(kind, response, request=request)
        ok, error = translate.success_of(response)
        note = acknowledged(writes)
    return Completion(
        request_id=job.request_id,
        device=job.device,
        outcome="ok" if ok else "failed",
        error=f"{error} ({note})" if error and note else (error or note),
        finished_at=datetime.now(UTC),
        response=response.SerializeToString(),
        new_state=None,
        touch_device=True,
        plugin=plugin,
        trace_id=job.trace_id,
        kind=kind.value,
        writes=receipts(writes),
        internal=is_internal(job.request_id),
        fence=fence,
        started_at=started_at,
    )
