"""The simulator's bmcweb profile, DPS proxy allow-list, failing tasks and layout variants."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from bmcsim import BmcConfig, SimulatedBmc, SimulatorFleet
from bmcsim._bmcweb import DPS_ALLOW_LIST, allowed
from tests.bmcsim.conftest import Api

GPU0 = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_0/EnvironmentMetrics"


@pytest.fixture
async def bmcweb(cert_dir: Path) -> AsyncIterator[SimulatedBmc]:
    async with SimulatorFleet(n=1, model="gb200", cert_dir=cert_dir, profile="bmcweb") as fleet:
        yield fleet.bmcs[0]


async def test_body_hash_etags_move_with_readings_and_if_match_compares_them(
    bmcweb: SimulatedBmc, api: Callable[[SimulatedBmc], Api]
) -> None:
    client = api(bmcweb)
    first = await client.get(GPU0)
    await asyncio.sleep(0.01)
    second = await client.get(GPU0)
    etag = first.headers["ETag"]
    assert etag.startswith('"') and len(etag) == 10 and etag != second.headers["ETag"]
    assert "@odata.etag" not in first.body  # bmcweb puts it in the header only
    patch = {"PowerLimitWatts": {"SetPoint": 900}}
    stale = await client.patch(GPU0, patch, headers={"If-Match": etag})
    assert stale.status == 412 and bmcweb.state.caps["GPU_0"].set_point == 1200
    assert (await client.patch(GPU0, patch, headers={"If-Match": "*"})).status == 200
    assert (await client.patch(GPU0, {"PowerLimitWatts": {"SetPoint": 800}})).status == 200
    assert bmcweb.state.caps["GPU_0"].set_point == 800


async def test_task_monitor_202_then_204_once_then_404_and_failing_tasks(
    bmcweb: SimulatedBmc, api: Callable[[SimulatedBmc], Api]
) -> None:
    client = api(bmcweb)
    bmcweb.configure(async_writes=True, task_delay=0.05, task_failure="Power capping is disabled.")
    accepted = await client.patch(GPU0, {"PowerLimitWatts": {"SetPoint": 700}})
    assert accepted.status == 202 and accepted.headers["Retry-After"] == "30"
    monitor = accepted.headers["Location"]
    task = accepted.body["@odata.id"]
    assert monitor == "/redfish/v1/TaskService/TaskMonitors/1" and task == "/redfish/v1/TaskService/Tasks/1"
    assert (await client.get(monitor)).status == 202
    await _task_ended(bmcweb, "1")
    assert [(await client.get(monitor)).status for _ in range(3)] == [204, 404, 404]
    done = (await client.get(task)).body
    assert (done["TaskState"], done["TaskStatus"]) == ("Exception", "Critical")
    assert done["Messages"][0]["Message"] == "Power capping is disabled."
    assert bmcweb.state.caps["GPU_0"].set_point == 1200  # a failed task applies nothing


async def test_the_dps_proxy_refuses_paths_off_its_allow_list(
    cert_dir: Path, api: Callable[[SimulatedBmc], Api]
) -> None:
    async with SimulatorFleet(
        n=1, model="gb200", cert_dir=cert_dir, profile="bmcweb", allow_list=DPS_ALLOW_LIST
    ) as fleet:
        client = api(fleet.bmcs[0])
        assert (await client.get(GPU0)).status == 200
        assert (await client.get("/redfish/v1/Systems")).body["Members@odata.count"] == 2
        refused = await client.get("/redfish/v1/Systems/System_0")
        assert (
            refused.status == 403
            and "allow-list" in refused.body["error"]["@Message.ExtendedInfo"][0]["Message"]
        )
        assert (await client.get("/redfish/v1/Chassis/HGX_ProcessorModule_0")).status == 403
        assert (await client.get("/redfish/v1/TaskService/TaskMonitors/1")).status == 403
    assert allowed(DPS_ALLOW_LIST, "PATCH", "/redfish/v1/Chassis/HGX_ProcessorModule_1/EnvironmentMetrics")
    assert not allowed(DPS_ALLOW_LIST, "PATCH", "/redfish/v1/Chassis/Chassis_0/EnvironmentMetrics")


async def test_layout_variants(cert_dir: Path, api: Callable[[SimulatedBmc], Api]) -> None:
    configs = [
        BmcConfig(model="dmtf", layout=frozenset({"no-em-link", "smartnic", "absent-readings"})),
        BmcConfig(model="dmtf-legacy", layout=frozenset({"capacity-0", "multi-chassis"})),
        BmcConfig(model="dmtf", control_quirk="automatic"),
    ]
    async with SimulatorFleet(configs=configs, cert_dir=cert_dir) as fleet:
        first, legacy, quirk = (api(b) for b in fleet.bmcs)
        chassis = (await first.get("/redfish/v1/Chassis/1")).body
        assert "EnvironmentMetrics" not in chassis
        assert (await first.get("/redfish/v1/Chassis/1/EnvironmentMetrics")).status == 404
        systems = (await first.get("/redfish/v1/Systems")).body["Members"]
        assert [m["@odata.id"] for m in systems] == ["/redfish/v1/Systems/1", "/redfish/v1/Systems/SmartNIC"]
        assert (await first.get("/redfish/v1/Systems/SmartNIC")).body["SystemType"] == "DPU"
        assert "Sensor" not in (await first.get("/redfish/v1/Chassis/1/Controls/PowerLimit")).body
        power = (await legacy.get("/redfish/v1/Chassis/1/Power")).body["PowerControl"][0]
        assert power["PowerCapacityWatts"] == 0
        members = (await legacy.get("/redfish/v1/Chassis")).body["Members"]
        assert members[0]["@odata.id"] == "/redfish/v1/Chassis/Enclosure"
        control = (await quirk.get("/redfish/v1/Chassis/1/Controls/PowerLimit")).body
        assert control["ControlMode@Redfish.AllowableValues"] == ["Automatic", "Disabled"]
        manual = await quirk.patch(
            "/redfish/v1/Chassis/1/Controls/PowerLimit", {"SetPoint": 500, "ControlMode": "Manual"}
        )
        assert manual.status == 400
        ok = await quirk.patch("/redfish/v1/Chassis/1/Controls/PowerLimit", {"SetPoint": 500})
        assert ok.status == 200 and ok.body["ControlMode"] == "Automatic" and ok.body["SetPoint"] == 500


async def _task_ended(bmc: SimulatedBmc, task_id: str) -> None:
    """Wait (bounded) until the simulated BMC's task has ended."""
    for _ in range(1000):  # bounded: 10 s at most
        task = bmc.tasks.get(task_id)
        if task is not None and task.state != "Running":
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"task {task_id} still running after 10 s")
