"""Captures of real BMCs (tests/corpus/redfish): every request kind gives the right outcome, and no
write ever reaches a resource the request did not name (the simulator logs every PATCH and POST)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bmcsim import REAL_LAYOUTS
from controller.cli import main
from plugins.base import Empty, PolicyAction, PolicyChange
from plugins.redfish._wire.errors import ProtocolError
from tests.plugins.redfish.corpus.cases import (
    CASES,
    CORPUS,
    Case,
    Survey,
    allowed_writes,
    model_json,
    policy,
    survey,
    written_outside,
)
from tests.plugins.redfish.corpus.hardware import HARDWARE_DOC, render

#: the request steps and the component keys each names
NAMED = {
    "node": {"node"},
    "node 1 W": {"node"},
    "cpu": {"cpu/0", "cpu/1"},
    "gpu 0": {"gpu/0"},
    "gpu 0 1 W": {"gpu/0"},
}


def _check(found: Survey) -> None:
    case = found.case
    assert found.metrics_ok, found.metrics_error
    if case.power is None:
        assert "node power" in found.metrics_error  # absent, never reported as 0 W
    else:
        assert found.power == pytest.approx(case.power)
    for name, step in found.steps.items():
        keys = NAMED[name] if name != "cpu" else {c["key"] for c in found.discovery.get("cpus", ())}
        outside = written_outside(step.writes, allowed_writes(found.discovery, keys))
        assert outside == [], f"{case.id} {name}: wrote what the request did not name: {outside}"
        assert step.restored, f"{case.id} {name}: not restored exactly"
    for name in ("node 1 W", "gpu 0 1 W"):
        if name in found.steps:
            step = found.steps[name]
            assert not step.ok and step.writes == [], f"{case.id}: a 1 W cap was not refused: {step}"
    expected = {"node": (case.node, case.node_refusal), "gpu 0": (case.gpu, case.gpu_refusal)}
    expected["cpu"] = (case.cpu, "")
    for name, (watts, refusal) in expected.items():
        found_step = found.steps.get(name)
        if found_step is None:
            continue
        step = found_step
        if watts is not None:
            assert step.ok, f"{case.id} {name}: {step.error}"
            assert step.writes, f"{case.id} {name}: nothing was written"
        else:
            assert not step.ok and step.writes == [], f"{case.id} {name}: not refused: {step}"
            assert refusal in step.error, f"{case.id} {name}: {step.error}"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_a_real_capture_gives_the_right_outcome_and_writes_only_what_was_named(
    make_harness: Callable[..., Any], case: Case
) -> None:
    async with make_harness(n=1, model=f"mockup:{CORPUS / case.name}") as h:
        found = await survey(h, h.fleet.bmcs[0], case)
    _check(found)


async def test_cray_ex_caps_in_automatic_and_restores_disabled_as_the_firmware_takes_it(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(n=1, model=f"mockup:{CORPUS / 'cray-ex235a'}") as h:
        found = await survey(h, h.fleet.bmcs[0], CASES[0])
    node = found.steps["node"]
    uri = "/redfish/v1/Chassis/Node0/Controls/NodePowerLimit"
    # HPE's power service shapes (hms-power-control power-cap.go), never a null SetPoint
    assert node.writes == [
        ("PATCH", uri, {"SetPoint": 1000, "ControlMode": "Automatic"}),
        ("PATCH", uri, {"ControlMode": "Disabled"}),
    ]
    assert "SettingRangeMin of 764 W" in found.steps["node 1 W"].error
    # four Accelerator controls without RelatedItem for eight GPUs: none is taken for a GPU's cap
    evidence = "\n".join(found.discovery["evidence"])
    assert "Accelerator0PowerLimit: skipped: Control Accelerator0PowerLimit names no RelatedItem" in evidence


async def test_gb300_never_takes_a_cpu_or_group_control_for_another_components_cap(
    make_harness: Callable[..., Any],
) -> None:
    case = next(c for c in CASES if c.name == "nvidia-gb300-nvl")
    async with make_harness(n=1, model=f"mockup:{CORPUS / case.name}") as h:
        found = await survey(h, h.fleet.bmcs[0], case)
    every = [w for step in found.steps.values() for w in step.writes]
    assert every and not any("/Controls/" in path for _, path, _ in every)  # no TDP or budget Control
    assert [w[1] for w in found.steps["gpu 0"].writes] == [
        "/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_0/EnvironmentMetrics",
        "/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_0/EnvironmentMetrics/Actions/Oem/"
        "NvidiaEnvironmentMetrics.ClearOOBSetPoint",
    ]
    groups = found.discovery["groups"]
    assert [(g["name"], g["covers"]) for g in groups] == [("TotalGPU_Power_0", "gpu/0,gpu/1,gpu/2,gpu/3")]
    # node power from the tray's own chassis, not a cable cartridge without PowerWatts
    assert found.discovery["node_metrics"] == [
        "environment_metrics",
        "/redfish/v1/Chassis/Chassis_0/EnvironmentMetrics",
    ]
    evidence = "\n".join(found.discovery["evidence"])
    assert "TDPPowerVolatile_0: chosen: CPU 0's cap (RelatedItem CPU_0" in evidence


async def test_gb300_node_power_comes_from_the_link_its_chassis_shows_never_a_built_path(
    make_harness: Callable[..., Any], tmp_path: Path
) -> None:
    """The probed GB300 tray's chassis are read by the walk: node power is the EnvironmentMetrics
    `Chassis_0` links. Where that link is gone, no `Chassis_0/EnvironmentMetrics` is built from the
    name: the baseboard's own link, or none."""
    case = next(c for c in CASES if c.name == "nvidia-gb300-nvl")
    copy = tmp_path / case.name
    shutil.copytree(CORPUS / case.name, copy)
    tray = copy / "Chassis" / "Chassis_0" / "index.json"
    body = json.loads(tray.read_text())
    del body["EnvironmentMetrics"]
    tray.write_text(json.dumps(body))
    async with make_harness(n=1, model=f"mockup:{copy}") as h:
        found = await survey(h, h.fleet.bmcs[0], case)
    assert found.discovery["node_metrics"][1] != "/redfish/v1/Chassis/Chassis_0/EnvironmentMetrics"
    hgx = json.loads((copy / "Chassis" / "HGX_Chassis_0" / "index.json").read_text())
    linked = (hgx.get("EnvironmentMetrics") or {}).get("@odata.id", "")
    assert found.discovery["node_metrics"][1] == linked, (found.discovery["node_metrics"], linked)


