"""One exclusive holder of a node, cluster-wide: `serve --workers 2` on PostgreSQL (real processes),
and two controllers on one database; six simulated GB200 nodes, a write cycle of every node and a
GPU cap on each sent while the cycles run. A verification is run only by the process holding the
node's shard lease, in the node's lane, so a cap reported ok is still in force at the end and every
other cap is back where it was."""

from __future__ import annotations

import asyncio
import functools
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from sqlalchemy.engine import URL

from bench.scaleout_ingest import ProcessTree, free_port_run
from bmcsim import SimulatorFleet
from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller._proto.devicecontroller.v1 import admin_pb2_grpc as agrpc
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc
from controller._proto.devicecontroller.v1 import policy_pb2 as pp
from controller.delivery.sink import TopologySink
from controller.inventory import load_inventory
from tests.controller.cluster.cluster import Cluster, fair, wait_until
from tests.controller.process.test_workers import executors_of, serving, until

R = pb.DeviceControllerRequest
NODES = 6
#: the leases of both tests' two executors or controllers: they are about who cycles a node, not failover
LEASE_TTL = 10.0
FAST = {"telemetry_interval_ms": 20, "latency_samples": 2, "samples_per_telemetry": 1}


def caps(bmc: Any) -> dict[str, Any]:
    return {name: cap.snapshot() for name, cap in bmc.state.caps.items()}


def gpu0_cap(device: str, request_id: str, watts: float) -> pb.DeviceControllerRequest:
    policies = pp.GPUPolicies(policies=[pp.GPUPolicy(gpu_id=0, power_limit=pp.PowerLimit(watts=watts))])
    return R(
        device=device,
        request_id=request_id,
        gpu_policies_update=R.GPUPoliciesSetRequest(
            resource_group="rg", gpu_policy_action=R.SET_POLICY, gpu_policies=policies
        ),
    )


@pytest.mark.postgres
@pytest.mark.timeout(600)
async def test_two_executors_never_cycle_and_cap_one_node_at_once(
    tmp_path: Path, pg_database: URL, sink: TopologySink
) -> None:
    url = pg_database.render_as_string(hide_password=False)
    async with SimulatorFleet(n=NODES, model="gb200", cert_dir=tmp_path / "tls", latency=0.01) as fleet:
        inventory = tmp_path / "inventory.toml"
        secrets = fleet.write_inventory(inventory, tmp_path / "secrets")
        config = tmp_path / "devicectl.toml"
        # leases that outlast a busy host's stall of an executor: with 3 s ones and three busy loops
        # beside it, an executor's lease lapsed mid-cycle 1 run of 2 ("VerifyRefused: the shard
        # lease of node002 lapsed here during the write cycle"); this test is about who cycles a node
        config.write_text(
            f"[devicectl]\nlease_ttl = {LEASE_TTL}\nsweep_interval = 0.5\nshutdown_grace = 5.0\n"
        )
        metrics = free_port_run(3)
        front = ProcessTree(
            tmp_path,
            database_url=url,
            callback=sink.address,
            inventory=inventory,
            secrets_dir=secrets,
            instance_id="wc",
            name="workers",
            extra_args=(
                "--workers",
                "2",
                "--config",
                str(config),
                "--metrics-listen",
                f"127.0.0.1:{metrics}",
            ),
        )
        await front.start()
        try:
            await until(lambda: len(executors_of(front.pid)) == 2, 120, "two executors")
            for port in (metrics + 1, metrics + 2):
                await until(functools.partial(serving, port), 120, f"the executor on metrics port {port}")
            await front.wait_executors(url, 2)
            devices = [f"node{i + 1:03d}" for i in range(NODES)]
            bmcs = dict(zip(devices, fleet.bmcs, strict=True))
            before = {d: caps(b) for d, b in bmcs.items()}
            async with grpc.aio.insecure_channel(front.address) as channel:
                admin = agrpc.DeviceControllerAdminStub(channel)
                stub = dgrpc.DeviceControllerStub(channel)
                batch = await admin.StartWriteCycle(apb.StartVerifyRequest(all=True, **FAST), timeout=30)
                # while the cycles run: a 900 W cap of GPU 0 on every node
                await until(lambda: any(caps(b) != before[d] for d, b in bmcs.items()), 120, "a cycle")
                for i, device in enumerate(devices):
                    await stub.SendDeviceRequest(gpu0_cap(device, f"cap-{i}", 900), timeout=30)
                await sink.wait_for({f"cap-{i}" for i in range(NODES)}, timeout=180)
                deadline = time.monotonic() + 300
                while True:
                    checks = (
                        await admin.GetBmcCheck(apb.GetBmcCheckRequest(id=batch.checks[0].batch_id))
                    ).checks
                    if all(c.status not in ("queued", "running") for c in checks):
                        break
                    assert time.monotonic() < deadline, [(c.device, c.status) for c in checks]
                    await asyncio.sleep(0.2)
            answers = sink.unique()
            for i, device in enumerate(devices):
                result = answers[f"cap-{i}"].gpu_policies_update.results[0]
                assert result.ok, (device, result)
                gpu0 = bmcs[device].state.caps["GPU_0"]
                # reported ok: still in force (a write cycle elsewhere never "restored" it away)
                assert gpu0.set_point == 900, (device, gpu0.to_dict())
                after = caps(bmcs[device])
                after.pop("GPU_0")
                expected = dict(before[device])
                expected.pop("GPU_0")
                assert after == expected, device  # every cap the cycle touched is back
            assert {c.status for c in checks} == {"done"}, [(c.device, c.status, c.error) for c in checks]
            owners = {c.device: c for c in checks}
            assert len(owners) == NODES
        finally:
            await front.stop()


