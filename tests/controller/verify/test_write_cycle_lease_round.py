"""A gained shard's unfinished write cycle is restored apart from the lease round, holding the node's
lane: real controllers on PostgreSQL (real gRPC ports, shard leases) over the HTTPS simulator, whose
BMC holds the restore's write unanswered. The lease rounds go on meanwhile (no BMC reply ever
holds the renewal up), and a request of the node waits in its lane until the node is restored. A
restore writes only while its controller surely holds the node's shard lease: it is cut when the
lease lapses there, and at a stop before the lease is handed back, its journal left open for the
next holder."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy.engine import URL

from bmcsim import SimulatorFleet
from bmcsim._gb200_writes import cap_write
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import policy_pb2 as pp
from controller.cluster.shards import ShardLeases
from controller.execution.write_cycle import WriteCycles, _Lost
from controller.inventory import load_inventory
from controller.store import WriteCycleRow
from plugins.base import WriteLog
from tests.controller.verify.test_write_cycle_journal import caps
from tests.controller.verify.test_write_cycle_ownership import priors_of

R = pb.DeviceControllerRequest
LEASES = {"lease_ttl": 1.5, "shard_count": 4, "claim_interval": 0.05, "sweep_interval": 0.5}
#: how long the BMC holds the restore's write (shorter than the client's 30 s read timeout: the
#: restore waits for it all along)
HANG_SECONDS = 20


@pytest.fixture
def db_url(pg_database: URL) -> str:
    """The controllers' database (start_controller reads this fixture): PostgreSQL, leased shards."""
    return pg_database.render_as_string(hide_password=False)


async def until(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def writes(bmc: Any) -> int:
    """The BMC's PATCH and POST requests, logins left out."""
    calls = bmc.stats.calls.items()
    return sum(n for (m, path), n in calls if m in ("PATCH", "POST") and "Session" not in path)


@asynccontextmanager
async def one_leased_gb200(
    tmp_path: Path, start_controller: Any
) -> AsyncIterator[tuple[Any, ShardLeases, Any]]:
    """A controller on leased shards (`LEASES`) over one simulated GB200 tray: its harness, its
    leases and the tray's BMC."""
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        inventory_path = tmp_path / "inventory.toml"
        secrets = fleet.write_inventory(inventory_path, tmp_path / "secrets")
        h = await start_controller(load_inventory(inventory_path), secrets_dir=str(secrets), **LEASES)
        leases = h.controller.shards
        assert isinstance(leases, ShardLeases)
        yield h, leases, fleet.bmcs[0]


def lapse_at(leases: ShardLeases, when: float) -> None:
    """From `when` (monotonic) on, the process no longer surely holds any lease, as when a database
    stall keeps it from renewing."""
    renewed = leases.valid_for
    leases.valid_for = lambda shard: min(renewed(shard), when - time.monotonic())  # type: ignore[method-assign]


async def check_ended(h: Any, check_id: str, deadline: float, what: str) -> Any:
    """The verification's record once it is neither queued nor running; `what` fails past `deadline`."""
    from controller._proto.devicecontroller.v1 import admin_pb2 as apb

    while (got := (await h.admin.GetBmcCheck(apb.GetBmcCheckRequest(id=check_id))).checks[0]).status in (
        "queued",
        "running",
    ):
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)
    return got


@dataclass
class GainedRestore:
    """A crashed cycle's journal of node001 being restored by `third`, which gained its shard; the
    BMC holds the restore's write unanswered (and does not apply it)."""

    fleet: SimulatorFleet
    #: the node's caps before the crashed cycle (what its journal restores)
    before: dict[str, Any]
    third: Any
    shard: int
    start: Callable[[str], Any]