def _module_controls(root: Path, *, extra: dict[str, Any] | None = None, drop: bool = False) -> None:
    """Change the GB300 capture's HGX_ProcessorModule_0 Controls: add a Control, or remove the
    collection (the BMC then answers 404)."""
    controls = root / "Chassis" / "HGX_ProcessorModule_0" / "Controls"
    if drop:
        (controls / "index.json").unlink()
        return
    assert extra is not None
    member = controls / extra["Id"]
    member.mkdir()
    (member / "index.json").write_text(json.dumps(extra))
    collection = json.loads((controls / "index.json").read_text())
    collection["Members"].append({"@odata.id": extra["@odata.id"]})
    collection["Members@odata.count"] = len(collection["Members"])
    (controls / "index.json").write_text(json.dumps(collection))


def _control(control_id: str, control_type: str) -> dict[str, Any]:
    uri = f"/redfish/v1/Chassis/HGX_ProcessorModule_0/Controls/{control_id}"
    return {
        "@odata.id": uri,
        "@odata.type": "#Control.v1_3_0.Control",
        "Id": control_id,
        "ControlType": control_type,
        "SetPoint": 1000 if control_type == "Power" else 2000,
    }


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        # NVIDIA bmcweb writes a module PATCH's SetPoint to every power Control the chassis lists
        ({"extra": _control("HGX_ProcessorModule_0_1", "Power")}, "Controls lists 2: HGX_ProcessorModule_0,"),
        ({"drop": True}, "HGX_ProcessorModule_0/Controls not read (absent)"),
        (None, ""),  # the capture as it is: one power Control
        ({"extra": _control("ClockLimit_0", "FrequencyMHz")}, ""),  # not a power Control
    ],
    ids=["two-power-controls", "controls-not-served", "as-captured", "a-clock-control"],
)
async def test_a_module_limit_is_a_node_cap_share_only_where_its_patch_sets_its_own_control_alone(
    make_harness: Callable[..., Any], tmp_path: Path, change: dict[str, Any] | None, refusal: str
) -> None:
    case = next(c for c in CASES if c.name == "nvidia-gb300-nvl")
    copy = _capture_copy(tmp_path, case.name)
    if change is not None:
        _module_controls(copy, **change)
    if refusal:
        case = replace(case, node=None, node_refusal="a processor module's limit cannot be written alone")
    async with make_harness(n=1, model=f"mockup:{copy}") as h:
        found = await survey(h, h.fleet.bmcs[0], case)
    _check(found)
    evidence = "\n".join(found.discovery["evidence"])
    module = "/redfish/v1/Chassis/HGX_ProcessorModule_0/EnvironmentMetrics"
    if refusal:
        assert refusal in found.steps["node"].error, found.steps["node"].error
        assert f"{module}: skipped: " in evidence
        assert not any(path.startswith(module) for step in found.steps.values() for _, path, _ in step.writes)
    else:
        assert f"HGX_ProcessorModule_0/Controls: the one power Control a PATCH of {module} sets" in evidence


