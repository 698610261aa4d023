"""Dry run: plan a request on the device without writing, and return the exact writes it would make.

The plugin runs as for a real request, with `DeviceContext.dry_run` set: its write choke point
records each write as planned (resource, body, current value, the note on rounding and the
allowed range) and sends nothing; writes it would skip are listed with why. Nothing is journaled,
no state is stored and no response goes to the topology service. A dry run does not queue in the
device's lane: it only reads, so it never delays requests (a request running at the same moment
may make the plan stale, which a plan can always be).
"""

from __future__ import annotations

import asyncio
import logging
import time

from controller import translate
from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.api.validate import validate_request
from controller.config import Settings
from controller.desired.receipts import write_records
from controller.execution.runner import RequestRunner, receipts
from controller.inventory import deactivation_choice
from controller.observability.logs import clip
from plugins.base import DeviceContext, DeviceControllerError, WriteLog, run_operation

log = logging.getLogger(__name__)


class Planner:
    """Runs dry runs through the runner's device resolution and the device's plugin."""

    def __init__(self, runner: RequestRunner, settings: Settings) -> None:
        self._runner = runner
        self._settings = settings

    async def plan(self, msg: pb.DeviceControllerRequest) -> apb.DryRunResponse:
        """The plan for `msg`; bad input raises `InvalidRequestError` (the caller's error)."""
        validate_request(
            msg, max_json_bytes=self._settings.max_json_bytes, max_json_depth=self._settings.max_json_depth
        )
        kind, request = translate.request_from_proto(msg)
        timeout = float(msg.timeout_seconds or self._settings.device_call_timeout)
        writes = WriteLog(dry_run=True)
        try:
            resolved = await self._runner.resolve(msg.device, msg.device_model_json, msg.device_state_json)
            if not resolved.plugin.supports_dry_run:
                return _failed(
                    writes,
                    f"plugin {resolved.entry.plugin} cannot plan without writing (it does not support dry "
                    "runs); nothing was done",
                )
            request = deactivation_choice(kind, request, resolved.entry, self._settings)
            ctx = DeviceContext(
                device_id=msg.device,
                model=resolved.model,
                endpoint=resolved.endpoint,
                request_id=msg.request_id,
                trace_id=msg.trace_id,
                deadline=time.monotonic() + timeout,
                state=resolved.state,
                dry_run=True,
            )
            operation = run_operation(resolved.plugin, kind, ctx, request, writes)
            outcome = await asyncio.wait_for(operation, timeout)
        except TimeoutError:
            return _failed(writes, f"timed out after {timeout:.1f} s while planning")
        except DeviceControllerError as exc:
            return _failed(writes, str(exc))
        except Exception as exc:  # a plugin bug: one line, never a traceback to the caller
            log.exception("dry run of %s failed", kind.value)
            return _failed(writes, f"internal error while planning: {type(exc).__name__}: {clip(exc)}")
        response = translate.response_to_proto(
            kind,
            outcome.result,
            device=msg.device,
            request_id=msg.request_id,
            trace_id=msg.trace_id,
            ping_time=outcome.reached_at,
            ping_error=outcome.reach_error,
        )
        ok, error = translate.success_of(response)
        return apb.DryRunResponse(
            writes=write_records(receipts(outcome.writes) or ()),
            response=response,
            ok=ok,
            error=translate.without_writes(error),
        )


def _failed(writes: WriteLog, error: str) -> apb.DryRunResponse:
    return apb.DryRunResponse(writes=write_records(receipts(writes.entries()) or ()), ok=False, error=error)
