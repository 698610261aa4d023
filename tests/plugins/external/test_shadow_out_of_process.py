"""Shadow mode and dry runs hold for out-of-process plugins: the plugin process honours the host's
dry run at its write choke point and sends its planned receipts back; a controller in shadow mode
does not call a plugin it cannot vouch for with a request that may write, and its reads stay live."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from google.protobuf import empty_pb2

from bmcsim import SimulatorFleet
from controller import translate
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import policy_pb2 as pp
from controller.delivery.sink import TopologySink
from controller.execution import shadow
from plugins.base import Credentials, DeviceContext, Endpoint, RequestKind, run_operation
from tests.controller.desired.test_receipts import node_policy
from tests.plugins.external.conftest import plugin_table, serve_command, spec
from tests.plugins.redfish.harness import FAST, model_json

R = pb.DeviceControllerRequest


def _writes(fleet: SimulatorFleet) -> int:
    return sum(
        n
        for bmc in fleet.bmcs
        for (method, path), n in bmc.stats.calls.items()
        if method in ("PATCH", "POST") and not path.startswith("/redfish/v1/SessionService")
    )


async def test_an_out_of_process_plugin_plans_a_dry_run_and_sends_nothing(
    remote: Any, tmp_path: Path
) -> None:
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        bmc = fleet.bmcs[0]
        plugin = await remote(spec("redfish", serve_command("redfish")))
        ctx = DeviceContext(
            device_id="node001",
            model=model_json(bmc),
            endpoint=Endpoint(
                url=bmc.url,
                credentials=Credentials(bmc.username, bmc.password),
                ca_bundle=str(fleet.ca_bundle),
                options=dict(FAST),
            ),
            deadline=time.monotonic() + 30,
        )
        plan = await run_operation(
            plugin,
            RequestKind.TOPOLOGY_ACTIVATE,
            dataclasses.replace(ctx, dry_run=True),
            node_policy(5000, 2800, 600),
        )
        assert plan.result.ok, plan.result.error
        assert bmc.stats.writes_applied == 0 and _writes(fleet) == 0
        assert plan.writes and all(w.status == "planned" for w in plan.writes), plan.writes


async def test_shadow_mode_plans_through_an_out_of_process_plugin_that_vouches_for_dry_runs(
    controller: Any, sink: TopologySink, tmp_path: Path
) -> None:
    """The Redfish plugin served out of process answers `Capabilities` with dry_run: a controller in
    shadow mode sends it the cap as a dry run, which plans and sends nothing; reads stay live."""
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        inventory = tmp_path / "inventory.toml"
        secrets = fleet.write_inventory(inventory, tmp_path / "secrets")
        device = next(e.id for e in fleet.inventory_entries())
        with inventory.open("a") as fh:
            fh.write("\n" + plugin_table("redfish", serve_command("redfish")))
        h = await controller(inventory, secrets_dir=str(secrets), shadow=True)
        caps = pp.GPUPolicies(policies=[pp.GPUPolicy(gpu_id=0, power_limit=pp.PowerLimit(watts=700))])
        cap = R(
            device=device,
            request_id="s-cap",
            gpu_policies_update=R.GPUPoliciesSetRequest(
                resource_group="rg", gpu_policy_action=R.SET_POLICY, gpu_policies=caps
            ),
        )
        await h.stub.SendDeviceRequest(cap)
        await h.stub.SendDeviceRequest(R(device=device, request_id="s-std", std_metrics=empty_pb2.Empty()))
        await sink.wait_for({"s-cap", "s-std"}, timeout=60)
        got = sink.unique()
        ok, error = translate.success_of(got["s-cap"])
        assert ok, error  # acknowledged without changing hardware limits
        record = await h.controller.store.get_request("s-cap")
        assert record is not None and shadow.ACKNOWLEDGED in (record.error or ""), record
        statuses = {w["status"] for w in record.writes or ()}
        assert "shadow" in statuses and statuses <= {"shadow", "skipped"}, record.writes
        assert translate.success_of(got["s-std"]) == (True, "")  # reads stay live
        assert fleet.bmcs[0].stats.total_calls > 0
        assert fleet.bmcs[0].stats.writes_applied == 0 and _writes(fleet) == 0


async def test_a_plugin_that_does_not_vouch_for_dry_runs_is_not_called_to_write(
    remote: Any, tmp_path: Path
) -> None:
    """A plugin without the Capabilities RPC (one built on another SDK) answers UNIMPLEMENTED: the
    host takes it as unable to plan, and shadow mode refuses its writing requests (execution/shadow)."""
    plugin = await remote(spec("redfish", serve_command("redfish")))
    assert plugin.supports_dry_run  # plugins.base.serve vouches for a plugin that plans
    conn = plugin.connection
    assert conn is not None and conn.dry_run
    vars(plugin)["supports_dry_run"] = False  # what an UNIMPLEMENTED answer leaves
    why = shadow.refusal(RequestKind.GPU_POLICIES_UPDATE, object(), plugin, "other-sdk")
    assert "cannot plan without writing" in why and "nothing was written" in why
