"""A BMC that answers 503 (Service Unavailable) was reached: `devices health` does not call it
unreachable, `status` does not count it so, its `devicectl_bmc_up` gauge reads 1, and the 503 is its
last error. A BMC that does not answer at all is the unreachable one. Real simulated BMCs over
HTTPS (the simulator's `http503` fault), a controller on a real port, `devicectl` as its own process."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY

from bmcsim import SimulatorFleet
from bmcsim._faults import FaultMode
from controller.inventory import load_inventory
from tests.controller.desired.test_drift import eventually
from tests.controller.observability.test_bmc_health import last_sweep
from tests.controller.terminal import pipe


async def test_a_bmc_answering_503_is_reached_with_the_503_as_its_last_error(
    tmp_path: Path, sink: Any, start_controller: Any
) -> None:
    async with SimulatorFleet(n=3, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        secrets = fleet.write_inventory(tmp_path / "inventory.toml", tmp_path / "secrets")
        inventory = load_inventory(tmp_path / "inventory.toml")
        devices = sorted(inventory)
        busy, dead = devices[1], devices[2]
        fleet.bmcs[1].faults.set(FaultMode.HTTP_503, retry_after=0)
        fleet.bmcs[2].faults.mode = FaultMode.HANG
        settings = {"secrets_dir": str(secrets), "drift_interval": 3600.0, "device_call_timeout": 5.0}
        h = await start_controller(inventory, **settings)

        async def cli(*args: str) -> Any:
            done = await asyncio.to_thread(pipe, "--server", f"127.0.0.1:{h.controller.port}", *args)
            assert done.code == 0, done.out + done.err
            return done

        # the first sweep pings each device (no desired limits anywhere)
        await eventually(lambda: last_sweep(h), "the first sweep")
        rows = {r["device"]: r for r in json.loads((await cli("devices", "health", "-o", "json")).out)}
        assert "503" in rows[busy]["last_error"], rows[busy]
        assert not rows[busy].get("inaccessible_since"), rows[busy]  # it answered: reached
        assert rows[dead].get("inaccessible_since") and rows[dead]["last_error"], rows[dead]
        assert rows[devices[0]].get("last_success_at") and not rows[devices[0]].get("last_error")

        table = (await cli("devices", "health", "-o", "wide")).out
        lines = {line.split()[0]: line for line in table.splitlines() if line.startswith("node")}
        assert "reached, answered an error" in lines[busy] and "503" in lines[busy], table
        assert "UNREACHABLE" in lines[dead] and "UNREACHABLE" not in lines[busy], table
        unreachable = await cli("devices", "health", "--unreachable", "-o", "name")
        assert unreachable.out.splitlines() == [f"device/{dead}"]
        status = await cli("status")
        assert "3 nodes: 0 drifted, 1 unreachable" in status.out, status.out
        assert REGISTRY.get_sample_value("devicectl_bmc_up", {"device": busy}) == 1
        assert REGISTRY.get_sample_value("devicectl_bmc_up", {"device": dead}) == 0
        await h.controller.stop()