async def test_a_hostile_module_controls_listing_is_read_within_bounds_and_refused(
    make_harness: Callable[..., Any], tmp_path: Path
) -> None:
    """A module chassis' Controls collection is the BMC's word: a member outside the Redfish tree
    (dot segments) is never requested, by the walk nor by the module's check, and of a listing of
    40 members the module's check reads no more than `MAX_MODULE_CONTROLS`; either way the module's
    limit is refused, never taken on a guess."""
    from plugins.redfish._platforms.nvidia_hgx import MAX_MODULE_CONTROLS

    case = next(c for c in CASES if c.name == "nvidia-gb300-nvl")
    copy = _capture_copy(tmp_path, case.name)
    controls = copy / "Chassis" / "HGX_ProcessorModule_0" / "Controls" / "index.json"
    collection = json.loads(controls.read_text())
    escape = "/redfish/v1/Chassis/HGX_ProcessorModule_0/Controls/../../../AccountService/Accounts"
    collection["Members"].append({"@odata.id": escape})
    controls.write_text(json.dumps(collection))
    many = copy / "Chassis" / "HGX_ProcessorModule_1" / "Controls" / "index.json"
    listing = json.loads(many.read_text())
    listing["Members"] += [
        {"@odata.id": f"/redfish/v1/Chassis/HGX_ProcessorModule_1/Controls/Extra_{i}"} for i in range(40)
    ]
    many.write_text(json.dumps(listing))
    case = replace(case, node=None, node_refusal="a processor module's limit cannot be written alone")
    async with make_harness(n=1, model=f"mockup:{copy}") as h:
        found = await survey(h, h.fleet.bmcs[0], case)
        asked = [path for (method, path), n in h.fleet.bmcs[0].stats.calls.items() if method == "GET" and n]
    _check(found)
    evidence = "\n".join(found.discovery["evidence"])
    assert "a link out of the Redfish tree, not followed" in evidence, evidence
    assert not any("AccountService" in p or ".." in p for p in asked), asked
    assert f"33 listed past the first {MAX_MODULE_CONTROLS}" in evidence, evidence


