"""The discovery result as the device state stores it, and the paths discovery may read."""

from __future__ import annotations

import json
import re
from dataclasses import asdict

from plugins.redfish._discovery.discovery import DISCOVERY_PATHS, ENVIRONMENT_METRICS
from plugins.redfish._discovery.layout import Component, Discovery
from plugins.redfish._discovery.walk import Walker


def _discovery() -> Discovery:
    def comp(kind: str, i: int, **more: object) -> Component:
        return Component(key=f"{kind}/{i}", kind=kind, index=i, name=f"{kind.upper()}_{i}", **more)  # type: ignore[arg-type]

    return Discovery(
        platform=ENVIRONMENT_METRICS,
        url="https://10.0.0.1:443",
        model="DGX_GB200",
        firmware="1.2.3",
        node=(comp("module", 0, mechanism="environment_metrics", limit_uri="/m0/EM"), comp("module", 1)),
        gpus=tuple(comp("gpu", i, metrics_uri=f"/g{i}/EM", reason="its own") for i in range(4)),
        cpus=(comp("cpu", 0, member=2, members=3, quirk="q"),),
        node_metrics=("environment_metrics", "/redfish/v1/Chassis/Chassis_0/EnvironmentMetrics"),
        systems=("HGX_Baseboard_0",),
        groups=(comp("group", 0, covers="gpu/0,gpu/1"),),
        evidence=("one", "two"),
        extra={"nested": {"list": [1, {"deep": "x"}]}},
    )


def test_a_stored_discovery_holds_every_field_and_reads_back_equal() -> None:
    found = _discovery()
    stored = found.to_json()
    expected = asdict(found)
    expected["node_metrics"] = list(found.node_metrics)
    assert stored == expected
    assert [c["key"] for c in stored["gpus"]] == ["gpu/0", "gpu/1", "gpu/2", "gpu/3"]
    assert Discovery.from_json(json.loads(json.dumps(stored))) == found
    stored["extra"]["nested"]["list"][1]["deep"] = "changed"  # the state's copy is its own
    assert found.extra == {"nested": {"list": [1, {"deep": "x"}]}}


def test_discovery_reads_a_path_only_where_one_of_the_platform_patterns_matches_it_whole() -> None:
    patterns = DISCOVERY_PATHS[ENVIRONMENT_METRICS]
    walker = Walker(None, 0.0, patterns)  # type: ignore[arg-type]  # allowed() reads no BMC
    one_each = [re.compile("[^/]*".join(re.escape(part) for part in p.split("*"))) for p in patterns]
    paths = {
        "/redfish/v1": True,
        "/redfish/v1/": True,
        "/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_0/EnvironmentMetrics": True,
        "/redfish/v1/Chassis/HGX_ProcessorModule_0/Controls/ProcessorModule_0_EDPp": True,
        "/redfish/v1/Chassis/HGX_ProcessorModule_0/": True,
        "/redfish/v1/Systems/System_0": False,  # the host's system: never read on a tray
        "/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_0/Ports": False,
        "/redfish/v1/Chassis/A/B": False,
        "/redfish/v1/Chassis/A/Controls/B/C": False,
        "/redfish/v1/Managers/BMC/LogServices": False,
        "/redfish/v1x": False,
        "/redfish/v1/SessionService": False,
        "/": False,
    }
    for path, allowed in paths.items():
        assert walker.allowed(path) is allowed, path
        assert any(p.fullmatch(path.rstrip("/") or "/") for p in one_each) is allowed, path
    assert all(Walker(None, 0.0, None).allowed(p) for p in paths)  # type: ignore[arg-type]  # no list: any
