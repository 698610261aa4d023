"""The inventory's `bmc` link between a node's in-band device and its BMC device, and how their
components are paired and compared."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from controller.desired.limits import DISAGREE, INBAND, OUTOFBAND, compare_paths, gpu_pairs
from controller.inventory import DeviceEntry, InventoryError, load_inventory, node_partner, pairing_problems
from controller.store import DesiredLimit

BMC_DEVICE = '[[device]]\nid = "node7"\nplugin = "redfish"\n[device.redfish]\nurl = "https://node7-bmc"\n'


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "inventory.toml"
    path.write_text(text)
    return path


def test_bmc_links_the_two_devices_of_a_node(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        BMC_DEVICE + '[[device]]\nid = "node7-gpus"\nplugin = "nvml"\nbmc = "node7"\nbmc_gpus = [1, 0]\n',
    )
    entries = load_inventory(path)
    assert entries["node7-gpus"].bmc == "node7" and entries["node7-gpus"].bmc_gpus == (1, 0)
    assert node_partner(entries, "node7-gpus") == entries["node7"]
    assert node_partner(entries, "node7") == entries["node7-gpus"]
    assert entries["node7"].options == {}  # `bmc` is the device's key, not a plugin option


@pytest.mark.parametrize(
    ("device", "error"),
    [
        ('bmc = "node8"', "device 'node7-gpus': bmc 'node8' is not a device in the inventory"),
        ('bmc = "node7-gpus"', "bmc 'node7-gpus' must be another device"),
        ("bmc = 7", "`bmc` must name the device id of the same node's BMC"),
        ('bmc = "node7"\nbmc_gpus = [0, 0]', "`bmc_gpus` needs `bmc` and may name each BMC GPU index once"),
        ("bmc_gpus = [0, 1]", "`bmc_gpus` needs `bmc`"),
        ('bmc = "node7"\nbmc_gpus = ["a"]', "`bmc_gpus` must be a list of the BMC's GPU indexes"),
    ],
)
def test_a_bad_link_is_a_one_line_error(tmp_path: Path, device: str, error: str) -> None:
    path = write(tmp_path, BMC_DEVICE + f'[[device]]\nid = "node7-gpus"\nplugin = "nvml"\n{device}\n')
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    assert error in str(caught.value) and "\n" not in str(caught.value)


def test_one_bmc_serves_one_in_band_device() -> None:
    entries = {
        "node7": DeviceEntry("node7", "redfish"),
        "a": DeviceEntry("a", "nvml", bmc="node7"),
        "b": DeviceEntry("b", "nvml", bmc="node7"),
    }
    assert pairing_problems(entries) == ["device 'b': bmc 'node7' is already the BMC of device 'a'"]


def test_gpus_pair_by_index_or_by_the_inventory_map() -> None:
    inband = {"gpu/0": 1.0, "gpu/1": 1.0, "gpu/2": 1.0, "cpu": 1.0}
    assert gpu_pairs(inband, ()) == {"gpu/0": "gpu/0", "gpu/1": "gpu/1", "gpu/2": "gpu/2"}
    assert gpu_pairs(inband, (1, 0)) == {"gpu/0": "gpu/1", "gpu/1": "gpu/0"}  # gpu/2: no pair


def _desired(component: str, watts: float | None) -> DesiredLimit:
    return DesiredLimit("n", component, watts, "set-1", datetime.now(UTC))


def test_each_path_off_and_the_paths_off_each_other() -> None:
    desired = [_desired("gpu/0", 500.0), _desired("gpu/1", 500.0), _desired("gpu/2", None)]
    readings: dict[str, dict[str, float | None]] = {
        INBAND: {"gpu/0": 500.0, "gpu/1": 700.0, "gpu/2": 300.0},
        OUTOFBAND: {"gpu/0": 500.4, "gpu/1": None},
    }
    found = [(f.component, f.kind, f.line) for f in compare_paths(desired, readings)]
    assert found == [
        ("gpu/1", INBAND, "in-band: desired 500 W (set by set-1), enforced 700 W"),
        ("gpu/1", OUTOFBAND, "out-of-band: desired 500 W (set by set-1), enforced no cap"),
        ("gpu/1", DISAGREE, "in-band 700 W, out-of-band no cap (the paths disagree)"),
    ]
    # one path: the single-path line
    assert [f.line for f in compare_paths(desired, {INBAND: readings[INBAND]})] == [
        "desired 500 W (set by set-1), enforced 700 W"
    ]


async def test_the_controller_refuses_a_dangling_link_handed_to_it(start_controller: Any) -> None:
    with pytest.raises(InventoryError, match="device 'gpus': bmc 'gone' is not a device in the inventory"):
        await start_controller({"gpus": DeviceEntry("gpus", "nvml", bmc="gone")})