@pytest.mark.parametrize("bound", ["members of one collection", "reads of one discovery"])
async def test_a_bmc_past_discoverys_bounds_is_refused_whole_never_walked_in_part(
    make_harness: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bound: str
) -> None:
    """A BMC's listings bound nothing we read: a collection listing more than `MAX_MEMBERS`, or a
    walk that would make more than `MAX_READS` GETs, refuses the node's discovery with the reason,
    and nothing past the bound is requested nor any cap written (evidence with holes is no
    evidence)."""
    from plugins.redfish._discovery import walk

    case = next(c for c in CASES if c.name == "nvidia-gb300-nvl")
    copy = _capture_copy(tmp_path, case.name)
    if bound == "members of one collection":
        listing_file = copy / "Chassis" / "HGX_ProcessorModule_1" / "Controls" / "index.json"
        listing = json.loads(listing_file.read_text())
        extra = walk.MAX_MEMBERS + 1 - len(listing["Members"])
        listed = "/redfish/v1/Chassis/HGX_ProcessorModule_1/Controls/Extra_{}"
        listing["Members"] += [{"@odata.id": listed.format(i)} for i in range(extra)]
        listing_file.write_text(json.dumps(listing))
        said = (
            f"Chassis/HGX_ProcessorModule_1/Controls lists {walk.MAX_MEMBERS + 1} members, more than the "
            f"{walk.MAX_MEMBERS} discovery reads of one collection; refused rather than walked in part"
        )
    else:
        monkeypatch.setattr(walk, "MAX_READS", 60)  # the capture's walk makes 131
        said = "discovery would read more than 60 resources of this BMC; refused rather than walked in part"
    async with make_harness(n=1, model=f"mockup:{copy}") as h:
        bmc = h.fleet.bmcs[0]
        state: Any = bmc.state
        change = PolicyChange(PolicyAction.SET, policy(cpu=400))
        with pytest.raises(ProtocolError) as refused:
            await h.call("set_policy", bmc, change, model=model_json(case))
        asked = [path for (method, path), n in bmc.stats.calls.items() if method == "GET" and n]
    assert said in str(refused.value), refused.value
    assert state.writes == []
    assert not any("Extra_" in p for p in asked), asked
    discovery_reads = [p for p in asked if "SessionService" not in p]
    assert len(discovery_reads) <= (60 if bound == "reads of one discovery" else 131), len(discovery_reads)


@pytest.mark.parametrize("persistent", [False, True])
async def test_a_gb300_grace_cap_says_it_survives_resets_unless_that_was_asked(
    make_harness: Callable[..., Any], persistent: bool
) -> None:
    """A captured GB300's Grace CPU limit names its Control, `..._TDPPowerNonvolatile_0`: NVIDIA's
    bmcweb shows there only a persistent Control, and writes every power Control of the CPU with a
    PATCH of that limit (environment_util.hpp `getCpuPowerCapData`, environment_metrics.hpp). The
    cap's answer says it survives resets where `persistent_caps` did not ask for that."""
    case = next(c for c in CASES if c.name == "nvidia-gb300-nvl")
    async with make_harness(n=1, model=f"mockup:{CORPUS / case.name}") as h:
        bmc = h.fleet.bmcs[0]
        change = PolicyChange(PolicyAction.SET, policy(cpu=400))
        out = await h.call("set_policy", bmc, change, options={"persistent_caps": persistent})
        assert out.result.ok, out.result.error
        cpus = out.state["discovery"]["cpus"]
        assert [c["quirk"] for c in cpus] == ["nvidia-nonvolatile-cpu-limit"] * 2, cpus
        assert "TDPPowerNonvolatile_0: non-volatile" in cpus[0]["reason"], cpus[0]
        message = out.result.cpu.message
        said = "this cap survives BMC and host resets although persistent_caps is not set"
        assert (said in message) is not persistent, message
        assert "not shown" not in message, message  # known, not "not shown"
        await h.call("unset_policy", bmc, PolicyChange(PolicyAction.UNSET, None))