@pytest.mark.postgres
@pytest.mark.timeout(600)
async def test_two_controllers_never_cycle_and_cap_one_node_at_once(
    tmp_path: Path, pg_database: URL, sink: TopologySink
) -> None:
    """The same with two controllers on one database: the cycles asked of one, the caps sent to the
    other; each node's work runs in the one controller that holds its shard."""
    url = pg_database.render_as_string(hide_password=False)
    cluster = Cluster(url, sink)
    async with SimulatorFleet(n=NODES, model="gb200", cert_dir=tmp_path / "tls", latency=0.01) as fleet:
        inventory_path = tmp_path / "inventory.toml"
        secrets = fleet.write_inventory(inventory_path, tmp_path / "secrets")
        inventory = load_inventory(inventory_path)
        try:
            # both controllers run in this test's process: leases that outlast a stall of it (the
            # cluster tests' 1.5 s lapse at a 1.1 s one, which a loaded host gives)
            one = await cluster.start("ctl-one", inventory, secrets_dir=str(secrets), lease_ttl=LEASE_TTL)
            two = await cluster.start("ctl-two", inventory, secrets_dir=str(secrets), lease_ttl=LEASE_TTL)
            await wait_until(lambda: fair([one, two]), "both controllers hold shards")
            devices = sorted(inventory)
            bmcs = dict(zip(devices, fleet.bmcs, strict=True))
            before = {d: caps(b) for d, b in bmcs.items()}
            async with grpc.aio.insecure_channel(f"127.0.0.1:{one.controller.port}") as channel:
                admin = agrpc.DeviceControllerAdminStub(channel)
                batch = await admin.StartWriteCycle(apb.StartVerifyRequest(all=True, **FAST), timeout=30)
                await wait_until(lambda: any(caps(b) != before[d] for d, b in bmcs.items()), "a cycle", 120)
                for i, device in enumerate(devices):
                    await two.send(gpu0_cap(device, f"cap2-{i}", 900))
                await sink.wait_for({f"cap2-{i}" for i in range(NODES)}, timeout=180)
                deadline = time.monotonic() + 300
                while True:
                    found = await admin.GetBmcCheck(apb.GetBmcCheckRequest(id=batch.checks[0].batch_id))
                    if all(c.status not in ("queued", "running") for c in found.checks):
                        break
                    assert time.monotonic() < deadline, [(c.device, c.status) for c in found.checks]
                    await asyncio.sleep(0.2)
            answers = sink.unique()
            for i, device in enumerate(devices):
                assert answers[f"cap2-{i}"].gpu_policies_update.results[0].ok, device
                assert bmcs[device].state.caps["GPU_0"].set_point == 900, device
                after, expected = caps(bmcs[device]), dict(before[device])
                after.pop("GPU_0")
                expected.pop("GPU_0")
                assert after == expected, device
            assert {c.status for c in found.checks} == {"done"}, [(c.device, c.error) for c in found.checks]
        finally:
            for node in list(cluster.nodes):
                await cluster.stop(node)
