"""Layouts the plugin must not assume away (DMTF mockups, real BMCs): each gives the right result."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from bmcsim import BmcConfig
from plugins.base import Empty, GpuMetricsQuery, PolicyAction, PolicyChange
from plugins.redfish._discovery.layout import nvidia_node_metrics_uri
from plugins.redfish._wire.document import Document
from tests.plugins.redfish.platforms.test_controls_power_node_manager import policy

SET = PolicyAction.SET


def _fleet(model: str, *layout: str, **config: Any) -> dict[str, Any]:
    return {"configs": [BmcConfig(model=model, layout=frozenset(layout), **config)]}


async def test_no_environment_metrics_link_reads_the_control_instead(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(**_fleet("dmtf", "no-em-link")) as h:
        bmc = h.fleet.bmcs[0]
        out = await h.call("std_metrics", bmc, Empty())
        assert out.result.ok and out.result.error == "", out.result.error
        assert out.result.metrics.power_watts > 0  # from the node Control's Sensor
        assert ("GET", "/redfish/v1/Chassis/1/EnvironmentMetrics") not in bmc.stats.calls
        assert bmc.stats.responses[404] == 0


async def test_power_capacity_0_is_unknown_not_a_ceiling(make_harness: Callable[..., Any]) -> None:
    async with make_harness(**_fleet("dmtf-legacy", "capacity-0")) as h:
        bmc = h.fleet.bmcs[0]
        out = await h.call("set_policy", bmc, PolicyChange(SET, policy(node=400)))
        assert out.result.ok, out.result.error
        assert bmc.state.node_cap.set_point == 400
        # the device spec's limits stand in for the missing bound (spec: node 200..1200 W)
        out = await h.call("set_policy", bmc, PolicyChange(SET, policy(node=1500)))
        assert not out.result.ok
        assert out.result.error == "node: 1500 W is above the maximum of 1200 W (allowed 200..1200 W)"
        assert bmc.state.node_cap.set_point == 400 and "PowerCapacityWatts" not in out.result.error


async def test_missing_bounds_fall_back_to_the_spec_else_a_safety_floor(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(**_fleet("dmtf-legacy", "no-bounds")) as h:
        bmc = h.fleet.bmcs[0]
        spec = {"Model": "auto", "Name": "n", "spec": {"minLoadWatts": 300, "maxLoadWatts": 1100}}
        out = await h.call("set_policy", bmc, PolicyChange(SET, policy(node=1)), model=spec)
        assert not out.result.ok and bmc.state.node_cap.set_point is None
        assert out.result.error == "node: 1 W is below the minimum of 300 W (allowed 300..1100 W)"
        # no bounds anywhere: the safety floor refuses a 1 W cap with a clear message
        bare = {"Model": "auto", "Name": "n"}
        h.states.clear()
        out = await h.call("set_policy", bmc, PolicyChange(SET, policy(node=1)), model=bare)
        assert not out.result.ok and bmc.state.node_cap.set_point is None
        assert "below the safety floor of 100 W" in out.result.error and "min_cap_watts" in out.result.error
        out = await h.call("set_policy", bmc, PolicyChange(SET, policy(node=250)), model=bare)
        assert out.result.ok and bmc.state.node_cap.set_point == 250


async def test_a_smartnic_system_is_not_the_nodes_cpu(make_harness: Callable[..., Any]) -> None:
    async with make_harness(**_fleet("dmtf", "smartnic")) as h:
        bmc = h.fleet.bmcs[0]
        out = await h.call("std_metrics", bmc, Empty())
        assert out.result.ok, out.result.error
        cpus = out.state["discovery"]["cpus"]
        assert [c["name"] for c in cpus] == ["CPU1", "CPU2"]
        assert all(c["resource_uri"].startswith("/redfish/v1/Systems/1/") for c in cpus)
        assert ("GET", "/redfish/v1/Systems/SmartNIC/Processors") not in bmc.stats.calls
        out = await h.call("set_policy", bmc, PolicyChange(SET, policy(node=900, cpu=500)))
        assert out.result.ok, out.result.error
        assert (
            bmc.state.caps["CPU1_PowerLimit"].set_point == 250 == bmc.state.caps["CPU2_PowerLimit"].set_point
        )


async def test_several_chassis_take_the_cap_of_the_nodes_own_chassis(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(**_fleet("dmtf-legacy", "multi-chassis")) as h:
        bmc = h.fleet.bmcs[0]
        out = await h.call("set_policy", bmc, PolicyChange(SET, policy(node=700)))
        assert out.result.ok, out.result.error
        assert bmc.state.node_cap.set_point == 700
        # the enclosure's cap (listed first) is not the node's: never even read
        assert ("GET", "/redfish/v1/Chassis/Enclosure/Power") not in bmc.stats.calls
        assert "EnclosureLimit" not in bmc.state.caps
        assert out.state["discovery"]["node"][0]["limit_uri"] == "/redfish/v1/Chassis/1/Power"


async def test_absent_readings_are_reported_as_absent_never_0(make_harness: Callable[..., Any]) -> None:
    async with make_harness(**_fleet("dmtf-legacy", "absent-readings")) as h:
        out = await h.call("std_metrics", h.fleet.bmcs[0], Empty())
        assert out.result.ok  # everything could be read; the BMC just does not report node power
        assert "not reported by the BMC (absent, not 0): node power" in out.result.error
    async with make_harness(**_fleet("gb200", "absent-readings")) as h:
        bmc = h.fleet.bmcs[0]
        out = await h.call("gpu_metrics", bmc, GpuMetricsQuery(gpu_ids=(0, 1)))
        assert not out.result.ok and out.result.metrics == ()  # no GPU reported as 0 W
        assert "absent, not 0): GPU 0 power, GPU 1 power" in out.result.error
        out = await h.call("std_metrics", bmc, Empty())
        assert "GPU 3 power" in out.result.error and "CPU 1 power" in out.result.error
        assert "node power" in out.result.error


async def test_automatic_mode_caps_work_and_restore_exactly(make_harness: Callable[..., Any]) -> None:
    async with make_harness(**_fleet("dmtf", control_quirk="automatic")) as h:
        bmc = h.fleet.bmcs[0]
        node = bmc.state.node_cap
        node.set_point, node.control_mode = 900, "Automatic"  # a cap someone set before devicectl
        out = await h.call("set_policy", bmc, PolicyChange(SET, policy(node=600)))
        assert out.result.ok, out.result.error
        assert (node.set_point, node.control_mode) == (600, "Automatic")
        assert out.state["priors"]["topology"]["node"] == {
            "watts": 900.0,
            "capped": True,
            "mode": "Automatic",
            "uri": "/redfish/v1/Chassis/1/Controls/PowerLimit",
        }
        out = await h.call("unset_policy", bmc, PolicyChange(PolicyAction.UNSET, None))
        assert out.result.ok, out.result.error
        assert (node.set_point, node.control_mode) == (900, "Automatic")
        # from no cap at all: restored to exactly that (SetPoint null, Disabled)
        node.set_point, node.control_mode = None, "Disabled"
        node.revision += 1  # changed behind our back: its ETag changes, as on a real BMC
        await h.call("set_policy", bmc, PolicyChange(SET, policy(node=650)))
        assert (node.set_point, node.control_mode) == (650, "Automatic")
        await h.call("unset_policy", bmc, PolicyChange(PolicyAction.UNSET, None))
        assert (node.set_point, node.control_mode) == (None, "Disabled")
        assert bmc.stats.responses[400] == 0  # Manual (not allowed here) was never sent


async def test_a_failed_read_of_a_module_or_legacy_limit_is_named_in_std_metrics(
    make_harness: Callable[..., Any], gb200: Any
) -> None:
    from bmcsim import FaultMode

    # a processor module's limit (GB200: the node cap's share) that answers 404: named, with the answer
    bmc = gb200.fleet.bmcs[0]
    module = "/redfish/v1/Chassis/HGX_ProcessorModule_1/EnvironmentMetrics"
    assert (await gb200.call("std_metrics", bmc, Empty())).result.error == ""  # discovered with it
    bmc.faults.set(FaultMode.NOT_FOUND, path_contains=module)
    out = (await gb200.call("std_metrics", bmc, Empty())).result
    assert out.ok and "module 1 absent: " in out.error and f"GET {module} failed: HTTP 404" in out.error, (
        out.error
    )
    # the legacy Power limit (the node cap) that is not a Redfish document: named unknown
    async with make_harness(**_fleet("dmtf-legacy")) as h:
        legacy = h.fleet.bmcs[0]
        first = (await h.call("std_metrics", legacy, Empty())).result
        assert first.ok and " unknown: " not in first.error, first.error
        legacy.faults.set(FaultMode.INVALID_JSON, path_contains="/redfish/v1/Chassis/1/Power")
        out = (await h.call("std_metrics", legacy, Empty())).result
        assert "node limit unknown: " in out.error, out.error


def _chassis(cid: str, **body: Any) -> Document:
    path = f"/redfish/v1/Chassis/{cid}"
    return Document(path, {"@odata.id": path, "Id": cid, **body})


@pytest.mark.parametrize(
    ("ids", "read", "uri"),
    [
        # the collection only (the NVIDIA walk): the path dps.md §7 allows for the tray's chassis
        (["HGX_GPU_0", "Chassis_0"], [], "/redfish/v1/Chassis/Chassis_0/EnvironmentMetrics"),
        (["HGX_Chassis_0", "HGX_GPU_0"], [], "/redfish/v1/Chassis/HGX_Chassis_0/EnvironmentMetrics"),
        # read: only what the chassis links
        (
            ["Chassis_0"],
            [_chassis("Chassis_0", EnvironmentMetrics={"@odata.id": "/redfish/v1/Chassis/Chassis_0/EM"})],
            "/redfish/v1/Chassis/Chassis_0/EM",
        ),
        (
            ["Chassis_0", "HGX_Chassis_0"],
            [_chassis("Chassis_0")],  # links none: the baseboard's, as DPS allows it
            "/redfish/v1/Chassis/HGX_Chassis_0/EnvironmentMetrics",
        ),
        (
            ["Chassis_0", "Tray"],
            [
                _chassis("Chassis_0"),
                _chassis(
                    "Tray",
                    ChassisType="RackMount",
                    EnvironmentMetrics={"@odata.id": "/redfish/v1/Chassis/Tray/EM"},
                ),
            ],
            "/redfish/v1/Chassis/Tray/EM",
        ),
        # no chassis DPS names and none read that links one: no reading, never a guessed path
        (["DGX", "HGX_GPU_0"], [], ""),
        (["Chassis_0"], [_chassis("Chassis_0")], ""),
    ],
)
def test_nvidias_node_reading_is_a_linked_or_dps_documented_resource_never_a_guess(
    ids: list[str], read: list[Document], uri: str
) -> None:
    assert nvidia_node_metrics_uri([_chassis(i) for i in ids], read) == uri