@asynccontextmanager
async def restore_of_a_gained_shard(
    tmp_path: Path, start_controller: Any, hang_seconds: float, **leases: float
) -> AsyncIterator[GainedRestore]:
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        inventory_path = tmp_path / "inventory.toml"
        secrets = fleet.write_inventory(inventory_path, tmp_path / "secrets")
        inventory = load_inventory(inventory_path)
        bmc = fleet.bmcs[0]
        before = caps(bmc)
        started = {"secrets_dir": str(secrets), **LEASES, **leases}

        def start(instance_id: str) -> Any:
            return start_controller(inventory, instance_id=instance_id, **started)

        first = await start("ctl-first")
        priors = await priors_of(first)
        await first.controller.stop(grace=1.0)  # its leases are handed back

        # a cycle of a crashed controller left GPU 0 at its test value, its journal open
        cap_write(bmc.state.caps["GPU_0"], 1150, None).apply()
        row = WriteCycleRow(
            "crashed", "node001", "verify crashed", priors, "open", None, "ctl-gone", datetime.now(UTC), None
        )
        second = await start("ctl-second")
        await second.controller.store.open_write_cycle(row)
        # the BMC will hold the restore's write unanswered (and not apply it) for `hang_seconds`
        bmc.faults.set("hang", writes_only=True, count=1, hang_seconds=hang_seconds)
        leases = second.controller.shards
        assert isinstance(leases, ShardLeases)
        shard = leases.shard_for("node001")

        # a controller that gains the shard now (the journal was written after this one's start)
        third = await start("ctl-third")
        await second.controller.stop(grace=1.0)
        gainer = third.controller.shards
        assert isinstance(gainer, ShardLeases)
        await until(lambda: gainer.runs(shard), "the node's shard to be gained")
        await until(lambda: bmc.stats.faults_injected["hang"] >= 1, "the restore's write to reach the BMC")
        yield GainedRestore(fleet, before, third, shard, start)


@pytest.mark.postgres
@pytest.mark.timeout(300)
async def test_a_slow_restore_of_a_gained_shard_never_holds_the_lease_rounds_up(
    tmp_path: Path,
    db_url: str,
    start_controller: Any,
    sink: Any,
    lost_writes_settled: None,
) -> None:
    async with restore_of_a_gained_shard(tmp_path, start_controller, HANG_SECONDS) as gained:
        bmc, before, third, shard = gained.fleet.bmcs[0], gained.before, gained.third, gained.shard
        gainer = third.controller.shards
        rounds = gainer._rounds
        # while the BMC holds the restore's write: the lease rounds go on, the lease stays held
        await until(lambda: gainer._rounds >= rounds + 3 or bmc.stats.in_flight == 0, "three lease rounds")
        assert bmc.stats.in_flight > 0 and gainer._rounds >= rounds + 3, "the rounds waited on the BMC"
        assert gainer.runs(shard)
        assert caps(bmc)["GPU_0"] != before["GPU_0"]  # not restored yet (the write hangs)

        # a cap of the node sent now waits in the node's lane until the node is restored
        policies = pp.GPUPolicies(policies=[pp.GPUPolicy(gpu_id=1, power_limit=pp.PowerLimit(watts=700))])
        await third.stub.SendDeviceRequest(
            R(
                device="node001",
                request_id="cap-during-restore",
                gpu_policies_update=R.GPUPoliciesSetRequest(
                    resource_group="rg", gpu_policy_action=R.SET_POLICY, gpu_policies=policies
                ),
            )
        )
        dispatcher = third.controller.dispatcher
        await until(lambda: dispatcher.knows("cap-during-restore"), "the cap to be queued")
        assert bmc.stats.in_flight > 0  # the restore still holds the node
        assert "cap-during-restore" not in sink.unique()
        assert bmc.state.caps["GPU_1"].set_point != 700

        await sink.wait_for({"cap-during-restore"}, timeout=120)
        answer = sink.unique()["cap-during-restore"]
        assert answer.gpu_policies_update.results[0].ok, answer
        after = caps(bmc)
        assert after["GPU_0"] == before["GPU_0"]  # restored from the journal first
        assert bmc.state.caps["GPU_1"].set_point == 700  # then the cap, still in force
        assert await third.controller.store.open_write_cycles() == []
        (closed,) = await third.controller.store.write_cycles_of("verify crashed")
        assert closed.owner == "ctl-third" and closed.epoch >= 1, closed


