"""One dead BMC among many is visible: each device's reachability (DPS's `dpsctl check status`) in
`devicectl devices health`, `devices show` and `status`'s fleet summary, and in per-device gauges
that a restarted controller loads from the database. Real simulated BMCs over HTTPS, a controller on
a real port, and `devicectl` as its own process."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY

from bmcsim import SimulatorFleet
from bmcsim._faults import FaultMode
from controller.inventory import load_inventory
from controller.observability import metrics, reachability
from controller.store import BmcCheckRow
from tests.controller.desired.test_drift import eventually
from tests.controller.terminal import pipe


async def last_sweep(h: Any) -> Any:
    return h.controller.drift.last_sweep


def gauge(name: str, device: str) -> float | None:
    return REGISTRY.get_sample_value(name, {"device": device})


async def test_one_dead_bmc_is_visible_in_health_show_status_and_metrics(
    tmp_path: Path, sink: Any, start_controller: Any
) -> None:
    async with SimulatorFleet(n=4, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        secrets = fleet.write_inventory(tmp_path / "inventory.toml", tmp_path / "secrets")
        inventory = load_inventory(tmp_path / "inventory.toml")
        settings = {"secrets_dir": str(secrets), "drift_interval": 3600.0, "device_call_timeout": 5.0}
        h = await start_controller(inventory, **settings)
        devices = sorted(inventory)
        dead = devices[2]
        fleet.bmcs[2].faults.mode = FaultMode.HANG

        async def cli(*args: str, code: int = 0) -> Any:
            done = await asyncio.to_thread(pipe, "--server", f"127.0.0.1:{h.controller.port}", *args)
            assert done.code == code, done.out + done.err
            return done

        # the controller's first sweep: no desired limits anywhere, so each device is pinged
        sweep = await eventually(lambda: last_sweep(h), "the first sweep")
        assert sweep.total == 4 and list(sweep.failed) == [dead]

        table = (await cli("devices", "health")).out
        lines = {line.split()[0]: line for line in table.splitlines() if line.startswith("node")}
        assert "UNREACHABLE since" in lines[dead] and "no answer in 5 s" in lines[dead], table
        assert all(" ok " in lines[d] for d in devices if d != dead), table
        names = await cli("devices", "health", "--unreachable", "-o", "name")
        assert names.out.splitlines() == [f"device/{dead}"]
        one = json.loads((await cli("devices", "health", dead, "-o", "json")).out)
        assert len(one) == 1 and one[0]["inaccessible_since"] and one[0]["last_error"]
        assert not one[0]["sync_in_progress"]

        status = await cli("status")
        assert "4 nodes: 0 drifted, 1 unreachable, 4 unverified" in status.out, status.out

        assert gauge("devicectl_bmc_up", dead) == 0
        assert gauge("devicectl_bmc_up", devices[0]) == 1
        since = gauge("devicectl_bmc_inaccessible_since_timestamp_seconds", dead)
        assert since is not None and since > 0
        assert gauge("devicectl_bmc_inaccessible_since_timestamp_seconds", devices[0]) is None

        # a restarted controller (drift sweeps off: nothing of its own to go by) exports every
        # device's health from the database
        await h.controller.stop()
        for g in (reachability.BMC_UP, reachability.BMC_LAST_SUCCESS, reachability.BMC_INACCESSIBLE_SINCE):
            g.clear()
        reachability.BMC_HEALTH = reachability.BmcHealthGauges()
        h = await start_controller(inventory, **{**settings, "drift_interval": 0.0})
        assert getattr(h.controller, "drift", None) is None
        assert gauge("devicectl_bmc_up", dead) == 0 and gauge("devicectl_bmc_up", devices[3]) == 1
        assert gauge("devicectl_bmc_inaccessible_since_timestamp_seconds", dead) == since
        await h.controller.stop()

        # the BMC answers again: the next controller's first sweep finds it
        fleet.bmcs[2].faults.mode = FaultMode.NONE
        h = await start_controller(inventory, **settings)
        sweep = await eventually(lambda: last_sweep(h), "the first sweep")
        assert not sweep.failed
        shown = await cli("devices", "show", dead)
        assert "BMC health" in shown.out and "UNREACHABLE" not in shown.out, shown.out
        assert gauge("devicectl_bmc_up", dead) == 1
        assert gauge("devicectl_bmc_inaccessible_since_timestamp_seconds", dead) is None
        await h.controller.stop()


async def test_a_restarted_controller_counts_every_verified_device_from_the_database(
    tmp_path: Path, start_controller: Any
) -> None:
    """`devicectl_verify_result` after a restart: the devices verified before it, all of them."""
    h = await start_controller()
    store = h.controller.store
    at = datetime.now(UTC)
    devices = [f"node{i:03d}" for i in range(1, 51)]

    def done(i: int, device: str) -> BmcCheckRow:  # journaled as finished: no checker claims it
        status = "fail" if i < 2 else "pass"
        result = {
            "verdict": status,
            "checks": [{"name": "tls", "status": status, "detail": "", "evidence": {}}],
        }
        return BmcCheckRow(
            f"b1-{device}", "b1", device, False, "done", status, {}, result, None, "", "", at, at, at
        )

    await store.add_bmc_checks([done(i, d) for i, d in enumerate(devices)])
    await h.controller.stop()
    metrics.VERIFY_RESULT.clear()
    metrics._VERIFIED.clear()  # a new process: nothing seen yet

    await start_controller()
    assert REGISTRY.get_sample_value("devicectl_verify_result", {"check": "tls", "result": "pass"}) == 48
    assert REGISTRY.get_sample_value("devicectl_verify_result", {"check": "tls", "result": "fail"}) == 2


async def test_the_health_list_pages_and_selects_like_every_list(
    tmp_path: Path, start_controller: Any
) -> None:
    """`ListBmcHealth` pages (a token per page, every device once) and takes a label selector; the
    CLI follows the pages. The devices were never checked: each is listed with nothing known."""
    from controller._proto.devicecontroller.v1 import admin_pb2 as apb
    from controller.inventory import DeviceEntry
    from tests.controller.conftest import MEMORY

    inventory = {
        f"node{i:03d}": DeviceEntry(f"node{i:03d}", MEMORY, {}, labels={"rack": f"r{i % 3}"})
        for i in range(25)
    }
    h = await start_controller(inventory)
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        answer = await h.admin.ListBmcHealth(apb.ListBmcHealthRequest(page_size=7, page_token=token))
        seen += [r.device for r in answer.devices]
        pages += 1
        token = answer.next_page_token
        if not token:
            break
    assert seen == sorted(inventory) and pages == 4
    rack = await h.admin.ListBmcHealth(apb.ListBmcHealthRequest(selector="rack=r1"))
    assert [r.device for r in rack.devices] == [d for d in sorted(inventory) if int(d[4:]) % 3 == 1]
    done = await asyncio.to_thread(
        pipe, "--server", f"127.0.0.1:{h.controller.port}", "devices", "health", "-l", "rack=r2", "-o", "name"
    )
    assert done.code == 0, done.out + done.err
    assert done.out.splitlines() == [f"device/{d}" for d in sorted(inventory) if int(d[4:]) % 3 == 2]


async def test_every_request_records_its_device_access_with_drift_sweeps_off(
    tmp_path: Path, sink: Any, start_controller: Any
) -> None:
    """Without drift sweeps, ordinary requests keep each BMC's health as DPS's check status does
    after each access: a ping to a hung BMC shows it UNREACHABLE with the error (gauge 0), a later
    answered ping clears it, and a cap the BMC refuses (it answered) clears it as well."""
    async with SimulatorFleet(n=2, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        secrets = fleet.write_inventory(tmp_path / "inventory.toml", tmp_path / "secrets")
        inventory = load_inventory(tmp_path / "inventory.toml")
        h = await start_controller(
            inventory, secrets_dir=str(secrets), drift_interval=0.0, device_call_timeout=5.0
        )
        assert getattr(h.controller, "drift", None) is None
        device = sorted(inventory)[1]
        bmc = fleet.bmcs[1]

        async def cli(*args: str) -> Any:
            return await asyncio.to_thread(pipe, "--server", f"127.0.0.1:{h.controller.port}", *args)

        async def health() -> dict[str, Any]:
            done = await cli("devices", "health", device, "-o", "json")
            assert done.code == 0, done.out + done.err
            rows = json.loads(done.out)
            assert len(rows) == 1
            return dict(rows[0])

        async def unreachable() -> dict[str, Any] | None:
            row = await health()
            return row if row.get("inaccessible_since") else None

        async def reached(after: str) -> dict[str, Any] | None:
            row = await health()
            done = row.get("last_success_at") and row["last_success_at"] > after
            return row if done and not row.get("inaccessible_since") else None

        assert not (await health()).get("last_success_at")  # no request yet: never checked

        bmc.faults.set(FaultMode.HANG)
        sent = await cli("send", "ping", "--device", device, "--timeout", "3", "--wait")
        assert sent.code != 0 or "false" in sent.out.lower(), sent.out + sent.err
        row = await eventually(unreachable, "the hung BMC's failed access recorded")
        assert row["last_error"] and not row.get("last_success_at"), row
        table = (await cli("devices", "health")).out
        line = next(x for x in table.splitlines() if x.startswith(device))
        assert "UNREACHABLE since" in line, table
        assert gauge("devicectl_bmc_up", device) == 0
        assert gauge("devicectl_bmc_inaccessible_since_timestamp_seconds", device) is not None
        other = next(x for x in table.splitlines() if x.startswith(sorted(inventory)[0]))
        assert "never checked" in other, table  # no request for it yet
        assert "1 unreachable" in (await cli("status")).out

        # the BMC answers again: the next request's success clears it
        bmc.faults.set(FaultMode.NONE)
        sent = await cli("send", "ping", "--device", device, "--wait")
        assert sent.code == 0, sent.out + sent.err
        row = await eventually(lambda: reached(""), "the answered ping recorded")
        assert row["last_error"], row  # the last error stays on record, with its time
        assert gauge("devicectl_bmc_up", device) == 1
        assert gauge("devicectl_bmc_inaccessible_since_timestamp_seconds", device) is None

        # unreachable again, then a cap the BMC refuses (500 to every write): it answered
        bmc.faults.set(FaultMode.HANG)
        await cli("send", "ping", "--device", device, "--timeout", "3", "--wait")
        row = await eventually(unreachable, "the second failed access recorded")
        before = row["last_success_at"]
        bmc.faults.set(FaultMode.HTTP_500, writes_only=True)
        sent = await cli(
            "send", "rg-activate", "--device", device, "--resource-group", "rg1", "--gpu", "0=900",
            "--request-id", "refused-1", "--wait",
        )  # fmt: skip
        assert sent.code != 0, sent.out + sent.err
        assert bmc.stats.writes_applied == 0
        shown = await cli("requests", "show", "refused-1", "-o", "json")
        assert json.loads(shown.out)["outcome"] != "ok", shown.out
        await eventually(lambda: reached(before), "the refused cap recorded as an access")
        assert gauge("devicectl_bmc_up", device) == 1
