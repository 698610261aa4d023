"""The node's range is the BMC's (the sum of a GB200 tray's module limits), from the first request
on: the spec made from it is made once per operation and again whenever the readings differ."""

from __future__ import annotations

from plugins.base import Allocation, PolicyAction, PolicyChange
from tests.plugins.redfish.harness import Harness
from tests.plugins.redfish.platforms.test_gb200 import node_policy

SET = PolicyAction.SET
MODEL = {"Model": "GB200", "Name": "node0", "spec": {"minLoadWatts": 1000, "maxLoadWatts": 6667}}


async def test_the_node_range_is_the_bmcs_from_the_first_request_and_follows_its_readings(
    gb200: Harness,
) -> None:
    bmc = gb200.fleet.bmcs[0]
    # the tray's two modules allow 450..2820 W each: 900..5640 W, not the model's 1000..6667 W;
    # the model's range refuses 7000 W, so the modules' limits are read first; 6000 W, then stored
    for group, watts in (("first", 7000), ("second", 6000)):
        out = await gb200.call(
            "activate_allocation", bmc, Allocation(group, PolicyChange(SET, node_policy(watts))), model=MODEL
        )
        assert not out.result.ok and "allowed 900..5640 W" in out.result.error, out.result.error
    out = await gb200.call(
        "activate_allocation", bmc, Allocation("third", PolicyChange(SET, node_policy(5000)))
    )
    assert out.result.ok, out.result.error
    assert bmc.state.caps["HGX_ProcessorModule_0"].set_point == 2500
    # a module whose stored reading shows another range: the next request's node range follows it
    state = gb200.states[bmc.index]
    state["readings"]["module/0"]["max"] = 2000.0
    out = await gb200.call(
        "activate_allocation", bmc, Allocation("fourth", PolicyChange(SET, node_policy(5000)))
    )
    assert not out.result.ok and "allowed 900..4820 W" in out.result.error, out.result.error