@pytest.mark.postgres
@pytest.mark.timeout(300)
async def test_a_write_cycle_whose_lease_lapses_here_mid_write_is_cancelled_and_left_to_the_next_holder(
    tmp_path: Path, db_url: str, start_controller: Any
) -> None:
    """A verification's write cycle runs under the shard lease as a request's call does: once this
    process no longer surely holds the lease (a database stall keeps it from renewing), its device
    calls are cancelled, so the next holder, which restores the journal, never has a test write of
    ours in flight beside its own calls; the journal stays open for it."""
    from controller._proto.devicecontroller.v1 import admin_pb2 as apb
    from tests.controller.verify.test_write_cycle_journal import FAST

    async with one_leased_gb200(tmp_path, start_controller) as (h, leases, bmc):
        before = caps(bmc)
        # the test write lands, and its answer is held past the lapse
        bmc.faults.set("late-reply", writes_only=True, count=1, hang_seconds=HANG_SECONDS * 3)
        lapse_at(leases, time.monotonic() + 10.0)  # well after the cycle's reads, while its first write hangs

        started = await h.admin.StartWriteCycle(apb.StartVerifyRequest(devices=["node001"], **FAST))
        await until(lambda: any(m == "PATCH" for (m, _), n in bmc.stats.calls.items() if n), "the test write")
        # far sooner than the BMC answers the write
        deadline = time.monotonic() + HANG_SECONDS * 2
        got = await check_ended(h, started.checks[0].check_id, deadline, "the cycle went on past its lease")
        assert "lease of node001 lapsed here during the write cycle" in got.error, got
        # the held test write is the only one: no restore was started past the lapse (it would
        # write the node beside the next holder's restore and requests)
        assert writes(bmc) == 1
        assert caps(bmc) != before  # the test value waits for the next holder's restore
        assert [c.device for c in await h.controller.store.open_write_cycles()] == ["node001"]


@pytest.mark.postgres
@pytest.mark.timeout(300)
async def test_a_cycles_own_restore_is_cut_when_the_shard_lease_lapses_here_while_it_writes(
    tmp_path: Path, db_url: str, start_controller: Any
) -> None:
    """The restore that ends each cap's cycle is shielded from the request's deadline and a stop,
    but not from the lapse of the shard lease: past it, the shard's next holder may restore the
    journal and run the node's requests, so a restore write of ours still to be sent (its second
    try, a slow BMC's answer awaited) would land beside theirs. The cycle is cut there, and the
    journal stays open for that holder."""
    from controller._proto.devicecontroller.v1 import admin_pb2 as apb
    from tests.controller.verify.test_write_cycle_journal import FAST

    async with one_leased_gb200(tmp_path, start_controller) as (h, leases, bmc):
        before = caps(bmc)
        # the first restore write is held unanswered (and not applied) far past the lapse
        bmc.faults.set("hang", path_contains="ClearOOBSetPoint", count=1, hang_seconds=HANG_SECONDS * 3)
        started = await h.admin.StartWriteCycle(apb.StartVerifyRequest(devices=["node001"], **FAST))
        await until(lambda: bmc.stats.faults_injected["hang"] == 1, "the restore write on the wire")
        writes_at_lapse = writes(bmc)
        lapsed_at = time.monotonic()
        lapse_at(leases, lapsed_at)
        # far sooner than the BMC answers, or the restore's own deadline
        deadline = lapsed_at + HANG_SECONDS
        got = await check_ended(h, started.checks[0].check_id, deadline, "the restore went on past the lease")
        assert "lease of node001 lapsed here during the write cycle" in got.error, got
        # no write started after the lapse (a second try of the restore included)
        assert writes(bmc) == writes_at_lapse
        assert [c.device for c in await h.controller.store.open_write_cycles()] == ["node001"]
        # the held restore was never applied: the test value waits for the next holder's restore
        assert caps(bmc)["HGX_ProcessorModule_0"] != before["HGX_ProcessorModule_0"]


async def restored_from_the_journal_by_a_next_holder(gained: GainedRestore) -> None:
    """The journal left open is restored by the controller that holds the shard next."""
    fourth = await gained.start("ctl-fourth")
    store = fourth.controller.store
    deadline = time.monotonic() + 60
    while await store.open_write_cycles():
        assert time.monotonic() < deadline, "the next holder did not restore the journal"
        await asyncio.sleep(0.1)
    assert caps(gained.fleet.bmcs[0])["GPU_0"] == gained.before["GPU_0"]
    (closed,) = await store.write_cycles_of("verify crashed")
    assert closed.owner == "ctl-fourth", closed


