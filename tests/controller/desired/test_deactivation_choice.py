"""Topology deactivation: restore by default; retain the limits in force (DPS's "retain device limits
after topology deactivation") where the inventory or the config says so. A controller on a real port
drives a simulated GB200 BMC over HTTPS: the simulator's write log shows the restore, or nothing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bmcsim import SimulatedBmc, SimulatorFleet
from controller.inventory import InventoryError, load_inventory
from plugins.base import PolicyAction, PolicyChange
from plugins.nvml.testing import FakeNode
from tests.controller.desired.test_receipts import gpu_policy
from tests.controller.terminal import pipe


def _writes(bmc: SimulatedBmc) -> int:
    return sum(
        n
        for (method, path), n in bmc.stats.calls.items()
        if method in ("PATCH", "POST") and not path.startswith("/redfish/v1/SessionService")
    )


@contextlib.asynccontextmanager
async def _site(
    tmp_path: Path, start_controller: Any, inventory_key: str = "", **settings: Any
) -> AsyncIterator[Any]:
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        path = tmp_path / "inventory.toml"
        secrets = fleet.write_inventory(path, tmp_path / "secrets")
        if inventory_key:  # [[device]] tables come after the top of the file: the key goes in [defaults]
            path.write_text(f"[defaults]\n{inventory_key}\n\n" + path.read_text())
        h = await start_controller(load_inventory(path), secrets_dir=str(secrets), **settings)
        server = f"127.0.0.1:{h.controller.port}"

        async def cli(*args: str) -> Any:
            run = await asyncio.to_thread(pipe, "--server", server, *args)
            assert run.code == 0, run.out + run.err
            return run

        try:
            yield fleet.bmcs[0], cli
        finally:
            await h.controller.stop()


async def _activate_then_deactivate(
    bmc: SimulatedBmc, cli: Any
) -> tuple[dict[str, Any], dict[str, Any], str]:
    before = dict(bmc.state.set_points())
    await cli("send", "topology-activate", "--device", "node001", "--node", "5000", "--cpu", "300", "--wait")
    capped = dict(bmc.state.set_points())
    assert capped != before and _writes(bmc) > 0
    bmc.stats.calls.clear()
    done = await cli("send", "topology-deactivate", "--device", "node001", "--unset", "--wait")
    return before, capped, done.out


async def test_topology_deactivation_restores_by_default(tmp_path: Path, start_controller: Any) -> None:
    async with _site(tmp_path, start_controller) as (bmc, cli):
        _, capped, out = await _activate_then_deactivate(bmc, cli)
        # the deactivation went to the BMC: the model's idle policy (GB200's spec has one), else the
        # limits from before the activation
        assert _writes(bmc) > 0, out
        assert dict(bmc.state.set_points()) != capped


async def test_an_inventory_choice_retains_the_limits_in_force(tmp_path: Path, start_controller: Any) -> None:
    key = "retain_limits_on_topology_deactivate = true"
    async with _site(tmp_path, start_controller, key) as (bmc, cli):
        _, capped, out = await _activate_then_deactivate(bmc, cli)
        assert _writes(bmc) == 0, out  # nothing was written: the limits stay
        assert dict(bmc.state.set_points()) == capped
        assert "ok" in out


async def test_the_config_setting_retains_and_an_inventory_entry_may_say_restore(
    tmp_path: Path, start_controller: Any
) -> None:
    async with _site(tmp_path / "a", start_controller, retain_limits_on_topology_deactivate=True) as (
        bmc,
        cli,
    ):
        _, capped, _ = await _activate_then_deactivate(bmc, cli)
        assert _writes(bmc) == 0 and dict(bmc.state.set_points()) == capped
    key = "retain_limits_on_topology_deactivate = false"
    async with _site(tmp_path / "b", start_controller, key, retain_limits_on_topology_deactivate=True) as (
        bmc,
        cli,
    ):
        _, capped, _ = await _activate_then_deactivate(bmc, cli)
        assert _writes(bmc) > 0 and dict(bmc.state.set_points()) != capped


def test_the_inventory_key_must_be_a_boolean(tmp_path: Path) -> None:
    path = tmp_path / "inventory.toml"
    path.write_text('[[device]]\nid = "n1"\nplugin = "nvml"\nretain_limits_on_topology_deactivate = "yes"\n')
    with pytest.raises(InventoryError, match="`retain_limits_on_topology_deactivate` must be true or false"):
        load_inventory(path)


async def test_nvml_retains_without_writing_and_restores_by_default(h100x4: FakeNode) -> None:
    await h100x4.do("set_policy", gpu_policy(1600))  # 400 W per GPU
    assert [h100x4.limit_w(i) for i in range(4)] == [400.0] * 4
    seen = len(h100x4.fake.writes())
    retained = await h100x4.do("unset_policy", PolicyChange(PolicyAction.UNSET, retain_limits=True))
    assert retained.result.ok and len(h100x4.fake.writes()) == seen
    assert [h100x4.limit_w(i) for i in range(4)] == [400.0] * 4
    restored = await h100x4.do("unset_policy", PolicyChange(PolicyAction.UNSET))
    assert restored.result.ok and len(h100x4.fake.writes()) > seen
    assert [h100x4.limit_w(i) for i in range(4)] == [700.0] * 4
