"""An out-of-process plugin gets the dry-run flag and returns its receipts over the plugin protocol."""

from __future__ import annotations

from plugins.base import AllocationResult, DeviceContext, DeviceWrite, Outcome, RequestKind
from plugins.base.kinds import KINDS
from plugins.base.wire import context_from_pb, outcome_from_pb, outcome_to_pb, request_to_pb
from tests.controller.desired.test_receipts import gpu_policy


def test_dry_run_and_receipts_cross_the_plugin_protocol() -> None:
    ctx = DeviceContext(device_id="n1", request_id="r1", dry_run=True)
    assert context_from_pb(request_to_pb(ctx, gpu_policy(1600))).dry_run is True
    assert context_from_pb(request_to_pb(DeviceContext(device_id="n1"), gpu_policy(1600))).dry_run is False

    writes = (
        DeviceWrite("/redfish/v1/Chassis/X/EnvironmentMetrics", "PATCH", {"SetPoint": 500},
                    "GPU 0", 1200.0, 500.0, "200", 3.5, "allowed 200..1200 W"),
        DeviceWrite("nvmlDeviceSetPowerManagementLimit(GPU 1)", "nvmlDeviceSetPowerManagementLimit",
                    {"scope": "gpu", "limit_mw": 400000}, "GPU 1", 700.0, None, "planned"),
    )  # fmt: skip
    kind = KINDS[RequestKind.GPU_POLICIES_UPDATE]
    back = outcome_from_pb(kind, outcome_to_pb(Outcome(AllocationResult(ok=True), writes=writes)))
    assert back.writes == writes
    assert outcome_from_pb(kind, outcome_to_pb(Outcome(AllocationResult(ok=True)))).writes == ()
