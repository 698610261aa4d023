"""Report what is in force: a disabled control is "no cap" and a vendor no-limit sentinel "no limit",
never watts, in the response, the state, the read-back and the metrics (captures of real BMCs in
tests/corpus/redfish, each given the value firmware was seen to show, served by the simulator)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from plugins.base import Empty, GpuPoliciesChange, GpuPolicy, PolicyAction, PolicyChange, PowerLimit
from tests.plugins.redfish.corpus.cases import CORPUS, policy

NODE_LIMIT = "/redfish/v1/Chassis/Node0/Controls/NodePowerLimit"
GPU_EM = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_0/EnvironmentMetrics"


def _edit(tmp_path: Path, name: str, path: str, change: Callable[[dict[str, Any]], None]) -> Path:
    capture = tmp_path / name
    shutil.copytree(CORPUS / name, capture)
    file = capture / path.removeprefix("/redfish/v1/") / "index.json"
    doc = json.loads(file.read_text())
    change(doc)
    file.write_text(json.dumps(doc))
    return capture


def _stale_set_point(doc: dict[str, Any]) -> None:
    doc["SetPoint"] = 2203  # Disabled, with the last cap's SetPoint still shown


def _no_limit(doc: dict[str, Any]) -> None:
    doc["PowerLimitWatts"]["SetPoint"] = 4294967  # 0xFFFFFFFF mW in W: no limit


async def test_a_cray_control_back_in_disabled_reads_as_no_cap_not_its_stale_set_point(
    make_harness: Callable[..., Any], tmp_path: Path
) -> None:
    capture = _edit(tmp_path, "cray-ex235a", NODE_LIMIT, _stale_set_point)
    model = {"Model": "auto", "Name": "ex235a"}
    async with make_harness(n=1, model=f"mockup:{capture}") as h:
        bmc = h.fleet.bmcs[0]
        out = await h.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(node=1000)), model=model)
        assert out.result.ok, out.result.error
        assert out.result.node.applied_watts == 1000
        # what was there before is "no cap" (Disabled), whatever SetPoint it still showed
        assert out.state["priors"]["topology"]["node"]["watts"] is None
        # put back to Disabled outside devicectl, the last SetPoint kept as the firmware keeps it
        bmc.state.documents[NODE_LIMIT].update(ControlMode="Disabled", SetPoint=2203)
        out = await h.call("unset_policy", bmc, PolicyChange(PolicyAction.UNSET, None), model=model)
        assert out.result.ok, out.result.error
        assert [body for _, _, body in bmc.state.writes] == [{"SetPoint": 1000, "ControlMode": "Automatic"}]
        assert out.result.node.applied_watts == 0  # no cap in force (the wire has no null), not 2203
        assert out.result.power_cap_watts == 0
        assert "node" not in out.state.get("applied", {})
        assert out.state["readings"]["node"]["watts"] is None
        assert out.state["readings"]["node"]["capped"] is False


async def test_an_hgx_gpu_without_a_limit_reads_as_no_limit_and_is_restored_by_clearing(
    make_harness: Callable[..., Any], tmp_path: Path
) -> None:
    capture = _edit(tmp_path, "nvidia-gb300-nvl", GPU_EM, _no_limit)
    model = {"Model": "auto", "Name": "gb300"}
    async with make_harness(n=1, model=f"mockup:{capture}") as h:
        bmc = h.fleet.bmcs[0]
        out = await h.call("std_metrics", bmc, Empty(), model=model)
        assert out.result.ok, out.result.error
        gpu0 = out.result.metrics.gpus[0]
        assert gpu0.limit_watts == 0  # no limit, never 4294967 W
        assert out.result.metrics.gpus[1].limit_watts == 1400
        change = GpuPoliciesChange("rg", PolicyAction.SET, None, (GpuPolicy(0, PowerLimit(watts=1000)),))
        out = await h.call("update_gpu_policies", bmc, change, model=model)
        assert all(r.ok for r in out.result.results), out.result
        assert next(iter(out.state["priors"].values()))["gpu/0"] == {
            "watts": None,
            "capped": False,
            "mode": "Automatic",
            "uri": "/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_0/EnvironmentMetrics",
            "persistency": "off",  # as the captured GB300 shows it
        }
        unset = GpuPoliciesChange("rg", PolicyAction.UNSET)
        out = await h.call("update_gpu_policies", bmc, unset, model=model)
        assert all(r.ok for r in out.result.results), out.result
        # put back by clearing devicectl's cap, never by writing the sentinel as a cap
        restore = bmc.state.writes[-1]
        assert restore[0] == "POST" and restore[1].endswith("NvidiaEnvironmentMetrics.ClearOOBSetPoint")
        assert not any(isinstance(b, dict) and "4294967" in json.dumps(b) for _, _, b in bmc.state.writes)
