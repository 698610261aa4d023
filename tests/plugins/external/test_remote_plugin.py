"""The proxy is indistinguishable from the plugin itself: same outcomes, same errors, same checks."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from controller.plugin_host.remote import RemotePlugin
from plugins.base import (
    Allocation,
    DeviceContext,
    DeviceControllerError,
    DeviceRejectedError,
    ElementType,
    Empty,
    GpuPoliciesChange,
    GpuPolicy,
    InvalidRequestError,
    Ping,
    Policy,
    PolicyAction,
    PolicyChange,
    PolicyLimit,
    PowerLimit,
    ProfileChange,
    UnsupportedError,
)
from tests.memory_plugin import MemoryPlugin
from tests.plugins.external.conftest import MEMORY, serve_command, spec

MODEL = {"Model": "DGX_GB200"}


def ctx(state: dict[str, Any] | None = None, **model: Any) -> DeviceContext:
    return DeviceContext(
        device_id="n1",
        request_id="r1",
        deadline=time.monotonic() + 20,
        model={**MODEL, **model},
        state=state or {},
    )


@pytest.fixture
async def memory(remote) -> RemotePlugin:
    plugin: RemotePlugin = await remote(spec("mem", serve_command(MEMORY)))
    return plugin


async def test_an_allocation_has_the_same_outcome_in_and_out_of_process(memory: RemotePlugin) -> None:
    policy = Policy("cap", (PolicyLimit(ElementType.NODE, PowerLimit(watts=6000)),))
    request = Allocation(
        "rg-1",
        policy=PolicyChange(PolicyAction.SET, policy),
        gpu_policies=GpuPoliciesChange(
            "rg-1", PolicyAction.SET, policy, (GpuPolicy(0, PowerLimit(watts=700)),)
        ),
    )
    local = MemoryPlugin()
    got = await memory.activate_allocation(ctx({"version": 2, "gpus": {"1": 650.0}}), request)
    expected = await local.activate_allocation(
        ctx(local.load_state({"version": 2, "gpus": {"1": 650.0}})), request
    )
    assert got.result == expected.result
    assert got.state == expected.state


async def test_the_plugin_process_checks_and_migrates_state_and_model(memory: RemotePlugin) -> None:
    change = GpuPoliciesChange("rg", PolicyAction.SET, None, (GpuPolicy(0, PowerLimit(watts=500)),))
    migrated = await memory.update_gpu_policies(ctx({"version": 1, "caps": {"3": 600.0}}), change)
    assert (
        migrated.state is not None and migrated.state["version"] == 2 and migrated.state["gpus"]["3"] == 600.0
    )
    with pytest.raises(InvalidRequestError, match=r"device state: memory state: version: 7 is not 1 or 2"):
        await memory.update_gpu_policies(ctx({"version": 7}), change)
    with pytest.raises(InvalidRequestError, match="device model: fail: unknown failure"):
        await memory.update_gpu_policies(ctx(fail="meltdown"), change)


async def test_errors_keep_their_class_and_a_plugin_bug_is_an_internal_error(memory: RemotePlugin) -> None:
    with pytest.raises(DeviceRejectedError, match="device said no") as rejected:
        await memory.ping(ctx(fail="rejected"), Ping())
    assert not rejected.value.retryable
    with pytest.raises(DeviceControllerError, match="internal error in plugin: RuntimeError: boom"):
        await memory.ping(ctx(fail="crash"), Ping())
    assert memory.connection is not None and memory.restarts == 0  # the process survived both


async def test_a_verification_crosses_and_runs_in_the_plugin(memory: RemotePlugin) -> None:
    done = await memory.enable_profiles(ctx(), ProfileChange(enable=(3,), verify=True))
    assert done.verification is not None and done.verification.payload == {"expect": [3]}
    assert done.state is not None
    result = await memory.verify(ctx(dict(done.state)), done.verification)
    assert (result.done, result.status) == (True, "verified")


async def test_a_kind_the_plugin_lacks_is_unsupported(remote) -> None:
    files: RemotePlugin = await remote(spec("files", serve_command("filedevices")))
    with pytest.raises(UnsupportedError, match="standard metrics are not supported"):
        await files.std_metrics(ctx(), Empty())


async def test_a_plugin_built_for_nomad_fingerprints_stats_and_reserves_but_has_no_power_operations(
    remote,
) -> None:
    command = [sys.executable, str(Path(__file__).with_name("nomad_only_plugin.py"))]
    plugin: RemotePlugin = await remote(spec("acme", command))
    assert plugin.info.version == "9.9" and "acme-fpga" in plugin.info.description
    async for update in plugin.fingerprint(()):  # falls back to Nomad's own Fingerprint
        assert [(g.vendor, g.type, [d.id for d in g.devices]) for g in update.groups] == [
            ("acme", "fpga", ["fpga0"])
        ]
        break
    async for stats in plugin.stats((), 0.1):
        assert stats.groups[0].instance_stats["fpga0"].summary.int_numerator == 42
        break
    assert (await plugin.reserve(["fpga0"])).envs == {"ACME_FPGA": "fpga0"}
    with pytest.raises(UnsupportedError, match="plugin acme does not offer ping"):
        await plugin.ping(ctx(), Ping())