async def test_a_link_the_bmc_cannot_serve_is_absent_with_its_reason(
    make_harness: Callable[..., Any],
) -> None:
    case = next(c for c in CASES if c.name == "intel-s2600bp")
    async with make_harness(n=1, model=f"mockup:{CORPUS / case.name}") as h:
        found = await survey(h, h.fleet.bmcs[0], case)
    assert (
        "/redfish/v1/Chassis/RackMount: absent (the BMC answered 404 ResourceMissingAtURI)"
        in found.discovery["evidence"]
    )
    assert found.power == 148


def _capture_copy(tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copytree(CORPUS / name, target)
    return target


async def test_hard_power_off_is_replaced_by_no_action_and_restored_or_the_cap_refused(
    make_harness: Callable[..., Any], tmp_path: Path
) -> None:
    power = "/redfish/v1/Chassis/Self/Power"
    async with make_harness(n=1, model=f"mockup:{CORPUS / 'gigabyte-ami'}") as h:
        found = await survey(h, h.fleet.bmcs[0], next(c for c in CASES if c.name == "gigabyte-ami"))
    assert [body for _, _, body in found.steps["node"].writes] == [
        {"PowerControl": [{"PowerLimit": {"LimitInWatts": 600, "LimitException": "NoAction"}}]},
        {"PowerControl": [{"PowerLimit": {"LimitInWatts": 500, "LimitException": "HardPowerOff"}}]},
    ]
    # the captured 500 W asked again: not "already in force" while HardPowerOff stays
    async with make_harness(n=1, model=f"mockup:{CORPUS / 'gigabyte-ami'}") as h:
        bmc = h.fleet.bmcs[0]
        model = {"Model": "auto", "Name": "h262"}
        out = await h.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(node=500)), model=model)
        assert out.result.ok, out.result.error
        await h.call("unset_policy", bmc, PolicyChange(PolicyAction.UNSET, None), model=model)
        assert [body for _, _, body in bmc.state.writes] == [
            {"PowerControl": [{"PowerLimit": {"LimitInWatts": 500, "LimitException": "NoAction"}}]},
            {"PowerControl": [{"PowerLimit": {"LimitInWatts": 500, "LimitException": "HardPowerOff"}}]},
        ]
    # a resource that does not take NoAction: refused unless the inventory allows a power-off
    capture = _capture_copy(tmp_path, "gigabyte-ami")
    doc_path = capture / "Chassis/Self/Power/index.json"
    doc = json.loads(doc_path.read_text())
    doc["PowerControl"][0]["PowerLimit"]["LimitException@Redfish.AllowableValues"] = ["HardPowerOff"]
    doc_path.write_text(json.dumps(doc))
    async with make_harness(n=1, model=f"mockup:{capture}") as h:
        bmc = h.fleet.bmcs[0]
        model = {"Model": "auto", "Name": "h262"}
        out = await h.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(node=600)), model=model)
        assert not out.result.ok and bmc.state.writes == []
        assert "LimitException is HardPowerOff" in out.result.error
        assert "allow_power_off_on_limit = true" in out.result.error
        h.options["allow_power_off_on_limit"] = True
        out = await h.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(node=600)), model=model)
        assert out.result.ok, out.result.error
        assert bmc.state.writes == [
            ("PATCH", power, {"PowerControl": [{"PowerLimit": {"LimitInWatts": 600}}]})
        ]


