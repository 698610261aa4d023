"""A shard a lease round hands on to another process is let go here (`Warmup.handed_on`): its
devices' BMC sessions are logged out, since the process that runs them now logs in with its own.
A device of a shard run here again, or with work in its lane, is kept. Real simulated GB200 BMCs
over HTTPS and the Redfish plugin: the BMC's own session table says what is open."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from bmcsim import SimulatorFleet
from controller.inventory import load_inventory


async def test_the_devices_of_a_shard_handed_on_are_logged_out_here(
    tmp_path: Path, start_controller: Any
) -> None:
    async with SimulatorFleet(n=4, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        secrets = fleet.write_inventory(tmp_path / "inventory.toml", tmp_path / "secrets")
        inventory = load_inventory(tmp_path / "inventory.toml")
        h = await start_controller(inventory, secrets_dir=str(secrets), drift_interval=3600.0)
        warmup, runner = h.controller.warmup, h.controller.runner
        assert warmup is not None and warmup._task is not None
        await warmup._task  # the start's warm-up logged in to every BMC
        assert warmup.progress.done == 4
        sessions = {device: bmc for device, bmc in zip(sorted(inventory), fleet.bmcs, strict=True)}
        assert all(len(bmc.sessions) == 1 for bmc in fleet.bmcs)

        shards = runner.shards
        shard_of = {d: shards.shard_for_model(d, None) for d in inventory}
        handed = shard_of[sorted(inventory)[0]]
        gone = sorted(d for d, s in shard_of.items() if s == handed)

        # still run here (a round that hands it on no longer runs it): kept
        warmup.handed_on(frozenset({handed}))
        await asyncio.gather(*warmup._letting_go)
        assert all(len(bmc.sessions) == 1 for bmc in fleet.bmcs)

        # handed on: no longer run here, so each of its BMCs' sessions is logged out
        shards.executes = False
        warmup.handed_on(frozenset({handed}))
        await asyncio.gather(*warmup._letting_go)
        for device, bmc in sessions.items():
            assert len(bmc.sessions) == (0 if device in gone else 1), device
        assert warmup.progress.finished  # letting go is no warm-up: the progress stays finished
        await h.controller.stop()
