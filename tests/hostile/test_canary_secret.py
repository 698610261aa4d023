"""Canary-secret scan: a BMC password with a unique value is used through the real HTTPS simulator,
then a batch of requests (successes, device faults, an unreachable BMC, hostile input and a request
that tries to send the secret elsewhere) runs; the canary must appear nowhere: the log (at DEBUG),
every table of the database, the stored state JSON, the admin API and the responses at the sink."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import grpc
import pytest
import sqlalchemy as sa

from bench.ports import free_port as _closed_port  # nothing listens there
from bmcsim import BmcConfig, SimulatorFleet
from bmcsim._faults import FaultMode
from controller import translate
from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.inventory import DeviceEntry, load_inventory
from tests.controller.api.test_service import gpu_caps, ping
from tests.hostile.conftest import LogCapture

R = pb.DeviceControllerRequest


def _database_text(url: str) -> str:
    """Every row of every table, as text (bytes columns decoded leniently)."""
    engine = sa.create_engine(url)
    try:
        out: list[str] = []
        with engine.connect() as conn:
            for table in sa.inspect(conn).get_table_names():
                for row in conn.execute(sa.text(f'SELECT * FROM "{table}"')):
                    for value in row:
                        out.append(
                            value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
                        )
        return "\n".join(out)
    finally:
        engine.dispose()


async def test_the_canary_secret_appears_nowhere(
    start_controller, sink, db_url: str, tmp_path: Path, log_capture: LogCapture
) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    logging.getLogger().setLevel(logging.DEBUG)  # the fixture restores the level
    configs = [BmcConfig(model="gb200", password=canary), BmcConfig(model="gb200", password=canary)]
    async with SimulatorFleet(configs=configs, cert_dir=tmp_path / "tls") as fleet:
        secrets = fleet.write_inventory(tmp_path / "inventory.toml", tmp_path / "secrets")
        assert canary in next(secrets.iterdir()).read_text(), "the secret file must carry the canary"
        inventory = load_inventory(tmp_path / "inventory.toml")
        inventory["node-down"] = DeviceEntry(
            "node-down",
            "redfish",
            {"Model": "DGX_GB200"},
            url=f"https://127.0.0.1:{_closed_port()}",
            secret="bmc-sim",
            ca_bundle=str(fleet.ca_bundle),
        )
        h = await start_controller(inventory, secrets_dir=str(secrets), database_url=db_url)
        fleet.bmcs[1].faults.set(FaultMode.HTTP_500, writes_only=True)
        evil_model = {"Redfish": {"URL": "https://127.0.0.1:9/steal", "SecretName": "bmc-sim"}}
        batch = [
            gpu_caps("node001", "c1", {0: 500, 1: 450}),
            ping("node001", "c2"),
            R(device="node001", request_id="c3", gpu_metrics=R.GPUMetricsRequest()),
            gpu_caps("node002", "c4", {0: 600}),  # the BMC answers 500 to writes
            ping("node-down", "c5", timeout_seconds=10),
            ping("elsewhere", "c6", device_model_json=json.dumps(evil_model).encode()),
            ping("node001", "c7", device_state_json=b'{"priors": {"bogus": 1}, "version": 2}'),
            gpu_caps("node001", "c8", {0: float("nan")}),  # refused at the edge
        ]
        acked = set()
        for msg in batch:
            try:
                await h.stub.SendDeviceRequest(msg)
                acked.add(msg.request_id)
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.aio.AioRpcError):  # and bytes that are no message at all
            await h.channel.unary_unary("/devicecontroller.v1.DeviceController/SendDeviceRequest")(
                b"\x0a\xff"
            )
        await sink.wait_for(acked, timeout=60)
        answers = {rid: translate.success_of(sink.unique()[rid]) for rid in acked}
        assert answers["c1"] == (True, ""), answers["c1"]  # the canary really logged in
        assert not answers["c4"][0] and not answers["c5"][0] and not answers["c6"][0]
        assert sum(b.stats.total_calls for b in fleet.bmcs) > 0
        devices = await h.admin.ListDevices(apb.ListDevicesRequest())
        records = await h.admin.ListRequests(apb.ListRequestsRequest(limit=1000))
        await h.controller.stop()

    assert canary not in log_capture.text, "the canary is in the log"
    for response in sink.responses:
        assert canary.encode() not in response.SerializeToString(), response.request_id
    assert canary.encode() not in devices.SerializeToString() + records.SerializeToString()
    for device in devices.devices:
        assert canary not in device.state_json.decode("utf-8", "replace")
    assert canary not in _database_text(db_url), "the canary is in the database"
    if db_url.startswith("sqlite:///"):  # and not in any page of the file, free pages included
        db = Path(db_url.removeprefix("sqlite:///"))
        for path in db.parent.glob(db.name + "*"):
            assert canary.encode() not in path.read_bytes(), path.name