async def test_two_nodes_behind_one_bmc_share_its_session_and_write_only_their_own_chassis(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(n=1, model=f"mockup:{CORPUS / 'cray-ex425'}") as h:
        bmc = h.fleet.bmcs[0]
        model = {"Model": "auto", "Name": "ex425"}
        outs = {}
        for system, watts in (("Node0", 500), ("Node1", 700)):
            ctx = replace(h.ctx(bmc, options={"system": system}, model=model), device_id=f"ex425-{system}")
            outs[system] = await h.plugin.set_policy(ctx, PolicyChange(PolicyAction.SET, policy(node=watts)))
            assert outs[system].result.ok, outs[system].result.error
        docs = bmc.state.documents
        assert docs["/redfish/v1/Chassis/Node0/Controls/NodePowerLimit"]["SetPoint"] == 500
        assert docs["/redfish/v1/Chassis/Node1/Controls/NodePowerLimit"]["SetPoint"] == 700
        assert [p for _, p, _ in bmc.state.writes] == [
            "/redfish/v1/Chassis/Node0/Controls/NodePowerLimit",
            "/redfish/v1/Chassis/Node1/Controls/NodePowerLimit",
        ]
        # one client, one Redfish session, one per-BMC concurrency limit for both devices
        assert len(h.plugin.pool.clients()) == 1
        assert bmc.stats.sessions_created == 1
        bmc.stats.reset()
        reads = [
            h.plugin.std_metrics(
                replace(h.ctx(bmc, options={"system": system}, model=model), device_id=f"ex425-{system}"),
                Empty(),
            )
            for system in ("Node0", "Node1")
            for _ in range(4)
        ]
        assert all(out.result.ok for out in await asyncio.gather(*reads))
        assert 1 <= bmc.stats.max_in_flight <= 2  # the BMC's `concurrency` (2), not 2 per device
        assert bmc.stats.sessions_created == 0  # still the one session
        assert outs["Node0"].state["discovery"]["system"] == "Node0"


async def test_a_system_the_bmc_does_not_serve_is_one_clear_line(make_harness: Callable[..., Any]) -> None:
    async with make_harness(n=1, model=f"mockup:{CORPUS / 'cray-ex425'}") as h:
        bmc = h.fleet.bmcs[0]
        # none named: no node's power is reported as the device's
        out = await h.call("std_metrics", bmc, Empty())
        assert (
            "node power (this BMC serves several systems, Node0, Node1: option `system`)" in out.result.error
        )
        h.states.clear()
        h.options["system"] = "Node7"
        with pytest.raises(Exception, match=r"system 'Node7' is not on this BMC; it serves Node0, Node1"):
            await h.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(node=500)))
        assert bmc.state.writes == []


async def test_hardware_doc_is_what_the_corpus_gives(make_harness: Callable[..., Any]) -> None:
    found = []
    for case in CASES:
        async with make_harness(n=1, model=f"mockup:{CORPUS / case.name}") as h:
            found.append(await survey(h, h.fleet.bmcs[0], case))
    text = render(found)
    if os.environ.get("UPDATE_HARDWARE_DOC"):
        HARDWARE_DOC.write_text(text)
    assert HARDWARE_DOC.read_text() == text, "docs/hardware.md is stale: rerun with UPDATE_HARDWARE_DOC=1"


