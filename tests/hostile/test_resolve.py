"""A bad model or state is answered at once with one clear line (defect 9 and 11): the runner
passes them through the plugin's schema (`check_model`, `load_state`), a device spec that cannot
be read is an invalid request, and any other exception while resolving is answered once with its
real reason instead of being retried until the deadline."""

from __future__ import annotations

import json

import pytest

from controller import translate
from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.inventory import DeviceEntry
from tests.controller.api.test_service import gpu_caps, ping
from tests.controller.conftest import memory_inventory
from tests.hostile.conftest import LogCapture

HOUR = 3600  # a request that were retried instead of answered would stay silent this long


def _error(response: pb.DeviceControllerResponse) -> str:
    ok, error = translate.success_of(response)
    assert not ok
    return error


async def _respond(h, sink, msg: pb.DeviceControllerRequest) -> pb.DeviceControllerResponse:
    msg.timeout_seconds = HOUR
    await h.stub.SendDeviceRequest(msg)
    await sink.wait_for({msg.request_id}, timeout=10)
    assert sink.counts[msg.request_id] == 1
    return sink.unique()[msg.request_id]


async def _answer(h, sink, msg: pb.DeviceControllerRequest) -> str:
    return _error(await _respond(h, sink, msg))


@pytest.mark.parametrize(
    ("model", "words"),
    [
        ({"spec": {"devices": 5}}, "TypeError: 'int' object is not iterable"),
        ({"spec": {"idlePolicy": {"bogus": {"watts": 5}}}}, "'bogus' is not a valid ElementType"),
        ({"spec": {"devices": [{"type": "gpu", "count": "many"}]}}, "ValueError"),
    ],
    ids=["devices-5", "bogus-element", "count-many"],
)
async def test_malformed_model_of_a_device_not_in_the_inventory_is_answered_at_once(
    start_controller, sink, log_capture: LogCapture, model: dict, words: str
) -> None:
    h = await start_controller()
    model = {"Redfish": {"URL": "https://127.0.0.1:9", "SecretName": "bmc"}, **model}
    error = await _answer(h, sink, ping("elsewhere", "m1", device_model_json=json.dumps(model).encode()))
    assert error.startswith("device_model_json: not a usable device model") and words in error, error
    assert "\n" not in error and "deadline passed" not in error
    record = await h.admin.GetRequest(apb.GetRequestRequest(request_id="m1"))
    assert record.outcome == "rejected"
    log_capture.assert_clean()


@pytest.mark.parametrize(
    ("state", "words"),
    [
        ({"gpus": {"0": "bogus"}}, "memory state: gpus.0"),
        ({"gpus": [500]}, "memory state: gpus: expected an object"),
        ({"version": 7}, "memory state: version: 7"),
        ({"profiles": "2,4"}, "memory state: profiles"),
        ({"node": float("inf")}, "device_state_json"),  # refused at the edge: not JSON
    ],
    ids=["bogus-cap", "wrong-type", "newer-version", "profiles-string", "infinity"],
)
async def test_hostile_state_gets_a_one_line_error(
    start_controller, sink, log_capture: LogCapture, state: dict, words: str
) -> None:
    h = await start_controller(memory_inventory(1))
    msg = gpu_caps("node000", "s1", {0: 500}, device_state_json=json.dumps(state).encode())
    if "Infinity" in msg.device_state_json.decode():
        with pytest.raises(Exception, match="device_state_json"):
            await h.stub.SendDeviceRequest(msg)
        return
    error = await _answer(h, sink, msg)
    assert error.startswith("device_state_json: ") and words in error, error
    assert "internal error" not in error and "\n" not in error
    log_capture.assert_clean()


async def test_a_bad_model_of_an_inventory_device_is_refused_by_the_plugin(start_controller, sink) -> None:
    h = await start_controller(memory_inventory(1))
    error = await _answer(h, sink, ping("node000", "b1", device_model_json=b'{"delay": "soon"}'))
    assert error.startswith("device model: delay: expected seconds"), error


async def test_an_older_state_is_migrated_before_the_plugin_sees_it(start_controller, sink) -> None:
    h = await start_controller(memory_inventory(1))
    old = json.dumps({"version": 1, "caps": {"0": 300.0}}).encode()
    response = await _respond(h, sink, gpu_caps("node000", "v1", {1: 400}, device_state_json=old))
    assert translate.success_of(response) == (True, "")
    state = json.loads(response.device_state_json)
    assert state["version"] == 2 and "caps" not in state
    assert state["gpus"] == {"0": 300.0, "1": 400.0}
    device = await h.admin.GetDevice(apb.GetDeviceRequest(id="node000"))
    assert json.loads(device.state_json) == state


async def test_any_exception_while_resolving_is_answered_once_with_its_reason(
    start_controller, sink, log_capture: LogCapture
) -> None:
    broken = {"n1": DeviceEntry("n1", "tests.hostile._plugins:BrokenStatePlugin", {"Model": "DGX_GB200"})}
    h = await start_controller(broken)
    error = await _answer(h, sink, ping("n1", "x1"))
    assert error == "cannot resolve the device: RuntimeError: state loader bug: cannot read key 'gpus'"
    log_capture.assert_clean()
    # the device keeps working for requests that do not need the broken part: none here, so the
    # next request is answered the same way, once
    error = await _answer(h, sink, ping("n1", "x2"))
    assert error.startswith("cannot resolve the device")