@pytest.mark.postgres
@pytest.mark.timeout(300)
async def test_a_restore_is_cut_when_the_shard_lease_lapses_here_and_left_to_the_next_holder(
    tmp_path: Path,
    db_url: str,
    start_controller: Any,
    caplog: pytest.LogCaptureFixture,
    lost_writes_settled: None,
) -> None:
    """A restore's plugin call runs under the node's shard lease, as a request's call does: once
    this process no longer surely holds the lease (a database stall keeps it from renewing), the
    restore's calls are cancelled, so the next holder, which restores the journal, never has a
    write of ours in flight beside its own; the journal stays open for it."""
    caplog.set_level(logging.WARNING, logger="controller.execution.write_cycle")
    async with restore_of_a_gained_shard(tmp_path, start_controller, HANG_SECONDS * 3) as gained:
        leases = gained.third.controller.shards
        restores = list(gained.third.controller.claims._restores)
        assert restores, "no restore under way"
        lapsed_at = time.monotonic() + 2.0  # while the restore's write hangs
        lapse_at(leases, lapsed_at)
        await asyncio.wait(restores, timeout=HANG_SECONDS)
        assert all(t.done() for t in restores), "the restore went on writing past the lease"
        assert time.monotonic() < lapsed_at + LEASES["lease_ttl"] + 5
        assert "lapsed during the restore" in caplog.text
        assert [c.cycle_id for c in await gained.third.controller.store.open_write_cycles()] == ["crashed"]
        assert caps(gained.fleet.bmcs[0])["GPU_0"] != gained.before["GPU_0"]  # nothing restored here

        await gained.third.controller.stop(grace=1.0)
        await restored_from_the_journal_by_a_next_holder(gained)


@pytest.mark.postgres
@pytest.mark.timeout(300)
async def test_a_stop_cuts_a_restore_under_way_before_it_hands_the_shard_back(
    tmp_path: Path,
    db_url: str,
    start_controller: Any,
    caplog: pytest.LogCaptureFixture,
    lost_writes_settled: None,
) -> None:
    """A stop waits a little for restores under way, then cancels their calls before it hands the
    shard leases back: a restore left running would go on writing the node while the next holder,
    which gains the shard at once, restores the same journal and runs the node's requests."""
    caplog.set_level(logging.WARNING, logger="controller.execution.write_cycle")
    # leases long enough that the stop, not their lapse once the rounds stop, is what cuts it
    async with restore_of_a_gained_shard(
        tmp_path, start_controller, HANG_SECONDS * 3, lease_ttl=30.0
    ) as gained:
        controller = gained.third.controller
        restores = list(controller.claims._restores)
        assert restores, "no restore under way"
        leases = controller.shards
        release_all = leases.release_all
        running_at_release: list[asyncio.Task[None]] = []

        async def release(timeout: float) -> None:
            running_at_release.extend(t for t in restores if not t.done())
            await release_all(timeout)

        leases.release_all = release  # type: ignore[method-assign]
        stopping = time.monotonic()
        await controller.stop(grace=1.0)
        assert running_at_release == [], "a restore still ran when the shard leases were handed back"
        assert time.monotonic() - stopping < HANG_SECONDS * 2  # the BMC answers after HANG_SECONDS * 3
        assert "stopped during the restore" in caplog.text
        assert caps(gained.fleet.bmcs[0])["GPU_0"] != gained.before["GPU_0"]  # nothing restored here

        await restored_from_the_journal_by_a_next_holder(gained)


async def test_a_stop_while_a_restore_reads_its_journal_starts_no_plugin_call() -> None:
    """A stop that comes while a restore awaits its journal's check (or its device) is seen before
    the plugin call starts: `stop` cancels only the calls under way, so a call started after it
    would go on writing the node while its next holder restores the same journal."""
    started: list[str] = []

    async def call(*_: Any) -> Any:
        started.append("restore")
        raise AssertionError("the restore's plugin call started after the stop")

    class Store:
        async def holds_write_cycle(self, _row: WriteCycleRow) -> bool:
            cycles.stop()  # the stop comes while this await is under way
            return True

    async def resolve(_device: str) -> Any:
        return SimpleNamespace(model={}, endpoint=None, state={})

    cycles = WriteCycles(Store(), resolve, "ctl")  # type: ignore[arg-type]
    cycles._call = call  # type: ignore[method-assign]
    row = WriteCycleRow("c1", "node001", "verify", {}, "open", None, "ctl", datetime.now(UTC), None)
    with pytest.raises(_Lost, match="stopping"):
        await cycles._restore(row, {"gpu/0": {"watts": 700.0, "capped": True}}, WriteLog())
    assert started == []
