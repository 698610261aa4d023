"""Dry run: the plan writes nothing (the simulator's and the fake's counters prove it) and is exactly
what the real run then executes."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest

from bmcsim import SimulatorFleet
from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller.delivery.sink import TopologySink
from controller.inventory import load_inventory
from plugins.base import DeviceWrite, Empty, ProfileChange, RequestKind, WriteOutcome, run_operation
from plugins.nvml.testing import FakeNode
from tests.controller.api.test_service import gpu_caps
from tests.controller.conftest import MEMORY, memory_inventory
from tests.controller.desired.test_receipts import gpu_policy, node_policy
from tests.memory_plugin import MemoryPlugin
from tests.plugins.redfish.harness import Harness

ROOT = Path(__file__).resolve().parents[3]


async def _cli(*args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "controller", *args,
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "250"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out = (await asyncio.wait_for(proc.communicate(), 60))[0].decode()
    assert proc.returncode == 0, out
    return out


def sent(writes: tuple[DeviceWrite, ...]) -> list[tuple[str, str, Any, str]]:
    return [(w.target, w.method, dict(w.body), w.component) for w in writes if w.status != "skipped"]


async def test_redfish_dry_run_writes_nothing_and_plans_what_the_real_run_does(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("std_metrics", bmc, Empty())
    gb200.reset()
    before = bmc.state.set_points()
    request = node_policy(5000, 2800, 600)
    ctx = dataclasses.replace(gb200.ctx(bmc), dry_run=True)
    plan = await run_operation(gb200.plugin, RequestKind.TOPOLOGY_ACTIVATE, ctx, request)
    assert plan.result.ok, plan.result.error
    assert bmc.stats.writes_applied == 0
    assert not [key for key in bmc.stats.calls if key[0] in ("PATCH", "POST")]
    assert bmc.state.set_points() == before
    assert len(plan.writes) == 8 and all(w.status == "planned" and w.after is None for w in plan.writes)
    assert all(w.before is not None and "allowed" in w.note for w in plan.writes)

    real = await run_operation(gb200.plugin, RequestKind.TOPOLOGY_ACTIVATE, gb200.ctx(bmc), request)
    assert real.result.ok and bmc.stats.writes_applied == 8
    assert sent(plan.writes) == sent(real.writes)
    assert [w.before for w in plan.writes] == [w.before for w in real.writes]
    # the planned result is the real one (what each component would hold afterwards), except that
    # the plan says nothing was written
    for planned, done in ((plan.result.node, real.result.node), (plan.result.cpu, real.result.cpu)):
        assert planned.write is WriteOutcome.NOT_WRITTEN and done.write is WriteOutcome.WRITTEN
        assert dataclasses.replace(planned, write=done.write) == done


async def test_nvml_dry_run_lists_skips_and_matches_the_real_run(h100x4: FakeNode) -> None:
    fake = h100x4.fake
    fake.gpu(1).limit_mw = 400_000
    seen = len(fake.writes())
    plan = await run_operation(
        h100x4.plugin, RequestKind.TOPOLOGY_ACTIVATE, h100x4.ctx(dry_run=True), gpu_policy(1600)
    )
    assert plan.result.ok
    assert len(fake.writes()) == seen and [h100x4.limit_w(i) for i in range(4)] == [
        700.0,
        400.0,
        700.0,
        700.0,
    ]
    assert [w.status for w in plan.writes] == ["planned", "skipped", "planned", "planned"]
    skipped = plan.writes[1]
    assert skipped.note == "already in force" and fake.gpu(1).uuid in skipped.component
    real = await h100x4.do("set_policy", gpu_policy(1600))  # straight to the plugin: no receipts here
    assert real.result == plan.result
    real = await run_operation(h100x4.plugin, RequestKind.TOPOLOGY_ACTIVATE, h100x4.ctx(), gpu_policy(1500))
    assert all(w.status == "ok" for w in real.writes)


async def test_dry_run_through_the_admin_api_and_the_cli(
    tmp_path: Path, sink: TopologySink, start_controller: Any
) -> None:
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        secrets = fleet.write_inventory(tmp_path / "inventory.toml", tmp_path / "secrets")
        h = await start_controller(load_inventory(tmp_path / "inventory.toml"), secrets_dir=str(secrets))
        bmc = fleet.bmcs[0]
        msg = gpu_caps("node001", "dry-1", {0: 500, 1: 450})
        caps = bmc.state.set_points()
        plan = await h.admin.DryRun(msg)
        assert plan.ok, plan.error
        assert [(w.status, w.before_watts, w.HasField("after_watts")) for w in plan.writes] == [
            ("planned", 1200.0, False)
        ] * 2
        assert bmc.stats.writes_applied == 0 and bmc.state.set_points() == caps
        with pytest.raises(grpc.aio.AioRpcError) as err:  # not journaled
            await h.admin.GetRequest(apb.GetRequestRequest(request_id="dry-1"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND

        await h.stub.SendDeviceRequest(msg)
        await sink.wait_for({"dry-1"}, timeout=60)
        record = await h.admin.GetRequest(apb.GetRequestRequest(request_id="dry-1"))
        assert [(w.target, w.method, w.body_json) for w in record.writes] == [
            (w.target, w.method, w.body_json) for w in plan.writes
        ]
        assert [w.after_watts for w in record.writes] == [500.0, 450.0] and bmc.stats.writes_applied == 2

        with pytest.raises(grpc.aio.AioRpcError) as err:  # bad input: one clear line
            await h.admin.DryRun(gpu_caps("node001", "dry-2", {0: float("nan")}))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT

        server = f"127.0.0.1:{h.controller.port}"
        args = (
            "--server",
            server,
            "send",
            "gpu-policies",
            "--device",
            "node001",
            "--gpu",
            "0=600",
            "--dry-run",
        )
        out = await _cli(*args)
        assert out.startswith("DRY RUN: nothing was written.") and "600" in out and ": ok" not in out
        assert bmc.stats.writes_applied == 2  # still only the real run's writes
        listed = await h.admin.ListRequests(apb.ListRequestsRequest())
        assert [r.request_id for r in listed.requests] == ["dry-1"]
        assert json.loads(record.writes[0].body_json)
        shown = await _cli("--server", server, "requests", "show", "dry-1")
        assert "device writes" in shown and "PATCH" in shown and "500 W" in shown and "1200 W" in shown
        await h.controller.stop()  # before the fleet goes: it logs out of the BMC


async def test_nvml_profile_changes_have_receipts_and_a_dry_run_writes_none(make_node: Any) -> None:
    node = await make_node("b200", "b200")
    seen = len(node.fake.writes())
    change = ProfileChange(enable=(5, 9))
    plan = await run_operation(
        node.plugin, RequestKind.ENABLE_WORKLOAD_PROFILE, node.ctx(dry_run=True), change
    )
    assert len(node.fake.writes()) == seen
    assert [(w.method, w.body, w.status) for w in plan.writes] == [
        (
            "nvmlDeviceWorkloadPowerProfileUpdateProfiles_v1",
            {"operation": "set", "profiles": [2, 6]},
            "planned",
        )
    ] * 2
    real = await run_operation(node.plugin, RequestKind.ENABLE_WORKLOAD_PROFILE, node.ctx(), change)
    calls = node.fake.writes()[seen:]
    assert [(c.function, c.uuid) for c in calls] == [
        (w.method, w.component.split("(")[-1].rstrip(")")) for w in real.writes
    ]
    assert sent(plan.writes) == sent(real.writes) and all(w.status == "ok" for w in real.writes)


async def test_a_plugin_without_dry_run_support_is_refused_not_run(start_controller: Any) -> None:
    h = await start_controller(memory_inventory(1))
    plan = await h.admin.DryRun(gpu_caps("node000", "dry-mem", {0: 500}))
    assert not plan.ok and not plan.writes
    assert plan.error == (
        f"plugin {MEMORY} cannot plan without writing (it does not support dry runs); nothing was done"
    )
    assert MemoryPlugin.calls == []  # the plugin was never called
