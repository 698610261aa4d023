"""Readiness verification through a real controller: journaled in the database, run in the background
against the HTTPS simulator, kept as history, resumed or reported interrupted after a restart, gated
by role, and compared with the in-band GPU limits of a linked NVML device."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client import REGISTRY

from bmcsim import SimulatorFleet
from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller.inventory import load_inventory
from controller.security.authz import required_role
from controller.store import BmcCheckRow, Store
from plugins.base import DeviceContext, DeviceControllerError, Ping
from plugins.nvml import NvmlPlugin
from plugins.nvml.testing import FakeNode

FAST: dict[str, Any] = {"telemetry_interval_ms": 20, "latency_samples": 5}


@pytest.fixture
async def fleet(tmp_path: Path) -> AsyncIterator[SimulatorFleet]:
    async with SimulatorFleet(n=2, model="gb200", cert_dir=tmp_path / "tls") as f:
        yield f


async def _start(
    start_controller: Any, fleet: SimulatorFleet, tmp_path: Path, extra: str = "", **kw: Any
) -> Any:
    inventory = tmp_path / "inventory.toml"
    secrets = fleet.write_inventory(inventory, tmp_path / "secrets")
    if extra:
        with inventory.open("a") as fh:
            fh.write(extra)
    return await start_controller(load_inventory(inventory), secrets_dir=str(secrets), **kw)


async def _finished(h: Any, batch: str, timeout: float = 60.0) -> list[apb.BmcCheckRecord]:
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        got = await h.admin.GetBmcCheck(apb.GetBmcCheckRequest(id=batch))
        if all(c.status not in ("queued", "running") for c in got.checks):
            return list(got.checks)
        await asyncio.sleep(0.1)
    raise AssertionError(f"verification {batch} did not finish in {timeout:g} s")


def _checks(record: apb.BmcCheckRecord) -> dict[str, str]:
    return {c["name"]: c["status"] for c in json.loads(record.result_json)["checks"]}


async def test_a_fleet_verification_runs_in_the_background_and_stays_in_the_history(
    fleet: SimulatorFleet, start_controller: Any, tmp_path: Path
) -> None:
    h = await _start(start_controller, fleet, tmp_path)
    started = await h.admin.StartVerify(apb.StartVerifyRequest(all=True, **FAST))
    assert [(c.device, c.status) for c in started.checks] == [("node001", "queued"), ("node002", "queued")]
    batch = started.checks[0].batch_id
    done = await _finished(h, batch)
    assert {(c.device, c.status, c.verdict) for c in done} == {
        ("node001", "done", "pass"),
        ("node002", "done", "pass"),
    }
    checks = _checks(done[0])
    assert checks["tls"] == checks["login"] == checks["latency"] == checks["cap gpu/0"] == "pass"
    assert checks["inband"] == "skip" and not done[0].writes  # read-only: no receipts
    listed = await h.admin.ListBmcChecks(apb.ListBmcChecksRequest(device="node002"))
    assert [c.check_id for c in listed.checks] == [c.check_id for c in done if c.device == "node002"]
    one = await h.admin.GetBmcCheck(apb.GetBmcCheckRequest(id=done[1].check_id))
    assert [c.device for c in one.checks] == [done[1].device]
    last = await h.controller.store.last_bmc_checks()
    assert {d: r.verdict for d, r in last.items()} == {"node001": "pass", "node002": "pass"}
    tls = REGISTRY.get_sample_value("devicectl_verify_result", {"check": "tls", "result": "pass"})
    assert tls is not None and tls >= 2
    p95 = REGISTRY.get_sample_value("devicectl_verify_latency_p95_seconds", {"device": "node001"})
    assert p95 is not None and p95 > 0
    with pytest.raises(grpc.aio.AioRpcError, match="unknown device"):
        await h.admin.StartVerify(apb.StartVerifyRequest(devices=["node404"]))
    with pytest.raises(grpc.aio.AioRpcError, match="no device of model"):
        await h.admin.StartVerify(apb.StartVerifyRequest(model="DGX_H100"))


async def test_a_write_cycle_keeps_its_receipts_and_leaves_every_cap_as_it_was(
    fleet: SimulatorFleet, start_controller: Any, tmp_path: Path
) -> None:
    h = await _start(start_controller, fleet, tmp_path)
    bmc = fleet.bmcs[0]
    before = {name: cap.snapshot() for name, cap in bmc.state.caps.items()}
    started = await h.admin.StartWriteCycle(apb.StartVerifyRequest(devices=["node001"], **FAST))
    (done,) = await _finished(h, started.checks[0].batch_id)
    assert done.write_cycle and done.verdict == "pass", done
    writes = {n: s for n, s in _checks(done).items() if n.startswith("write ")}
    assert len(writes) == 8 and set(writes.values()) == {"pass"}
    assert len(done.writes) >= 16 and all(w.target.startswith("/redfish/v1/") for w in done.writes)
    assert {name: cap.snapshot() for name, cap in bmc.state.caps.items()} == before


async def test_a_restart_reports_what_was_running_interrupted_and_runs_what_was_queued(
    fleet: SimulatorFleet, start_controller: Any, tmp_path: Path
) -> None:
    h = await _start(start_controller, fleet, tmp_path, instance_id="ctl-a")
    store: Store = h.controller.store
    now = datetime.now(UTC)
    query = {"telemetry_interval_ms": 20, "latency_samples": 5, "skip_writes": True}

    def row(check_id: str, device: str, status: str, write_cycle: bool = False) -> BmcCheckRow:
        return BmcCheckRow(
            check_id, "b0", device, write_cycle, status, "", query, None, None, "", "", now, None, None
        )

    # as a controller killed mid-run left them: one running (its own), one running a write cycle,
    # one never started
    await h.controller.checker.stop()
    for task in h.controller._tasks:
        if task.get_name() == "readiness checks":
            task.cancel()
    await store.add_bmc_checks([row("b0-1", "node001", "queued"), row("b0-2", "node002", "queued")])
    await store.add_bmc_checks([row("b0-3", "node001", "queued", write_cycle=True)])
    claimed = await store.claim_bmc_checks("ctl-a", 2, now)
    assert {r.check_id for r in claimed} == {"b0-1", "b0-2"}
    await h.controller.stop(grace=1.0)

    h2 = await _start(start_controller, fleet, tmp_path, instance_id="ctl-a")
    done = await _finished(h2, "b0")
    status = {c.check_id: (c.status, c.error) for c in done}
    assert status["b0-1"][0] == status["b0-2"][0] == "interrupted"
    assert "interrupted by a controller restart" in status["b0-1"][1]
    assert status["b0-3"] == ("done", "")  # the queued one ran after the restart


def test_operators_verify_read_only_and_only_admins_cycle_caps() -> None:
    admin = "/devicecontroller.v1.DeviceControllerAdmin/"
    assert required_role(admin + "StartVerify") == "operator"
    assert required_role(admin + "ListBmcChecks") == "operator"
    assert required_role(admin + "GetBmcCheck") == "operator"
    assert required_role(admin + "StartWriteCycle") == "admin"


async def test_in_band_limits_that_differ_from_the_bmcs_are_flagged_with_both_values(
    fleet: SimulatorFleet, start_controller: Any, tmp_path: Path, h100x4: FakeNode
) -> None:
    link = '\n[[device]]\nid = "node001-gpus"\nplugin = "nvml"\nbmc = "node001"\n'
    h = await _start(start_controller, fleet, tmp_path, extra=link)
    started = await h.admin.StartVerify(apb.StartVerifyRequest(devices=["node001"], **FAST))
    (done,) = await _finished(h, started.checks[0].batch_id)
    inband = next(c for c in json.loads(done.result_json)["checks"] if c["name"] == "inband")
    assert inband["status"] == "warn", inband
    assert "GPU 0: NVML enforces 700 W, the BMC holds 1200 W" in inband["detail"]
    assert inband["evidence"]["gpus"]["0"] == {"nvml_watts": 700.0, "bmc_watts": 1200.0}
    assert done.verdict == "warn"


async def test_a_linked_nvml_device_without_a_driver_is_named_not_called_missing(
    fleet: SimulatorFleet, start_controller: Any, tmp_path: Path, h100x4: FakeNode
) -> None:
    h100x4.fake.driver_loaded = False  # nvmlInit fails: the node has no driver loaded
    link = '\n[[device]]\nid = "node001-gpus"\nplugin = "nvml"\nbmc = "node001"\n'
    h = await _start(start_controller, fleet, tmp_path, extra=link)
    try:
        started = await h.admin.StartVerify(apb.StartVerifyRequest(devices=["node001"], **FAST))
        (done,) = await _finished(h, started.checks[0].batch_id)
    finally:
        h100x4.fake.driver_loaded = True
        await h.controller.stop()
        await _nvml_initialised_again()
    inband = next(c for c in json.loads(done.result_json)["checks"] if c["name"] == "inband")
    assert inband["status"] == "warn", inband
    assert "no linked NVML device" not in inband["detail"]
    assert inband["detail"].startswith("linked NVML device node001-gpus could not be read: "), inband


async def _nvml_initialised_again() -> None:
    """The controller's NVML plugin shares the process's library, which now holds the failed
    initialisation (retried after a back-off): ping through it until the driver is picked up again,
    so the next test in this process starts with NVML initialised."""
    plugin = NvmlPlugin()  # the process-wide library, as the controller's plugin uses
    await plugin.start()
    try:

        async def answered() -> bool:
            try:
                return bool((await plugin.ping(DeviceContext(device_id="gpus"), Ping())).result.ok)
            except DeviceControllerError:
                return False

        async with asyncio.timeout(30):
            while True:  # the library's back-off decides when it tries again
                if await answered():
                    return
                await asyncio.sleep(0.2)
    finally:
        await plugin.close()
