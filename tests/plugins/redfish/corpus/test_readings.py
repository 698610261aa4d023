"""Readings depth on real firmware: node power in every form a capture gives it, and a vendor's own
safe minimum as the floor of a cap before devicectl's.

Each capture of tests/corpus/redfish is served as captured and in the other forms firmware shows the
same reading: the legacy `PowerControl` with only `PowerMetrics.AverageConsumedWatts` (AMI MegaRAC
builds), and a Control's `Sensor` excerpt without `Reading`, the watts in the Sensor resource its
`DataSourceUri` names (HPE Cray EX builds).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from plugins.base import Empty, PolicyAction, PolicyChange
from tests.plugins.redfish.corpus.cases import CASES, CORPUS, Case, policy

FORMS = ("as captured", "average only", "sensor by uri")
#: the node's `PowerMetrics.AverageConsumedWatts` where node power is a legacy `PowerControl`'s
AVERAGE = {
    "hpe-dl325-gen10plus": 97,
    "hpe-xl675d-a100": 893,
    "hpe-dl380a-gen11": 521,
    "hpe-dl380a-gen12": 967,
    "gigabyte-ami": 46,
    "intel-s2600bp": 147,
    "dell-xr8620t": 3,
    "supermicro-x10": 0,
}
READING = [c for c in CASES if c.power is not None]


def _documents(capture: Path) -> list[tuple[Path, dict[str, Any]]]:
    return [(f, json.loads(f.read_text())) for f in sorted(capture.rglob("index.json"))]


def _average_only(capture: Path) -> None:
    for file, doc in _documents(capture):
        members = doc.get("PowerControl")
        if isinstance(members, list) and any("PowerConsumedWatts" in m for m in members):
            for member in members:
                member.pop("PowerConsumedWatts", None)
            file.write_text(json.dumps(doc))


def _sensor_by_uri(capture: Path) -> None:
    for file, doc in _documents(capture):
        sensor = doc.get("Sensor")
        if doc.get("ControlType") == "Power" and isinstance(sensor, dict) and "DataSourceUri" in sensor:
            uri = sensor["DataSourceUri"]
            target = capture / uri.removeprefix("/redfish/v1/")
            target.mkdir(parents=True, exist_ok=True)
            body = {
                "@odata.id": uri,
                "@odata.type": "#Sensor.v1_2_0.Sensor",
                "Id": uri.rsplit("/", 1)[-1],
                "Name": uri.rsplit("/", 1)[-1],
                "Reading": sensor.pop("Reading"),
                "ReadingType": "Power",
                "ReadingUnits": "W",
            }
            (target / "index.json").write_text(json.dumps(body))
            file.write_text(json.dumps(doc))


def _carries(name: str, form: str) -> bool:
    """Whether the capture has a reading that `form` moves (else that variant is the capture itself)."""
    docs = [doc for _, doc in _documents(CORPUS / name)]
    if form == "average only":
        return any("PowerConsumedWatts" in m for d in docs for m in d.get("PowerControl") or ())
    if form == "sensor by uri":
        return any(
            d.get("ControlType") == "Power" and "DataSourceUri" in (d.get("Sensor") or {}) for d in docs
        )
    return True


VARIANTS = [(c, form) for c in READING for form in FORMS if _carries(c.name, form)]


def _variant(tmp_path: Path, name: str, form: str) -> Path:
    capture = tmp_path / name
    shutil.copytree(CORPUS / name, capture)
    if form == "average only":
        _average_only(capture)
    elif form == "sensor by uri":
        _sensor_by_uri(capture)
    return capture


@pytest.mark.parametrize(("case", "form"), VARIANTS, ids=[f"{c.id}-{form}" for c, form in VARIANTS])
async def test_node_power_is_reported_in_every_form_a_capture_carries_it(
    make_harness: Callable[..., Any], tmp_path: Path, case: Case, form: str
) -> None:
    capture = _variant(tmp_path, case.name, form)
    async with make_harness(n=1, model=f"mockup:{capture}") as h:
        if case.system:
            h.options["system"] = case.system
        out = await h.call("std_metrics", h.fleet.bmcs[0], Empty(), model={"Model": "auto", "Name": case.id})
    assert out.result.ok, out.result.error
    assert "node power" not in out.result.error  # never "absent" while the BMC shows it
    expected = AVERAGE.get(case.name, case.power) if form == "average only" else case.power
    assert out.result.metrics.power_watts == pytest.approx(expected)


async def test_a_cap_below_ilos_own_safe_minimum_is_refused_naming_it(
    make_harness: Callable[..., Any], tmp_path: Path
) -> None:
    capture = tmp_path / "dl325"
    shutil.copytree(CORPUS / "hpe-dl325-gen10plus", capture)
    file = capture / "Chassis/1/Power/index.json"
    doc = json.loads(file.read_text())
    # NOTE: the capture shows null/false (not computed yet); iLO fills them in once it has measured
    doc["Oem"]["Hpe"].update(MinimumSafelyAchievableCap=245, MinimumSafelyAchievableCapValid=True)
    file.write_text(json.dumps(doc))
    model = {"Model": "auto", "Name": "dl325"}
    async with make_harness(n=1, model=f"mockup:{capture}") as h:
        bmc = h.fleet.bmcs[0]
        for watts in (1, 200):  # 200 W: above devicectl's own 100 W floor, below iLO's
            out = await h.call(
                "set_policy", bmc, PolicyChange(PolicyAction.SET, policy(node=watts)), model=model
            )
            assert not out.result.ok
            assert "below the BMC's Oem/Hpe/MinimumSafelyAchievableCap of 245 W" in out.result.error
            assert "safety floor" not in out.result.error
        assert bmc.state.writes == []
        out = await h.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(node=300)), model=model)
        assert out.result.ok, out.result.error
        assert bmc.state.writes == [
            (
                "PATCH",
                "/redfish/v1/Chassis/1/Power",
                {"PowerControl": [{"PowerLimit": {"LimitInWatts": 300}}]},
            )
        ]
