"""Generic DMTF models (Controls, legacy Power) and the read-only DGX H100 Node Manager platform."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from bmcsim import SimulatedBmc, SimulatorFleet

CONTROLS = "/redfish/v1/Chassis/1/Controls"
NODE = f"{CONTROLS}/PowerLimit"
CPU1 = f"{CONTROLS}/CPU1_PowerLimit"
POWER = "/redfish/v1/Chassis/1/Power"

Api = Callable[[SimulatedBmc], Any]


@pytest.fixture
async def legacy(cert_dir: Path) -> AsyncIterator[SimulatedBmc]:
    async with SimulatorFleet(n=1, model="dmtf-legacy", cert_dir=cert_dir) as fleet:
        yield fleet.bmcs[0]


@pytest.fixture
async def h100(cert_dir: Path) -> AsyncIterator[SimulatedBmc]:
    async with SimulatorFleet(n=1, model="dgx-h100", cert_dir=cert_dir) as fleet:
        yield fleet.bmcs[0]


def _ids(reply: Any) -> list[str]:
    return [i["MessageId"].rsplit(".", 1)[1] for i in reply.body["error"]["@Message.ExtendedInfo"]]


async def test_controls_collection_and_documents(dmtf: SimulatedBmc, api: Api) -> None:
    client = api(dmtf)
    chassis = (await client.get("/redfish/v1/Chassis/1")).body
    assert chassis["Controls"]["@odata.id"] == CONTROLS
    members = [m["@odata.id"] for m in (await client.get(CONTROLS)).body["Members"]]
    assert members == [NODE, CPU1, f"{CONTROLS}/CPU2_PowerLimit"]
    node = (await client.get(NODE)).body
    assert node["ControlType"] == "Power"
    assert node["PhysicalContext"] == "Chassis"
    assert (node["SetPoint"], node["ControlMode"], node["SetPointUnits"]) == (None, "Disabled", "W")
    assert (node["AllowableMin"], node["AllowableMax"]) == (200, 1200)
    cpu = (await client.get(CPU1)).body
    assert cpu["RelatedItem"][0]["@odata.id"] == "/redfish/v1/Systems/1/Processors/CPU1"
    assert cpu["SetPoint"] == cpu["DefaultSetPoint"] == 350
    procs = (await client.get("/redfish/v1/Systems/1/Processors")).body
    assert procs["Members@odata.count"] == 2


async def test_controls_patch_disable_and_reset(dmtf: SimulatedBmc, api: Api) -> None:
    client = api(dmtf)
    etag = (await client.get(NODE)).headers["ETag"]
    ok = await client.patch(NODE, {"SetPoint": 800, "ControlMode": "Manual"}, headers={"If-Match": etag})
    assert ok.status == 200
    assert (ok.body["SetPoint"], ok.body["ControlMode"]) == (800, "Manual")
    assert dmtf.state.caps["PowerLimit"].set_point == 800
    assert (await client.patch(NODE, {"SetPoint": 700}, headers={"If-Match": etag})).status == 412

    out = await client.patch(NODE, {"SetPoint": 5000})
    assert out.status == 400 and _ids(out) == ["PropertyValueOutOfRange"]
    assert "1200" in out.body["error"]["message"]
    mixed = await client.patch(NODE, {"SetPoint": None, "ControlMode": "Manual"})
    assert mixed.status == 400
    assert _ids(await client.patch(NODE, {"AllowableMax": 9})) == ["PropertyNotWritable"]
    assert _ids(await client.patch(NODE, {"ControlMode": "Sometimes"})) == ["PropertyValueNotInList"]

    off = await client.patch(NODE, {"SetPoint": None, "ControlMode": "Disabled"})
    assert off.status == 200 and (off.body["SetPoint"], off.body["ControlMode"]) == (None, "Disabled")

    assert (await client.patch(CPU1, {"SetPoint": 150})).status == 200
    reset = await client.post(f"{CPU1}/Actions/Control.ResetToDefaults", {})
    assert reset.status == 200
    assert dmtf.state.caps["CPU1_PowerLimit"].set_point == 350


async def test_legacy_power_view_shares_the_node_cap(dmtf: SimulatedBmc, api: Api) -> None:
    client = api(dmtf)
    power = (await client.get(POWER)).body
    control = power["PowerControl"][0]
    assert control["PowerLimit"]["LimitInWatts"] is None
    assert control["PowerConsumedWatts"] > 0
    assert (await client.patch(NODE, {"SetPoint": 600})).status == 200
    assert (await client.get(POWER)).body["PowerControl"][0]["PowerLimit"]["LimitInWatts"] == 600
    assert (await client.get(POWER)).body["PowerControl"][0]["PowerConsumedWatts"] < 600


async def test_legacy_power_patch_and_null_removal(legacy: SimulatedBmc, api: Api) -> None:
    client = api(legacy)
    assert (await client.get(CONTROLS)).status == 404
    assert "Controls" not in (await client.get("/redfish/v1/Chassis/1")).body
    first = await client.get(POWER)
    body = {"PowerControl": [{"PowerLimit": {"LimitInWatts": 500, "LimitException": "LogEventOnly"}}]}
    set_reply = await client.patch(POWER, body, headers={"If-Match": first.headers["ETag"]})
    assert set_reply.status == 200
    limit = set_reply.body["PowerControl"][0]["PowerLimit"]
    assert (limit["LimitInWatts"], limit["LimitException"]) == (500, "LogEventOnly")
    assert legacy.state.caps["PowerLimit"].set_point == 500
    assert (await client.patch(POWER, body, headers={"If-Match": first.headers["ETag"]})).status == 412

    # DSP0266 array rules: {} leaves the member alone
    assert (await client.patch(POWER, {"PowerControl": [{}]})).status == 200
    assert legacy.state.caps["PowerLimit"].set_point == 500
    out = await client.patch(POWER, {"PowerControl": [{"PowerLimit": {"LimitInWatts": 10}}]})
    assert out.status == 400
    info = out.body["error"]["@Message.ExtendedInfo"][0]
    assert info["MessageArgs"][1] == "PowerControl/0/PowerLimit/LimitInWatts"
    assert (await client.patch(POWER, {"PowerControl": [None]})).status == 400
    assert (await client.patch(POWER, {"PowerControl": []})).status == 400
    ro = await client.patch(POWER, {"PowerControl": [{"PowerConsumedWatts": 1}]})
    assert _ids(ro) == ["PropertyNotWritable"]

    removed = await client.patch(POWER, {"PowerControl": [{"PowerLimit": {"LimitInWatts": None}}]})
    assert removed.status == 200
    assert removed.body["PowerControl"][0]["PowerLimit"]["LimitInWatts"] is None
    assert legacy.state.caps["PowerLimit"].set_point is None


async def test_dgx_h100_is_read_only(h100: SimulatedBmc, api: Api) -> None:
    """The DGX H100 mockup (bmcsim/mockups/nvidia-dgx-h100): GPU readings, no limit, no writes."""
    client = api(h100)
    procs = (await client.get("/redfish/v1/Systems/HGX_Baseboard_0/Processors")).body
    assert procs["Members@odata.count"] == 8
    gpu = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_SXM_1/EnvironmentMetrics"
    metrics = (await client.get(gpu)).body
    assert metrics["PowerWatts"]["Reading"] > 0
    assert "PowerLimitWatts" not in metrics
    assert (await client.patch(gpu, {"PowerLimitWatts": {"SetPoint": 500}})).status == 405
    host_cpu = (await client.get("/redfish/v1/Systems/DGX/Processors/CPU_0")).body
    assert "EnvironmentMetrics" not in host_cpu  # nothing links a host CPU's EnvironmentMetrics
    assert (await client.get("/redfish/v1/Systems/DGX/Processors/CPU_0/EnvironmentMetrics")).status == 404
