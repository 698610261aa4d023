"""The NVML plugin's state schema: hostile state is refused naming the key, an unversioned state is
migrated, and a controller serving a (fake) GPU node answers hostile state with one line."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controller import translate
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.inventory import DeviceEntry
from plugins.base import InvalidRequestError
from plugins.nvml import NvmlPlugin
from plugins.nvml.testing import FakeNvml
from tests.controller.api.test_service import gpu_caps, ping
from tests.hostile.conftest import LogCapture

UUID = "GPU-11111111-2222-3333-4444-555555555555"
POLICY = {"name": "p", "limits": [{"element": "gpu", "watts": 600.0}], "properties": {}}
VALID: dict[str, Any] = {
    "version": 1,
    "plugin": "nvml",
    "gpus": {UUID: {"pci_bus_id": "00000000:18:00.0", "name": "NVIDIA H100"}},
    "limits": {UUID: {"gpu": {"prior_mw": 700000, "requested_mw": 500000}}},
    "policies": {
        "topology": {"source": "topology", "policy": POLICY},
        "resource_group": {"name": "rg", "policy": None},
        "gpu": {"resource_group": "rg", "current_policy": POLICY, "limits": {"0": {"watts": 500.0}}},
    },
    "profiles": {UUID: {"prior_requested": [5], "enabled": [2, 4]}},
    "later_addition": {"kept": True},
}


def test_a_current_state_loads_unchanged() -> None:
    assert NvmlPlugin.load_state(NvmlPlugin.__new__(NvmlPlugin), VALID) == VALID


def test_an_unversioned_state_is_migrated_to_version_1() -> None:
    old = {k: v for k, v in VALID.items() if k not in ("version", "plugin")}
    assert NvmlPlugin.load_state(NvmlPlugin.__new__(NvmlPlugin), old) == VALID


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"version": 2}, "version: 2 is not a state version this plugin reads (0..1)"),
        ({"version": "1"}, "version: '1' is not"),
        ({"plugin": "redfish"}, "plugin: written by 'redfish', not by nvml"),
        ({"gpus": {UUID: {"pci_bus_id": 5}}}, f"gpus.{UUID}.pci_bus_id: expected a string"),
        ({"limits": {UUID: {"rack": {}}}}, "unknown power scope"),
        ({"limits": {UUID: {"gpu": {"prior_mw": -1}}}}, "prior_mw: expected an integer >= 0, got -1"),
        (
            {"policies": {"topology": {"policy": {"limits": [{"element": "bogus", "watts": 1}]}}}},
            "policies.topology.policy.limits[0].element: 'bogus' is not one of node, gpu, cpu, memory",
        ),
        ({"policies": {"topology": {"source": "bogus"}}}, "policies.topology.source"),
        ({"policies": {"gpu": {"limits": {"x": {"watts": 1}}}}}, "policies.gpu.limits.x: expected a GPU id"),
        (
            {"policies": {"gpu": {"limits": {"0": {"watts": "high"}}}}},
            "expected a finite number >= 0, got 'high'",
        ),
        ({"profiles": {UUID: {"enabled": [999]}}}, "expected a list of NVML profile ids"),
        ({"policies": [1]}, "policies: expected an object, got array"),
    ],
)
def test_hostile_state_is_refused_naming_the_key(change: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        NvmlPlugin.load_state(NvmlPlugin.__new__(NvmlPlugin), {**VALID, **change})
    assert info.value.message.startswith("nvml state: ") and words in info.value.message
    assert "\n" not in info.value.message


def test_deep_state_is_refused_without_recursion() -> None:
    deep: Any = 1
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(InvalidRequestError, match="nested deeper than 48 levels"):
        NvmlPlugin.load_state(NvmlPlugin.__new__(NvmlPlugin), {"x": deep})


@pytest.mark.parametrize(
    ("model", "words"),
    [
        ({"Model": 5}, "device model: Model: expected a string"),
        ({"spec": {"devices": 5}}, "not iterable"),
        ({"spec": {"idlePolicy": {"bogus": 1}}}, "'bogus' is not a valid ElementType"),
    ],
)
def test_bad_models_are_refused(model: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        NvmlPlugin.check_model(NvmlPlugin.__new__(NvmlPlugin), model)
    assert words in info.value.message


async def test_a_controller_answers_hostile_nvml_state_with_one_line(
    start_controller, sink, log_capture: LogCapture
) -> None:
    with FakeNvml.node("h100", "h100"):
        h = await start_controller({"gpu-node": DeviceEntry("gpu-node", "nvml", {"Model": "DGX_H100"})})
        hostile = {"policies": {"topology": {"policy": {"limits": [{"element": "bogus", "watts": 1}]}}}}
        msg = ping("gpu-node", "h1", device_state_json=json.dumps(hostile).encode())
        await h.stub.SendDeviceRequest(msg)
        await h.stub.SendDeviceRequest(gpu_caps("gpu-node", "h2", {0: 500}))
        await h.stub.SendDeviceRequest(gpu_caps("gpu-node", "h3", {1: 450}))  # reads h2's stored state
        await sink.wait_for({"h1", "h2", "h3"})
        answers = {rid: translate.success_of(sink.unique()[rid]) for rid in ("h1", "h2", "h3")}
        assert answers["h1"][1].startswith(
            "device_state_json: nvml state: policies.topology.policy.limits[0]"
        )
        assert answers["h2"] == answers["h3"] == (True, "")
        state = json.loads(sink.unique()["h3"].device_state_json)
        assert state["version"] == 1 and state["plugin"] == "nvml"
        assert isinstance(sink.unique()["h1"], pb.DeviceControllerResponse)
        log_capture.assert_clean()
