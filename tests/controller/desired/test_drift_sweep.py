"""The drift sweep at fleet size: every device is checked concurrently, each under its own timeout,
so one hung BMC among many costs its own timeout once and every other BMC is still checked in the
same sweep (judged by the order the checks finished, never by a duration)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bmcsim import SimulatorFleet
from bmcsim._faults import FaultMode
from controller.delivery.sink import TopologySink
from controller.inventory import load_inventory
from tests.controller.api.test_service import gpu_caps
from tests.controller.desired.test_drift import eventually

pytestmark = pytest.mark.slow

#: simulated GB200 BMCs in the sweep, in this process with the controller (the data-hall size the
#: issue names; one to three minutes on two shared cores)
FLEET = 2000
HUNG_TIMEOUT = 15.0
#: the activations' own deadline: the whole first-contact wave of 2,000 BMCs shares this process's
#: CPU with the simulators, and on a slow or busy host the first request accepted waited past 15 s
#: (the device-call timeout, its default deadline) before its cycle ended; this test is about the sweep
ACTIVATION_DEADLINE_S = 600


@pytest.mark.timeout(900)
async def test_a_hung_bmc_costs_its_timeout_once_and_every_other_bmc_is_checked(
    tmp_path: Path, sink: TopologySink, start_controller: Any
) -> None:
    async with SimulatorFleet(n=FLEET, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        secrets = fleet.write_inventory(tmp_path / "inventory.toml", tmp_path / "secrets")
        inventory = load_inventory(tmp_path / "inventory.toml")
        h = await start_controller(
            inventory,
            secrets_dir=str(secrets),
            drift_interval=3600.0,  # the loop's own sweeps stay out of the way: this test runs one
            device_call_timeout=HUNG_TIMEOUT,
        )
        devices = sorted(inventory)
        ids = {f"cap-{d}" for d in devices}
        for device in devices:
            await h.stub.SendDeviceRequest(
                gpu_caps(device, f"cap-{device}", {0: 500}, timeout_seconds=ACTIVATION_DEADLINE_S)
            )
        await sink.wait_for(ids, timeout=300)
        store = h.controller.store
        assert sorted(await store.devices_with_desired()) == devices
        # the controller's own first sweep (it started with the inventory) is over: this one is alone
        await eventually(lambda: _last_sweep(h), "the controller's first sweep", timeout=600)
        hung = devices[0]  # started first: a one-at-a-time sweep would hold every other one behind it
        fleet.bmcs[0].faults.mode = FaultMode.HANG
        assert inventory[hung].url == fleet.bmcs[0].url

        sweep = await h.controller.drift.sweep(devices)

        assert sweep.total == FLEET
        assert list(sweep.failed) == [hung] and "no answer" in sweep.failed[hung]
        assert sorted(sweep.checked) == devices[1:]
        # the hung device was the first to start; while it held its slot, devices queued behind the
        # first `drift_concurrency` started and finished: it held one slot, never the queue
        assert sweep.finished.index(hung) > h.controller.settings.drift_concurrency
        checked = await store.desired_for_devices(devices)
        assert all(row.checked_at is not None for d in devices[1:] for row in checked[d])
        assert all(row.checked_at is None for row in checked[hung])
        assert all(row.drift_at is None for d in devices[1:] for row in checked[d])
        # each BMC's health: the hung one inaccessible with the reason, every other one reached
        health = {r.device: r for r in await store.bmc_health()}
        assert set(health) == set(devices)
        assert health[hung].inaccessible_since is not None and "no answer" in health[hung].last_error
        last_ok = health[hung].last_success_at  # the controller's first sweep reached it, before the fault
        assert last_ok is None or last_ok < health[hung].inaccessible_since
        others = [health[d] for d in devices[1:]]
        assert all(r.last_success_at is not None and r.inaccessible_since is None for r in others)
        assert not any(r.sync_in_progress for r in health.values())
        fleet.bmcs[0].faults.mode = FaultMode.NONE
        await h.controller.stop()


async def _last_sweep(h: Any) -> Any:
    return h.controller.drift.last_sweep
