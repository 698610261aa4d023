"""The synthetic writable `gb200` tray (not GB200 firmware's shape; see bmcsim/mockups): EnvironmentMetrics
caps, ETags, range errors, ClearOOBSetPoint, WPPS, readings."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from bmcsim import SUPPORTED_MASK, SimulatedBmc, format_mask

PROCS = "/redfish/v1/Systems/HGX_Baseboard_0/Processors"
GPU0 = f"{PROCS}/GPU_0/EnvironmentMetrics"
CPU1 = f"{PROCS}/CPU_1/EnvironmentMetrics"
MODULE0 = "/redfish/v1/Chassis/HGX_ProcessorModule_0/EnvironmentMetrics"
CLEAR = "/Actions/Oem/NvidiaEnvironmentMetrics.ClearOOBSetPoint"
WPPS = f"{PROCS}/GPU_1/Oem/Nvidia/WorkloadPowerProfile"

Api = Callable[[SimulatedBmc], Any]


def _ext(reply: Any) -> list[dict[str, Any]]:
    return list(reply.body["error"]["@Message.ExtendedInfo"])


async def test_inventory_walk(gb200: SimulatedBmc, api: Api) -> None:
    client = api(gb200)
    systems = await client.get("/redfish/v1/Systems")
    assert [m["@odata.id"] for m in systems.body["Members"]] == ["/redfish/v1/Systems/HGX_Baseboard_0"]
    procs = await client.get(PROCS)
    ids = [m["@odata.id"].rsplit("/", 1)[1] for m in procs.body["Members"]]
    assert ids == ["GPU_0", "GPU_1", "GPU_2", "GPU_3", "CPU_0", "CPU_1"]
    gpu = await client.get(f"{PROCS}/GPU_3")
    assert gpu.body["ProcessorType"] == "GPU"
    assert gpu.body["Links"]["Chassis"]["@odata.id"].endswith("HGX_ProcessorModule_1")
    assert gpu.body["Oem"]["Nvidia"]["WorkloadPowerProfile"]["@odata.id"].endswith("/WorkloadPowerProfile")
    cpu = await client.get(f"{PROCS}/CPU_0")
    assert (cpu.body["ProcessorType"], cpu.body["Model"]) == ("CPU", "Grace")
    chassis = await client.get("/redfish/v1/Chassis")
    assert {m["@odata.id"].rsplit("/", 1)[1] for m in chassis.body["Members"]} == {
        "Chassis_0",
        "HGX_Chassis_0",
        "HGX_ProcessorModule_0",
        "HGX_ProcessorModule_1",
    }
    manager = await client.get("/redfish/v1/Managers/BMC")
    assert manager.body["FirmwareVersion"] == gb200.firmware_version
    fw = await client.get("/redfish/v1/UpdateService/FirmwareInventory/FW_BMC_0")
    assert fw.body["Version"] == gb200.firmware_version
    assembly = await client.get("/redfish/v1/Chassis/HGX_ProcessorModule_1/Assembly")
    assert assembly.body["Assemblies"][0]["Model"] == "GB200"
    for resource in (systems, procs, gpu, manager):
        assert {"@odata.id", "@odata.type"} <= set(resource.body)


async def test_limits_follow_the_gb200_spec(gb200: SimulatedBmc, api: Api) -> None:
    client = api(gb200)
    gpu = (await client.get(GPU0)).body["PowerLimitWatts"]
    cpu = (await client.get(CPU1)).body["PowerLimitWatts"]
    module = (await client.get(MODULE0)).body["PowerLimitWatts"]
    assert (gpu["AllowableMin"], gpu["AllowableMax"], gpu["DefaultSetPoint"]) == (200, 1200, 1200)
    assert (cpu["AllowableMin"], cpu["AllowableMax"]) == (50, 420)
    assert (module["AllowableMin"], module["AllowableMax"]) == (450, 2820)
    node = await client.get("/redfish/v1/Chassis/Chassis_0")
    assert (node.body["MinPowerWatts"], node.body["MaxPowerWatts"]) == (1000, 6667)


async def test_etag_if_match_and_412(gb200: SimulatedBmc, api: Api) -> None:
    client = api(gb200)
    first = await client.get(GPU0)
    etag = first.headers["ETag"]
    assert etag == first.body["@odata.etag"]
    # readings move but the ETag only changes on modification
    assert (await client.get(GPU0)).headers["ETag"] == etag

    ok = await client.patch(GPU0, {"PowerLimitWatts": {"SetPoint": 700}}, headers={"If-Match": etag})
    assert ok.status == 200
    assert ok.body["PowerLimitWatts"]["SetPoint"] == 700
    new_etag = ok.headers["ETag"]
    assert new_etag != etag

    stale = await client.patch(GPU0, {"PowerLimitWatts": {"SetPoint": 800}}, headers={"If-Match": etag})
    assert stale.status == 412
    assert stale.body["error"]["code"].endswith("PreconditionFailed")
    assert gb200.state.caps["GPU_0"].set_point == 700

    assert (
        await client.patch(GPU0, {"PowerLimitWatts": {"SetPoint": 800}}, headers={"If-Match": "*"})
    ).status == 200
    weak = await client.get(GPU0)
    patched = await client.patch(
        GPU0, {"PowerLimitWatts": {"SetPoint": 750}}, headers={"If-Match": "W/" + weak.headers["ETag"]}
    )
    assert patched.status == 200


async def test_range_and_type_errors(gb200: SimulatedBmc, api: Api) -> None:
    client = api(gb200)
    # NVIDIA bmcweb checks no range itself: the power manager's InvalidArgument is answered
    # PropertyValueIncorrect naming "setpoint" (nvidia_async_set_callbacks.hpp PatchPowerCapCallback)
    low = await client.patch(GPU0, {"PowerLimitWatts": {"SetPoint": 1}})
    assert low.status == 400
    (info,) = _ext(low)
    assert info["MessageId"].endswith("PropertyValueIncorrect")
    assert info["MessageArgs"] == ["setpoint", "1"]
    assert low.body["error"]["code"] == info["MessageId"]

    high = await client.patch(CPU1, {"PowerLimitWatts": {"SetPoint": 421}})
    assert high.status == 400 and _ext(high)[0]["MessageArgs"] == ["setpoint", "421"]
    fractional = await client.patch(GPU0, {"PowerLimitWatts": {"SetPoint": 700.5}})
    assert _ext(fractional)[0]["MessageId"].endswith("PropertyValueTypeError")
    # NVIDIA parses only SetPoint inside PowerLimitWatts
    mode = await client.patch(GPU0, {"PowerLimitWatts": {"ControlMode": "Disabled"}})
    assert mode.status == 400 and _ext(mode)[0]["MessageId"].endswith("PropertyUnknown")
    # bmcweb's `json_util::readJson` knows only the keys it reads: a read-only one is unknown too
    read_only = await client.patch(GPU0, {"PowerWatts": {"Reading": 5}, "Bogus": 1})
    assert [i["MessageId"].rsplit(".", 1)[1] for i in _ext(read_only)] == ["PropertyUnknown"] * 2
    assert read_only.body["error"]["code"].endswith("GeneralError")
    assert (await client.patch(GPU0, {})).status == 400
    async with client.http.patch(gb200.url + GPU0, data=b"{not json", headers=client.auth_headers()) as resp:
        assert resp.status == 400
        assert (await resp.json())["error"]["code"].endswith("MalformedJSON")
    assert gb200.state.caps["GPU_0"].set_point == 1200
    assert gb200.state.caps["CPU_1"].set_point == 420


async def test_module_caps_and_read_only_chassis(gb200: SimulatedBmc, api: Api) -> None:
    client = api(gb200)
    ok = await client.patch(MODULE0, {"PowerLimitWatts": {"SetPoint": 2000}})
    assert ok.status == 200
    assert gb200.state.caps["HGX_ProcessorModule_0"].set_point == 2000
    node = await client.patch(
        "/redfish/v1/Chassis/Chassis_0/EnvironmentMetrics", {"PowerLimitWatts": {"SetPoint": 5000}}
    )
    assert node.status == 405
    assert "error" in node.body
    assert (await client.post("/redfish/v1/Chassis/Chassis_0/EnvironmentMetrics" + CLEAR, {})).status == 405
    assert (await client.patch(f"{PROCS}/GPU_0", {"Name": "x"})).status == 405
    unknown = await client.get(f"{PROCS}/GPU_9/EnvironmentMetrics")
    assert unknown.status == 404 and unknown.body["error"]["code"].endswith("ResourceMissingAtURI")
    assert (await client.get("/redfish/v1/Nowhere")).status == 404


async def test_persistency_and_clear_oob_set_point(gb200: SimulatedBmc, api: Api) -> None:
    client = api(gb200)
    body = {"PowerLimitWatts": {"SetPoint": 650}, "Oem": {"Nvidia": {"PowerLimitPersistency": True}}}
    assert (await client.patch(GPU0, body)).status == 200
    doc = (await client.get(GPU0)).body
    # the set point writes D-Bus PowerCap alone: the ControlMode shown is unchanged
    assert doc["PowerLimitWatts"]["ControlMode"] == "Automatic"
    assert doc["Oem"]["Nvidia"]["RequestedPersistentPowerLimitWatts"] == 650
    # a processor's EnvironmentMetrics shows no PowerMode (NVIDIA bmcweb: the chassis's D-Bus power
    # mode, which a set point does not change)
    assert "PowerMode" not in doc["Oem"]["Nvidia"]
    target = doc["Actions"]["Oem"]["#NvidiaEnvironmentMetrics.ClearOOBSetPoint"]["target"]
    assert target == GPU0 + CLEAR

    cleared = await client.post(target, {})
    assert cleared.status == 200
    assert cleared.body["@Message.ExtendedInfo"][0]["MessageId"].endswith("Success")
    after = (await client.get(GPU0)).body
    assert after["PowerLimitWatts"]["SetPoint"] == after["PowerLimitWatts"]["DefaultSetPoint"] == 1200
    assert after["PowerLimitWatts"]["ControlMode"] == "Automatic"
    assert after["Oem"]["Nvidia"]["RequestedPersistentPowerLimitWatts"] is None
    assert (await client.post(target, {"Bogus": 1})).status == 400

    await client.patch(MODULE0, {"PowerLimitWatts": {"SetPoint": 1500}})
    assert (await client.post(MODULE0 + CLEAR)).status == 200
    assert gb200.state.caps["HGX_ProcessorModule_0"].set_point == 2820


async def test_only_a_gpu_shows_and_takes_a_persistency(gb200: SimulatedBmc, api: Api) -> None:
    """NVIDIA bmcweb shows `PowerLimitPersistency` and the requested limits only for an object with
    D-Bus `Control.Power.Persistency` (a captured GB300 tray: its GPUs, not its Grace CPUs nor its
    modules); a CPU's PATCH reads the persistency and drops it, a chassis' PATCH knows no such key
    and refuses `PowerMode` as not writable (environment_metrics.hpp)."""
    client = api(gb200)
    for uri in (CPU1, MODULE0):
        nvidia = (await client.get(uri)).body["Oem"]["Nvidia"]
        assert set(nvidia) == {"@odata.type"}, (uri, nvidia)
    persistent = {"PowerLimitWatts": {"SetPoint": 400}, "Oem": {"Nvidia": {"PowerLimitPersistency": True}}}
    assert (await client.patch(CPU1, persistent)).status == 200
    assert gb200.state.caps["CPU_1"].set_point == 400 and not gb200.state.caps["CPU_1"].persistent
    refused = await client.patch(MODULE0, {**persistent, "PowerLimitWatts": {"SetPoint": 2000}})
    assert refused.status == 400 and _ext(refused)[0]["MessageId"].endswith("PropertyUnknown")
    mode = await client.patch(MODULE0, {"Oem": {"Nvidia": {"PowerMode": "MaxQ"}}})
    assert mode.status == 400 and _ext(mode)[0]["MessageId"].endswith("PropertyNotWritable")
    assert gb200.state.caps["HGX_ProcessorModule_0"].set_point == 2820


async def test_workload_power_profiles(gb200: SimulatedBmc, api: Api) -> None:
    client = api(gb200)
    doc = (await client.get(WPPS)).body
    assert doc["@odata.type"] == "#NvidiaWorkloadPower.v1_0_0.NvidiaWorkloadPower"
    assert doc["SupportedProfileMask"] == format_mask(SUPPORTED_MASK)
    assert int(doc["RequestedProfileMask"], 16) == 0 == int(doc["EnforcedProfileMask"], 16)
    enable = doc["Actions"]["#NvidiaWorkloadPower.EnableProfiles"]["target"]
    disable = doc["Actions"]["#NvidiaWorkloadPower.DisableProfiles"]["target"]

    # bit n = NVML profile id n; MAX_Q (1) outranks MAX_P (0), which it conflicts with
    assert (await client.post(enable, {"ProfileMask": "0x23"})).status == 200
    doc = (await client.get(WPPS)).body
    assert int(doc["RequestedProfileMask"], 16) == 0x23
    assert int(doc["EnforcedProfileMask"], 16) == 0x22
    assert len(doc["RequestedProfileMask"]) == 66
    assert (await client.post(disable, {"ProfileMask": "0x2"})).status == 200
    state = gb200.state.describe()["profiles"]["GPU_1"]
    assert int(state["requested"], 16) == 0x21
    assert int(state["enforced"], 16) == 0x21
    assert int((await client.get(WPPS.replace("GPU_1", "GPU_0"))).body["RequestedProfileMask"], 16) == 0

    for bad in ("", "23", "0xZZ", "0x" + "1" * 65, 5):
        reply = await client.post(enable, {"ProfileMask": bad})
        assert reply.status == 400, bad
        assert _ext(reply)[0]["MessageId"].endswith("ActionParameterValueError")
    assert (await client.post(enable, {"ProfileMask": format_mask(1 << 200)})).status == 400
    assert (await client.post(enable, {})).status == 400
    info = (await client.get(WPPS + "/EnableProfilesActionInfo")).body
    assert info["Parameters"][0]["Name"] == "ProfileMask"
    profile = (await client.get(WPPS + "/Profiles/1")).body
    assert int(profile["ConflictingMask"], 16) == 0b1
    assert (await client.get(f"{PROCS}/CPU_0/Oem/Nvidia/WorkloadPowerProfile")).status == 404


async def test_readings_vary_stay_under_cap_and_energy_accumulates(gb200: SimulatedBmc, api: Api) -> None:
    client = api(gb200)
    await client.patch(GPU0, {"PowerLimitWatts": {"SetPoint": 300}})
    first = (await client.get(GPU0)).body
    await asyncio.sleep(0.2)
    second = (await client.get(GPU0)).body
    for doc in (first, second):
        assert 0 < doc["PowerWatts"]["Reading"] < 300
    assert second["PowerWatts"]["Reading"] != first["PowerWatts"]["Reading"]
    assert second["EnergyJoules"]["Reading"] > first["EnergyJoules"]["Reading"]
    await client.patch(MODULE0, {"PowerLimitWatts": {"SetPoint": 500}})
    module = (await client.get(MODULE0)).body
    assert module["PowerWatts"]["Reading"] < 500
    node = (await client.get("/redfish/v1/Chassis/Chassis_0/EnvironmentMetrics")).body
    hgx = (await client.get("/redfish/v1/Chassis/HGX_Chassis_0/EnvironmentMetrics")).body
    assert 0 < hgx["PowerWatts"]["Reading"] < node["PowerWatts"]["Reading"] < 6667
    assert "PowerLimitWatts" not in node
