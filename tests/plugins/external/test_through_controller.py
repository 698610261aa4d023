"""Out-of-process plugins behind a real controller: the rest of the controller cannot tell them apart."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import empty_pb2

from bmcsim import SimulatorFleet
from controller import translate
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import policy_pb2 as pp
from controller.delivery.sink import TopologySink
from controller.plugin_host.remote import RemotePlugin
from tests.plugins.external.conftest import device_table, plugin_table, serve_command

R = pb.DeviceControllerRequest


def ping(device: str, request_id: str) -> pb.DeviceControllerRequest:
    return R(device=device, request_id=request_id, ping=R.PingRequest(retry_count=0))


async def test_example_plugin_runs_requests_out_of_process(
    controller, sink: TopologySink, tmp_path: Path
) -> None:
    files = tmp_path / "files"
    files.mkdir()
    (files / "disk0.img").write_text("x" * 10)
    inventory = tmp_path / "inventory.toml"
    inventory.write_text(
        plugin_table(
            "filedevices", serve_command("filedevices"), config={"dir": str(files), "list_period": 0.2}
        )
        + device_table("disk0.img", "filedevices")
        + device_table("missing.img", "filedevices")
    )
    h = await controller(inventory)
    for i in range(3):
        await h.stub.SendDeviceRequest(ping("disk0.img", f"p{i}"))
    await h.stub.SendDeviceRequest(ping("missing.img", "gone"))
    await sink.wait_for({"p0", "p1", "p2", "gone"}, timeout=30)

    got = sink.unique()
    assert all(translate.success_of(got[f"p{i}"]) == (True, "") for i in range(3))
    ok, error = translate.success_of(got["gone"])
    assert not ok and "no file 'missing.img'" in error
    assert set(sink.counts.values()) == {1}
    # the state the example plugin returns travels back and is persisted by the controller
    view = await h.controller.store.get_device("disk0.img")
    assert view is not None and view.state_json == {"pings": 3}
    plugin = h.controller.plugins.started()["filedevices"]
    assert isinstance(plugin, RemotePlugin)
    conn = plugin.connection
    assert conn is not None and conn.process is not None and conn.process.returncode is None
    assert plugin.info.version == "0.1.0"


async def test_redfish_plugin_runs_out_of_process_against_the_simulator(
    controller, sink: TopologySink, tmp_path: Path
) -> None:
    async with SimulatorFleet(n=2, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        inventory = tmp_path / "inventory.toml"
        secrets = fleet.write_inventory(inventory, tmp_path / "secrets")
        first, second = (e.id for e in fleet.inventory_entries())
        with inventory.open("a") as fh:
            fh.write("\n" + plugin_table("redfish", serve_command("redfish")))
        h = await controller(inventory, secrets_dir=str(secrets))
        caps = pp.GPUPolicies(policies=[pp.GPUPolicy(gpu_id=0, power_limit=pp.PowerLimit(watts=700))])
        requests = [
            ping(first, "r-ping0"),
            ping(second, "r-ping1"),
            R(device=first, request_id="r-std", std_metrics=empty_pb2.Empty()),
            R(
                device=second,
                request_id="r-cap",
                gpu_policies_update=R.GPUPoliciesSetRequest(
                    resource_group="rg", gpu_policy_action=R.SET_POLICY, gpu_policies=caps
                ),
            ),
        ]
        for request in requests:
            await h.stub.SendDeviceRequest(request)
        ids = {r.request_id for r in requests}
        await sink.wait_for(ids, timeout=60)
        got = sink.unique()
        for rid in sorted(ids):
            assert translate.success_of(got[rid]) == (True, ""), (rid, got[rid])
        assert set(sink.counts.values()) == {1}
        # the cap was written by the plugin process, with the inventory's credentials
        assert fleet.bmcs[1].stats.total_calls > 0 and fleet.bmcs[0].stats.total_calls > 0
        assert got["r-cap"].gpu_policies_update.results[0].power_cap_watts == 700
        assert isinstance(h.controller.plugins.started()["redfish"], RemotePlugin)


async def test_a_plugin_known_only_by_its_plugin_table_is_accepted(
    controller, sink: TopologySink, tmp_path: Path
) -> None:
    """A third-party plugin binary need not be installed in the controller's environment."""
    (tmp_path / "f.bin").write_text("")
    inventory = tmp_path / "inventory.toml"
    inventory.write_text(
        plugin_table("acme-files", serve_command("filedevices"), config={"dir": str(tmp_path)})
        + device_table("f.bin", "acme-files")
    )
    h = await controller(inventory)
    await h.stub.SendDeviceRequest(ping("f.bin", "x1"))
    await sink.wait_for({"x1"}, timeout=30)
    assert translate.success_of(sink.unique()["x1"]) == (True, "")
