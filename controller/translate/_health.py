"""`bmc_health` (DPS `BMCHealthDeviceRequest`) <-> `HealthQuery`, and `HealthResult` <-> its response."""

from __future__ import annotations

import json

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from plugins.base import HealthCheck, HealthQuery, HealthResult

_Req = pb.DeviceControllerRequest
_Resp = pb.DeviceControllerResponse


def query_from_proto(msg: _Req.BMCHealthDeviceRequest) -> HealthQuery:
    """The fields as DPS 0.8+ sends them (0 means the default; the window is capped at 60 s).

    Read-only unless the request asks for a write cycle (`write_cycle`, and not `skip_writes`): a
    proto3 bool defaults to false, so an empty request never writes."""
    return HealthQuery(
        samples_per_telemetry=msg.samples_per_telemetry,
        skip_writes=msg.skip_writes or not msg.write_cycle,
        telemetry_interval_ms=msg.telemetry_interval_ms,
        write_resolution_timeout_ms=msg.write_resolution_timeout_ms,
    )


def query_to_proto(query: HealthQuery) -> _Req.BMCHealthDeviceRequest:
    return _Req.BMCHealthDeviceRequest(
        samples_per_telemetry=query.samples_per_telemetry,
        skip_writes=query.skip_writes,
        telemetry_interval_ms=query.telemetry_interval_ms,
        write_resolution_timeout_ms=query.write_resolution_timeout_ms,
        write_cycle=not query.skip_writes,
    )


def wants_write_cycle(msg: _Req.BMCHealthDeviceRequest) -> bool:
    """Whether a `bmc_health` request asks for a write cycle (see `query_from_proto`)."""
    return msg.write_cycle and not msg.skip_writes


def result_to_proto(result: HealthResult) -> _Resp.BMCHealthResponse:
    return _Resp.BMCHealthResponse(
        success=result.ok,
        error=result.error,
        verdict=result.verdict,
        checks=[
            _Resp.BMCHealthResponse.Check(
                name=c.name,
                status=c.status,
                detail=c.detail,
                evidence_json=json.dumps(dict(c.evidence), sort_keys=True, default=str),
            )
            for c in result.checks
        ],
    )


def result_from_proto(msg: _Resp.BMCHealthResponse, field: str) -> HealthResult:
    checks = []
    for i, c in enumerate(msg.checks):
        try:
            evidence = json.loads(c.evidence_json) if c.evidence_json else {}
            checks.append(
                HealthCheck.from_json(
                    {"name": c.name, "status": c.status, "detail": c.detail, "evidence": evidence}
                )
            )
        except ValueError as exc:
            raise ValueError(f"{field}.checks[{i}]: {exc}") from None
    # an error that is not the failed checks' own is why the checks could not run
    found = HealthResult(tuple(checks))
    failure = msg.error if not msg.success and msg.error != found.error else ""
    return HealthResult(tuple(checks), failure=failure)
