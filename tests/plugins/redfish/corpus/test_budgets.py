"""Budgets are never node caps: a limit that covers more than this node is refused with its reason,
shown by `inventory check --login`, and never written (the simulator logs every PATCH and POST).

The captures are real (tests/corpus/redfish); where no capture shows the shape, a copy of one gets
the documents the vendor's published schema describes, served by the same simulator.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from controller.cli import main
from plugins.base import PolicyAction, PolicyChange
from tests.plugins.redfish.corpus.cases import CORPUS, policy

ACC = "/redfish/v1/Chassis/1/Power/AccPowerService"
MODEL = {"Model": "auto", "Name": "apollo"}


def _apollo(tmp_path: Path, nodes: list[int]) -> Path:
    """The captured XL675d (iLO 5 2.70) with an `AccPowerService/NodesInfo` listing `nodes`.

    NOTE: the shape is HPE's `HpeServerAccPowerNodesInfo.v1_0_0` (iLO 5 resource definitions,
    HewlettPackard/ilo-rest-api-docs `source/includes/_ilo5_resourcedefns.md`: `MaxSupportedNodes`,
    `NodeInfoList[].NodeNumber`, `Throttle`, `WarningStatus`); the capture links it but did not keep
    it. Four nodes is an Apollo 2000 chassis, whose zone 0 is "the entire chassis".
    """
    capture = tmp_path / "apollo"
    shutil.copytree(CORPUS / "hpe-xl675d-a100", capture)
    doc = {
        "@odata.context": "/redfish/v1/$metadata#HpeServerAccPowerNodesInfo.HpeServerAccPowerNodesInfo",
        "@odata.id": f"{ACC}/NodesInfo/",
        "@odata.type": "#HpeServerAccPowerNodesInfo.v1_0_0.HpeServerAccPowerNodesInfo",
        "Id": "NodesInfo",
        "MaxSupportedNodes": 4,
        "Name": "NodesInfo Resource for AccPowerService",
        "NodeInfoList": [{"NodeNumber": n, "Throttle": 0, "WarningStatus": False} for n in nodes],
    }
    target = capture / "Chassis/1/Power/AccPowerService/NodesInfo"
    target.mkdir(parents=True)
    (target / "index.json").write_text(json.dumps(doc))
    return capture


async def test_an_acc_power_zone_shared_by_four_nodes_is_refused_and_never_written(
    make_harness: Callable[..., Any], tmp_path: Path
) -> None:
    async with make_harness(n=1, model=f"mockup:{_apollo(tmp_path, [1, 2, 3, 4])}") as h:
        bmc = h.fleet.bmcs[0]
        for watts in (400, 450):
            change = PolicyChange(PolicyAction.SET, policy(node=watts))
            out = await h.call("set_policy", bmc, change, model=MODEL)
            assert not out.result.ok
            assert "node power limit: unsupported on this platform" in out.result.error
            assert "zone 0 is the chassis power budget shared by nodes 1, 2, 3, 4" in out.result.error
            assert "never written as this node's cap" in out.result.error
        out = await h.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(cpu=200)), model=MODEL)
        assert not out.result.ok
        out = await h.call("unset_policy", bmc, PolicyChange(PolicyAction.UNSET, None), model=MODEL)
        assert bmc.state.writes == []  # not one POST to the zone, for any request
        groups = out.state["discovery"]["groups"]
        assert [(g["name"], g["covers"], g["limit_uri"]) for g in groups] == [
            ("AccPowerService zone 0", "nodes 1, 2, 3, 4", f"{ACC}/PowerLimit")
        ]


async def test_an_acc_power_zone_of_this_node_alone_stays_the_node_cap(
    make_harness: Callable[..., Any], tmp_path: Path
) -> None:
    async with make_harness(n=1, model=f"mockup:{_apollo(tmp_path, [1])}") as h:
        bmc = h.fleet.bmcs[0]
        out = await h.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(node=2000)), model=MODEL)
        assert out.result.ok, out.result.error
        assert [(m, p) for m, p, _ in bmc.state.writes] == [
            ("POST", f"{ACC}/PowerLimit/Actions/HpeServerAccPowerLimit.ConfigurePowerLimit")
        ]
        evidence = "\n".join(out.state["discovery"]["evidence"])
        assert "NodesInfo lists node 1 only" in evidence


async def test_inventory_check_login_shows_the_shared_zone_and_why_the_node_cap_is_refused(
    make_harness: Callable[..., Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with make_harness(n=1, model=f"mockup:{_apollo(tmp_path, [1, 2, 3, 4])}") as h:
        inventory = tmp_path / "inventory.toml"
        secrets = h.fleet.write_inventory(inventory, tmp_path / "secrets")
        args = ["--json", "inventory", "check", "--inventory", str(inventory)]
        code = await asyncio.to_thread(main, [*args, "--secrets-dir", str(secrets), "--login"])
        out = json.loads(capsys.readouterr().out)
        assert code == 0 and out["ok"], out
        lines = out["devices"][0]["caps"]
        node = next(line for line in lines if line.startswith("node: refused"))
        assert "shared by nodes 1, 2, 3, 4" in node
        assert (
            f"group budget AccPowerService zone 0: {ACC}/PowerLimit (limits nodes 1, 2, 3, 4; "
            "never written as one cap)"
        ) in lines
        assert h.fleet.bmcs[0].state.writes == []


async def test_a_chassis_that_names_another_nodes_system_is_a_shared_budget_never_written(
    make_harness: Callable[..., Any], tmp_path: Path
) -> None:
    # the captured EX425 controller, its Node0 chassis naming both nodes (an enclosure's shape)
    capture = tmp_path / "ex425"
    shutil.copytree(CORPUS / "cray-ex425", capture)
    doc_path = capture / "Chassis/Node0/index.json"
    doc = json.loads(doc_path.read_text())
    doc.setdefault("Links", {})["ComputerSystems"] = [
        {"@odata.id": "/redfish/v1/Systems/Node0"},
        {"@odata.id": "/redfish/v1/Systems/Node1"},
    ]
    doc_path.write_text(json.dumps(doc))
    async with make_harness(n=1, model=f"mockup:{capture}") as h:
        h.options["system"] = "Node0"
        bmc = h.fleet.bmcs[0]
        out = await h.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(node=500)), model=MODEL)
        assert not out.result.ok
        assert "chassis Node0 names systems Node0, Node1" in out.result.error
        assert "a budget shared by several nodes, never written as this node's cap" in out.result.error
        assert bmc.state.writes == []
        # Node1's own chassis (named as its system, naming no other) still carries Node1's cap
        h.states.clear()
        h.options["system"] = "Node1"
        out = await h.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(node=500)), model=MODEL)
        assert out.result.ok, out.result.error
        assert [p for _, p, _ in bmc.state.writes] == ["/redfish/v1/Chassis/Node1/Controls/NodePowerLimit"]


async def test_a_chassis_naming_a_system_beyond_this_node_is_never_capped_for_it(
    make_harness: Callable[..., Any], tmp_path: Path
) -> None:
    # the captured DL325 (iLO 5), its chassis naming a second system the BMC does not serve
    capture = tmp_path / "dl325"
    shutil.copytree(CORPUS / "hpe-dl325-gen10plus", capture)
    doc_path = capture / "Chassis/1/index.json"
    doc = json.loads(doc_path.read_text())
    doc["Links"]["ComputerSystems"].append({"@odata.id": "/redfish/v1/Systems/2"})
    doc_path.write_text(json.dumps(doc))
    async with make_harness(n=1, model=f"mockup:{capture}") as h:
        bmc = h.fleet.bmcs[0]
        out = await h.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(node=500)), model=MODEL)
        assert not out.result.ok
        assert (
            "chassis 1 names systems 1, 2: its limits are a budget shared by several nodes"
            in out.result.error
        )
        assert bmc.state.writes == []
