"""The write gate's rules, on the requests each mechanism builds from a resource as read: a property
the GET did not show is never written (restore puts back exactly what was there), a POST goes only to
an action the resource lists, a limit the resource does not carry is never written."""

from __future__ import annotations

from plugins.redfish._discovery.layout import MECH_CONTROL, MECH_EM, Component
from plugins.redfish._platforms import ControlMechanism, EnvironmentMetricsMechanism, Prior
from plugins.redfish._platforms._base import CapRequest, tightest
from plugins.redfish._platforms.gate import absent_property, refusal
from plugins.redfish._wire.document import Document

CONTROL = "/redfish/v1/Chassis/1/Controls/PowerLimit"
EM = "/redfish/v1/Chassis/HGX_ProcessorModule_0/EnvironmentMetrics"
NODE = Component("node", "node", 0, "PowerLimit", MECH_CONTROL, CONTROL)
MODULE = Component("module/0", "module", 0, "HGX_ProcessorModule_0", MECH_EM, EM)


def test_a_control_without_control_mode_is_set_and_restored_with_its_set_point_alone() -> None:
    mech = ControlMechanism()
    doc = Document(CONTROL, {"ControlType": "Power", "SetPoint": None, "AllowableMin": 100})
    current = mech.read(NODE, doc)
    assert current.offered and current.mode is None
    write = mech.set_request(NODE, 500, current)
    assert write.body == {"SetPoint": 500}
    assert refusal(mech, NODE, write, doc) == ""
    restore = mech.restore_request(NODE, current.prior(), current, doc)
    assert restore.body == {"SetPoint": None}  # no ControlMode where the first GET showed none
    assert refusal(mech, NODE, restore, doc) == ""


def test_a_control_restores_the_mode_it_showed() -> None:
    mech = ControlMechanism()
    doc = Document(CONTROL, {"ControlType": "Power", "SetPoint": 400, "ControlMode": "Manual"})
    current = mech.read(NODE, doc)
    restore = mech.restore_request(NODE, Prior(400.0, True, "Manual"), current, doc)
    assert restore.body == {"SetPoint": 400, "ControlMode": "Manual"}


def test_a_clear_that_would_write_an_absent_control_mode_is_refused() -> None:
    mech = EnvironmentMetricsMechanism()
    # no DefaultSetPoint, no clear action, no ControlMode: nothing that puts "no cap" back
    doc = Document(EM, {"PowerLimitWatts": {"SetPoint": 300, "AllowableMin": 50, "AllowableMax": 420}})
    current = mech.read(MODULE, doc)
    clear = mech.restore_request(MODULE, Prior(None, False), current, doc)
    assert clear.body == {"PowerLimitWatts": {"ControlMode": "Disabled"}}
    why = refusal(mech, MODULE, clear, doc)
    assert (
        why == f"{EM} does not carry PowerLimitWatts/ControlMode, which the write would set; nothing written"
    )


def test_a_resource_without_the_limit_and_unlisted_actions_are_refused() -> None:
    mech = EnvironmentMetricsMechanism()
    bare = Document(EM, {"PowerWatts": {"Reading": 300}})
    assert not mech.read(MODULE, bare).offered
    set_it = mech.set_request(MODULE, 300, mech.read(MODULE, bare))
    assert (
        refusal(mech, MODULE, set_it, bare)
        == f"{EM} carries no PowerLimitWatts: the BMC offers no limit there; nothing written"
    )
    limited = Document(EM, {"PowerLimitWatts": {"SetPoint": 300}})
    guessed = CapRequest("POST", f"{EM}/Actions/Oem/NvidiaEnvironmentMetrics.ClearOOBSetPoint", {})
    assert "is not an action" in refusal(mech, MODULE, guessed, limited)
    elsewhere = CapRequest(
        "PATCH", "/redfish/v1/Chassis/HGX_ProcessorModule_1/EnvironmentMetrics", set_it.body
    )
    assert "is not the resource whose limit was read" in refusal(mech, MODULE, elsewhere, limited)


def test_array_members_are_checked_where_the_patch_names_them() -> None:
    shown = {"PowerControl": [{"PowerLimit": {"LimitInWatts": None}}, {"Name": "CPU"}]}
    assert absent_property({"PowerControl": [{}, {"Name": "x"}]}, shown) == ""
    assert absent_property({"PowerControl": [{"PowerLimit": {"LimitException": "NoAction"}}]}, shown) == (
        "PowerControl/0/PowerLimit/LimitException"
    )
    assert absent_property({"PowerControl": [{}, {}, {"PowerLimit": {}}]}, shown) == "PowerControl/2"


def test_the_tightest_published_range_stands() -> None:
    low, high = tightest(
        [(None, "AllowableMin"), (675.0, "CapacityMinAC"), (0.0, "MinLimitInWatts")],
        [(782.0, "CapacityMaxAC"), (750.0, "PowerCapacityWatts")],
    )
    assert low == (675.0, "CapacityMinAC") and high == (750.0, "PowerCapacityWatts")
