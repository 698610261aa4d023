"""Served captures take writes as the vendors' code does (`_vendor_writes`), and log every write."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bmcsim import SimulatorFleet
from tests.bmcsim.conftest import Api

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "redfish"
NODE = "/redfish/v1/Chassis/Node0/Controls/NodePowerLimit"


async def test_cray_ex_controls_follow_hpes_emulator(cert_dir: Path, api: Callable[..., Api]) -> None:
    async with SimulatorFleet(n=1, model=f"mockup:{CORPUS / 'cray-ex235a'}", cert_dir=cert_dir) as fleet:
        bmc = fleet.bmcs[0]
        client = api(bmc)
        # a disabled control stays disabled unless the PATCH names another mode
        assert (await client.patch(NODE, {"SetPoint": 1000})).status == 400
        # a null SetPoint fails HPE's range comparison: an internal error
        assert (await client.patch(NODE, {"SetPoint": None, "ControlMode": "Automatic"})).status == 500
        assert (await client.patch(NODE, {"SetPoint": 10, "ControlMode": "Automatic"})).status == 400
        assert (await client.patch(NODE, {"SetPoint": 1000, "ControlMode": "Automatic"})).status == 200
        doc = (await client.get(NODE)).body
        assert (doc["SetPoint"], doc["ControlMode"]) == (1000, "Automatic")
        assert (await client.patch(NODE, {"ControlMode": "Disabled"})).status == 200
        doc = (await client.get(NODE)).body
        assert (doc["SetPoint"], doc["ControlMode"]) == (0, "Disabled")  # Disabled sets 0
        assert (await client.patch(NODE, {"ControlMode": "Automatic"})).status == 200
        assert (await client.get(NODE)).body["SetPoint"] == 2754  # a mode alone: SettingRangeMax
        # every write is logged, refused or not
        assert [(m, p) for m, p, _ in bmc.state.writes] == [("PATCH", NODE)] * 6


async def test_apollo_configure_power_limit_and_bmcweb_disabled_capping(
    cert_dir: Path, api: Callable[..., Api]
) -> None:
    limit = "/redfish/v1/Chassis/1/Power/AccPowerService/PowerLimit"
    action = f"{limit}/Actions/HpeServerAccPowerLimit.ConfigurePowerLimit"
    models = [f"mockup:{CORPUS / 'hpe-xl675d-a100'}", f"mockup:{CORPUS / 'openbmc-stock'}"]
    async with SimulatorFleet(n=2, model=models, cert_dir=cert_dir) as fleet:
        apollo, openbmc = (api(b) for b in fleet.bmcs)
        assert (await apollo.post(action, {"PowerLimits": [{"PowerLimitInWatts": 2000}]})).status == 400
        body = {"PowerLimits": [{"PowerLimitInWatts": 2000, "ZoneNumber": 0}]}
        assert (await apollo.post(action, body)).status == 200
        assert (await apollo.get(limit)).body["PowerLimits"][0]["PowerLimitInWatts"] == 2000
        power = "/redfish/v1/Chassis/chassis/Power"
        reply = await openbmc.patch(power, {"PowerControl": [{"PowerLimit": {"LimitInWatts": 500}}]})
        assert reply.status == 400
        assert "ActionNotSupported" in str(reply.body)
        assert "LimitInWatts" not in (await openbmc.get(power)).body["PowerControl"][0]["PowerLimit"]
