"""One rule for both doors: a write cycle through `bmc_health` needs what StartWriteCycle needs (the
`admin` role, no active resource group unless forced), and an empty `bmc_health {}` is read-only
(real mutual TLS, a real controller, the HTTPS simulator's own count of applied writes)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from bmcsim import SimulatorFleet
from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller._proto.devicecontroller.v1 import admin_pb2_grpc as agrpc
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc
from controller._proto.devicecontroller.v1 import policy_pb2 as pp
from controller.app import Controller
from controller.delivery.sink import TopologySink
from controller.inventory import load_inventory
from controller.security.tls import client_channel
from controller.translate import request_from_proto
from tests.controller.security.conftest import Pki, mtls_settings, mtls_sink, pki  # noqa: F401 (fixtures)

R = pb.DeviceControllerRequest
#: `dps` is a topology server that may also ask for write cycles; `topology` may not
ROLES = "topology=topology,operator=operator,admin=admin+topology"


def test_an_empty_bmc_health_is_read_only_and_write_cycle_asks_for_writes() -> None:
    empty = R(device="n", request_id="r", bmc_health=R.BMCHealthDeviceRequest())
    assert request_from_proto(empty)[1].skip_writes is True
    legacy = R(device="n", request_id="r", bmc_health=R.BMCHealthDeviceRequest(skip_writes=False))
    assert request_from_proto(legacy)[1].skip_writes is True  # DPS's old default no longer writes
    both = R.BMCHealthDeviceRequest(write_cycle=True, skip_writes=True)
    assert request_from_proto(R(device="n", request_id="r", bmc_health=both))[1].skip_writes is True
    cycle = R(device="n", request_id="r", bmc_health=R.BMCHealthDeviceRequest(write_cycle=True))
    assert request_from_proto(cycle)[1].skip_writes is False


async def test_bmc_health_write_cycle_follows_the_start_write_cycle_rules(
    tmp_path: Path,
    pki: Pki,  # noqa: F811
    mtls_sink: TopologySink,  # noqa: F811
) -> None:
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        inventory = tmp_path / "inventory.toml"
        secrets = fleet.write_inventory(inventory, tmp_path / "secrets")
        settings = mtls_settings(pki, tmp_path, mtls_sink.address, roles=ROLES, secrets_dir=str(secrets))
        controller = Controller(settings, load_inventory(inventory))
        await controller.start()
        bmc = fleet.bmcs[0]
        address = f"127.0.0.1:{controller.port}"
        try:
            async with (
                client_channel(address, pki.client("topology")) as topology,
                client_channel(address, pki.client("admin")) as dps,
            ):
                as_topology = dgrpc.DeviceControllerStub(topology)
                as_dps = dgrpc.DeviceControllerStub(dps)
                admin = agrpc.DeviceControllerAdminStub(dps)
                fast = {"telemetry_interval_ms": 20}

                # an empty bmc_health from a topology client: read-only, nothing written
                await as_topology.SendDeviceRequest(
                    R(device="node001", request_id="e-1", bmc_health=R.BMCHealthDeviceRequest(**fast))
                )
                await mtls_sink.wait_for({"e-1"}, timeout=60)
                answer = mtls_sink.unique()["e-1"].bmc_health
                assert answer.success and not any(c.name.startswith("write ") for c in answer.checks)
                assert bmc.stats.writes_applied == 0
                assert not (await admin.GetRequest(apb.GetRequestRequest(request_id="e-1"))).writes

                # a write cycle asked for by a client without `admin`: refused before it is journaled
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await as_topology.SendDeviceRequest(
                        R(
                            device="node001",
                            request_id="e-2",
                            bmc_health=R.BMCHealthDeviceRequest(write_cycle=True, **fast),
                        )
                    )
                assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
                assert "needs role admin" in (refused.value.details() or "")
                assert bmc.stats.writes_applied == 0
                with pytest.raises(grpc.aio.AioRpcError):
                    await admin.GetRequest(apb.GetRequestRequest(request_id="e-2"))
                # StartWriteCycle refuses the same client the same way
                async with client_channel(address, pki.client("operator")) as ops:
                    with pytest.raises(grpc.aio.AioRpcError) as also:
                        await agrpc.DeviceControllerAdminStub(ops).StartWriteCycle(
                            apb.StartVerifyRequest(devices=["node001"])
                        )
                    assert also.value.code() is grpc.StatusCode.PERMISSION_DENIED

                # an active resource group refuses the cycle through this door too (no force here)
                await as_dps.SendDeviceRequest(
                    R(
                        device="node001",
                        request_id="e-3",
                        resource_group_activate=R.AllocationRequest(
                            resource_group="rg1",
                            gpu_policies=R.GPUPoliciesSetRequest(
                                resource_group="rg1",
                                gpu_policy_action=R.SET_POLICY,
                                gpu_policies=pp.GPUPolicies(
                                    policies=[pp.GPUPolicy(gpu_id=0, power_limit=pp.PowerLimit(watts=800))]
                                ),
                            ),
                        ),
                    )
                )
                await mtls_sink.wait_for({"e-3"}, timeout=60)
                assert mtls_sink.unique()["e-3"].resource_group_activate.success
                writes_before = bmc.stats.writes_applied
                await as_dps.SendDeviceRequest(
                    R(
                        device="node001",
                        request_id="e-4",
                        bmc_health=R.BMCHealthDeviceRequest(write_cycle=True, **fast),
                    )
                )
                await mtls_sink.wait_for({"e-4"}, timeout=60)
                gated = {c.name: c for c in mtls_sink.unique()["e-4"].bmc_health.checks}
                assert gated["write"].status == "fail" and "resource group rg1" in gated["write"].detail
                assert bmc.stats.writes_applied == writes_before
                refused = await admin.GetRequest(apb.GetRequestRequest(request_id="e-4"))
                assert not refused.writes, refused.writes  # nothing sent, nothing to restore

                # the admin (topology + admin) client's write cycle runs, with its receipts
                await as_dps.SendDeviceRequest(
                    R(
                        device="node001",
                        request_id="e-5",
                        resource_group_deactivate=R.AllocationRequest(resource_group="rg1"),
                    )
                )
                await mtls_sink.wait_for({"e-5"}, timeout=60)
                assert mtls_sink.unique()["e-5"].resource_group_deactivate.success
                before = {name: cap.snapshot() for name, cap in bmc.state.caps.items()}
                await as_dps.SendDeviceRequest(
                    R(
                        device="node001",
                        request_id="e-6",
                        bmc_health=R.BMCHealthDeviceRequest(write_cycle=True, **fast),
                    )
                )
                await mtls_sink.wait_for({"e-6"}, timeout=90)
                cycled = mtls_sink.unique()["e-6"].bmc_health
                assert sum(c.name.startswith("write ") for c in cycled.checks) == 8, cycled
                assert {name: cap.snapshot() for name, cap in bmc.state.caps.items()} == before
                receipts = (await admin.GetRequest(apb.GetRequestRequest(request_id="e-6"))).writes
                assert len(receipts) == 16, [(w.method, w.target, w.status) for w in receipts]  # once each
        finally:
            await controller.stop()