async def test_inventory_check_login_prints_which_resource_carries_each_cap(
    make_harness: Callable[..., Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with make_harness(n=1, model=f"mockup:{CORPUS / 'cray-ex425'}") as h:
        inventory = tmp_path / "inventory.toml"
        secrets = h.fleet.write_inventory(inventory, tmp_path / "secrets")
        block = inventory.read_text().split("[[device]]", 1)[1]
        devices = [
            block.replace('id = "node001"', f'id = "ex425-{system}"') + f'system = "{system}"\n'
            for system in ("Node0", "Node1")
        ]
        inventory.write_text("".join(f"[[device]]{d}\n" for d in devices))
        args = [
            "--json",
            "inventory",
            "check",
            "--inventory",
            str(inventory),
            "--secrets-dir",
            str(secrets),
            "--login",
        ]
        code = await asyncio.to_thread(main, args)
        out = json.loads(capsys.readouterr().out)
        assert code == 0 and out["ok"], out
        caps = {d["device"]: d["caps"] for d in out["devices"]}
        for system in ("Node0", "Node1"):
            lines = caps[f"ex425-{system}"]
            node = f"node: /redfish/v1/Chassis/{system}/Controls/NodePowerLimit (the node cap "
            assert node + f"(PhysicalContext Chassis, on the node's chassis {system}))" in lines
            assert "CPU 0-1: refused (no power Control relates to this CPU)" in lines
        assert h.fleet.bmcs[0].state.writes == []  # a check reads only
        # the table form prints the same lines under the table
        code = await asyncio.to_thread(main, args[1:])
        text = capsys.readouterr().out
        assert "ex425-Node1: which resource carries each cap" in text
        assert "/redfish/v1/Chassis/Node1/Controls/NodePowerLimit" in text


async def test_the_simulator_serves_the_real_layouts_as_models_of_a_mixed_fleet(
    make_harness: Callable[..., Any],
) -> None:
    models = list(REAL_LAYOUTS)
    async with make_harness(n=len(models), model=models) as h:
        for bmc in h.fleet.bmcs:
            system = {"system": "Node1"} if bmc.model == "cray-ex425" else {}
            out = await h.call(
                "std_metrics", bmc, Empty(), model={"Model": "auto", "Name": bmc.model}, options=system
            )
            assert out.result.ok, (bmc.model, out.result.error)
            assert out.state["discovery"]["evidence"], bmc.model


def _without_hgx_names(tmp_path: Path) -> Path:
    """The GB300 capture with its baseboard system renamed, so no NVIDIA naming can be relied on."""
    target = _capture_copy(tmp_path, "nvidia-gb300-nvl")
    (target / "Systems/HGX_Baseboard_0").rename(target / "Systems/Baseboard_0")
    for file in target.rglob("index.json"):
        file.write_text(file.read_text().replace("HGX_Baseboard_0", "Baseboard_0"))
    return target


async def test_controls_are_classified_by_what_they_relate_to_on_an_unnamed_layout(
    make_harness: Callable[..., Any], tmp_path: Path
) -> None:
    capture = _without_hgx_names(tmp_path)
    async with make_harness(n=1, model=f"mockup:{capture}") as h:
        bmc = h.fleet.bmcs[0]
        model = {"Model": "auto", "Name": "tray"}
        # two systems (host and baseboard), none named: nothing is capped
        out = await h.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(node=2000)), model=model)
        assert not out.result.ok and "several systems (Baseboard_0, System_0)" in out.result.error
        h.states.clear()
        h.options["system"] = "Baseboard_0"
        out = await h.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(cpu=400)), model=model)
        assert out.result.ok, out.result.error
        tdp = "/redfish/v1/Chassis/HGX_CPU_{}/Controls/ProcessorModule_{}_CPU_0_TDPPowerVolatile_0"
        assert sorted(p for _, p, _ in bmc.state.writes) == [tdp.format(0, 0), tdp.format(1, 1)]
        out = await h.call("unset_policy", bmc, PolicyChange(PolicyAction.UNSET, None), model=model)
        assert out.result.ok, out.result.error
        for cpu in (0, 1):
            doc = bmc.state.documents[tdp.format(cpu, cpu)]
            assert (doc["SetPoint"], doc["ControlMode"]) == (300, "Automatic")  # as captured
        # no node Control: the module budgets and the four-GPU budget are never taken for it
        written = len(bmc.state.writes)
        change = PolicyChange(PolicyAction.SET, policy(node=2000, gpu=2000))
        out = await h.call("set_policy", bmc, change, model=model)
        assert not out.result.ok
        assert "node power limit: unsupported" in out.result.error
        assert "its limit TotalGPU_Power_0 is shared with gpu/0,gpu/1,gpu/2,gpu/3" in out.result.error
        assert len(bmc.state.writes) == written  # nothing was written


