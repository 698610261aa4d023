"""`bmc_health` as a request kind of the DeviceController API (DPS 0.8+ `BMCHealthDeviceRequest`):
journaled, run in the device's lane, answered through the normal response path with every check, and
with `write_cycle` (and not `skip_writes`) a write cycle whose receipts are on the request's record;
an empty request is read-only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest

from bmcsim import SimulatorFleet
from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.delivery.sink import TopologySink
from controller.inventory import load_inventory

R = pb.DeviceControllerRequest


async def test_a_topology_server_gates_a_node_on_bmc_health(
    tmp_path: Path, start_controller: Any, sink: TopologySink
) -> None:
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        inventory = tmp_path / "inventory.toml"
        secrets = fleet.write_inventory(inventory, tmp_path / "secrets")
        h = await start_controller(load_inventory(inventory), secrets_dir=str(secrets))
        bmc = fleet.bmcs[0]
        before = {name: cap.snapshot() for name, cap in bmc.state.caps.items()}
        read_only = R.BMCHealthDeviceRequest(skip_writes=True, telemetry_interval_ms=20)
        await h.stub.SendDeviceRequest(R(device="node001", request_id="h-1", bmc_health=read_only))
        cycle = R.BMCHealthDeviceRequest(
            write_cycle=True, telemetry_interval_ms=20, write_resolution_timeout_ms=90_000
        )
        await h.stub.SendDeviceRequest(R(device="node001", request_id="h-2", bmc_health=cycle))
        await sink.wait_for({"h-1", "h-2"}, timeout=60)
        got = sink.unique()
        first, second = got["h-1"].bmc_health, got["h-2"].bmc_health
        assert first.success and first.verdict == "pass" and first.error == ""
        checks = {c.name: c for c in first.checks}
        assert (
            checks["latency"].status == "pass"
            and json.loads(checks["latency"].evidence_json)["samples"] == 20
        )
        assert not any(name.startswith("write ") for name in checks)
        assert second.success and sum(c.name.startswith("write ") for c in second.checks) == 8
        assert {name: cap.snapshot() for name, cap in bmc.state.caps.items()} == before
        record = await h.admin.GetRequest(apb.GetRequestRequest(request_id="h-2"))
        assert len(record.writes) >= 16 and record.outcome == "ok"
        assert not (await h.admin.GetRequest(apb.GetRequestRequest(request_id="h-1"))).writes

        # a bad field is refused in one line before anything is journaled
        bad = R.BMCHealthDeviceRequest(samples_per_telemetry=-1)
        with pytest.raises(grpc.aio.AioRpcError, match="samples_per_telemetry: must not be negative"):
            await h.stub.SendDeviceRequest(R(device="node001", request_id="h-3", bmc_health=bad))