async def test_a_legacy_limit_related_only_to_a_processor_is_never_the_node_cap(
    make_harness: Callable[..., Any], tmp_path: Path
) -> None:
    capture = _capture_copy(tmp_path, "hpe-dl325-gen10plus")
    doc_path = capture / "Chassis/1/Power/index.json"
    doc = json.loads(doc_path.read_text())
    doc["PowerControl"][0]["RelatedItem"] = [{"@odata.id": "/redfish/v1/Systems/1/Processors/1"}]
    doc_path.write_text(json.dumps(doc))
    async with make_harness(n=1, model=f"mockup:{capture}") as h:
        bmc = h.fleet.bmcs[0]
        change = PolicyChange(PolicyAction.SET, policy(node=500))
        out = await h.call("set_policy", bmc, change, model={"Model": "auto", "Name": "dl325"})
        assert not out.result.ok and bmc.state.writes == []
        assert "related to parts of the node (RelatedItem), not the node" in out.result.error


async def test_processor_controls_and_a_legacy_node_limit_each_cap_their_own_component(
    make_harness: Callable[..., Any], tmp_path: Path
) -> None:
    capture = _capture_copy(tmp_path, "hpe-dl325-gen10plus")
    chassis = json.loads((capture / "Chassis/1/index.json").read_text())
    chassis["Controls"] = {"@odata.id": "/redfish/v1/Chassis/1/Controls"}
    (capture / "Chassis/1/index.json").write_text(json.dumps(chassis))
    control = "/redfish/v1/Chassis/1/Controls/CPU1Limit"
    collection = {"@odata.id": "/redfish/v1/Chassis/1/Controls", "Members": [{"@odata.id": control}]}
    (capture / "Chassis/1/Controls/CPU1Limit").mkdir(parents=True)
    (capture / "Chassis/1/Controls/index.json").write_text(json.dumps(collection))
    body = {
        "@odata.id": control,
        "Id": "CPU1Limit",
        "ControlType": "Power",
        "PhysicalContext": "CPU",
        "SetPoint": 180,
        "ControlMode": "Automatic",
        "AllowableMin": 100,
        "AllowableMax": 200,
        "RelatedItem": [{"@odata.id": "/redfish/v1/Systems/1/Processors/1"}],
    }
    (capture / "Chassis/1/Controls/CPU1Limit/index.json").write_text(json.dumps(body))
    async with make_harness(n=1, model=f"mockup:{capture}") as h:
        bmc = h.fleet.bmcs[0]
        change = PolicyChange(PolicyAction.SET, policy(node=500, cpu=150))
        out = await h.call("set_policy", bmc, change, model={"Model": "auto", "Name": "dl325"})
        assert out.result.ok, out.result.error
        assert sorted(p for _, p, _ in bmc.state.writes) == [control, "/redfish/v1/Chassis/1/Power"]
        assert bmc.state.documents[control]["SetPoint"] == 150
        assert (
            bmc.state.documents["/redfish/v1/Chassis/1/Power"]["PowerControl"][0]["PowerLimit"][
                "LimitInWatts"
            ]
            == 500
        )


def test_hardware_doc_shows_each_platforms_evidence_from_the_registry() -> None:
    from plugins.redfish._platforms.registry import PLATFORMS

    text = HARDWARE_DOC.read_text()
    for platform in PLATFORMS:
        # every module says what it refuses, and the doc shows it under the platform's own heading
        assert platform.refuses, f"{platform.name}: declare what it refuses"
        section = text.split(f"### `{platform.name}` (`", 1)[1].split("\n### ", 1)[0]
        assert f"- matches on: {platform.matches}" in section
        assert all(f"- refuses: {r}" in section for r in platform.refuses), platform.name
    assert "DGX H100 host BMC (matched by its evidence" in text
