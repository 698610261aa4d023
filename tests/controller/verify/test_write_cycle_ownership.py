"""Who may restore a write cycle's journal, and what it keeps: a real controller (real gRPC, SQLite)
over the HTTPS simulator, with a second journal holder on the same store.

- a journal is taken over by a compare-and-set of its epoch: the holder it was taken from (still
  restoring) neither closes it over the newer holder's record nor writes the node again;
- a device with two open journals stays pending until both are restored (per device, not per row);
- a cycle cancelled while its journal's insert commits writes nothing and leaves no journal open
  (where that close fails, the node stays pending and its next work restores and closes it);
- an out-of-process plugin's cycle (or cap) that times out keeps an `unknown` receipt for the writes
  it never answered for (its own receipts never came back), never none."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bmcsim import SimulatorFleet
from bmcsim._gb200_writes import cap_write
from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller._proto.devicecontroller.v1 import admin_pb2_grpc as agrpc
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import policy_pb2 as pp
from controller.cluster.shards import Shards
from controller.execution import write_cycle
from controller.execution.resolve import Resolved
from controller.execution.write_cycle import WriteCycles, plan_of
from controller.store import WriteCycleRow
from plugins.base import DeviceContext, DeviceWrite, HealthCheck, HealthQuery, HealthResult, WriteLog
from tests.controller.verify.test_write_cycle_journal import FAST, _done, caps, one_gb200
from tests.plugins.external.conftest import (
    controller,  # noqa: F401 (fixture)
    plugin_table,
    serve_command,
)

R = pb.DeviceControllerRequest


async def until(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def priors_of(h: Any) -> dict[str, Any]:
    """The node's caps as a read-only verification sees them (what a cycle would journal)."""
    read = await h.admin.StartVerify(apb.StartVerifyRequest(devices=["node001"], **FAST))
    plain = await _done(h, read.checks[0].check_id)
    priors = plan_of(HealthResult(tuple(HealthCheck.from_json(c) for c in plain["checks"])))
    assert priors
    return priors


async def cycle_of_node001(h: Any, request_id: str) -> tuple[Resolved, DeviceContext, WriteCycles]:
    """What a write cycle of node001 runs with, apart from the controller's own `WriteCycles`
    (another holder of its journals, `ctl-cycle`, on the same store)."""
    resolved = await h.controller.runner.resolve("node001", b"", b"")
    ctx = DeviceContext(
        device_id="node001",
        model=resolved.model,
        endpoint=resolved.endpoint,
        request_id=request_id,
        deadline=time.monotonic() + 120,
        state=resolved.state,
    )
    cycles = WriteCycles(h.controller.store, lambda d: h.controller.runner.resolve(d, b"", b""), "ctl-cycle")
    return resolved, ctx, cycles


async def leftover_on_gpu0(h: Any, bmc: Any) -> dict[str, Any]:
    """A crashed cycle's open journal "a" of GPU 0, its test value left in force; the caps before."""
    before = caps(bmc)
    priors = await priors_of(h)
    await h.controller.store.open_write_cycle(journal("a", {"gpu/0": priors["gpu/0"]}, "ctl-crashed"))
    cap_write(bmc.state.caps["GPU_0"], 1150, None).apply()
    return before


def journal(cycle_id: str, priors: dict[str, Any], owner: str, age: float = 0.0) -> WriteCycleRow:
    return WriteCycleRow(
        cycle_id=cycle_id,
        device="node001",
        origin=f"verify {cycle_id}",
        priors=priors,
        status="open",
        report=None,
        owner=owner,
        created_at=datetime.now(UTC) - timedelta(seconds=age),
        closed_at=None,
    )


async def test_a_journal_taken_over_mid_restore_is_neither_closed_nor_written_by_its_old_holder(
    tmp_path: Path,
    start_controller: Any,
    lost_writes_settled: None,
) -> None:
    async with one_gb200(tmp_path, start_controller) as (h, bmc):
        store = h.controller.store
        before = caps(bmc)
        priors = await priors_of(h)

        def resolve(device: str) -> Any:
            return h.controller.runner.resolve(device, b"", b"")

        old = WriteCycles(store, resolve, "ctl-old")
        new = WriteCycles(store, resolve, "ctl-new")
        # two unfinished cycles left their test values: A on GPU 0, B (newer) on GPU 1
        await store.open_write_cycle(journal("a", {"gpu/0": priors["gpu/0"]}, "ctl-crashed", age=2))
        await store.open_write_cycle(journal("b", {"gpu/1": priors["gpu/1"]}, "ctl-crashed", age=1))
        cap_write(bmc.state.caps["GPU_0"], 1150, None).apply()
        cap_write(bmc.state.caps["GPU_1"], 1150, None).apply()

        # the old holder restores A: its write lands, its reply is held (a slow BMC)
        bmc.faults.set("late-reply", writes_only=True, count=1, hang_seconds=8)
        old_writes = WriteLog()
        restoring = asyncio.create_task(old.restore_open("node001", old_writes))
        await until(lambda: bmc.stats.faults_injected["late-reply"] >= 1, "the old holder's restore write")

        # meanwhile the node's new holder takes both journals over and restores them
        assert [c.status for c in await new.restore_open("node001", WriteLog())] == ["pass", "pass"]
        assert caps(bmc) == before and await store.open_write_cycles() == []
        # then the node is capped out of band: nothing may put the journal's value back now
        cap_write(bmc.state.caps["GPU_1"], 1000, None).apply()

        checks = await restoring  # the old holder's reply comes back
        assert caps(bmc)["GPU_1"] != before["GPU_1"]  # the old holder never restored B
        assert bmc.state.caps["GPU_1"].set_point == 1000
        assert not any("GPU_1" in w.target for w in old_writes.entries()), old_writes.entries()
        assert [c.name for c in checks] == ["restore gpu/0"], checks  # B: closed by then, left alone
        for cycle_id in ("a", "b"):  # each record is the new holder's, never overwritten by the old
            (row,) = await store.write_cycles_of(f"verify {cycle_id}")
            assert (row.status, row.owner, row.report["owner"]) == ("closed", "ctl-new", "ctl-new"), row
        assert not old.unsettled("node001") and not new.unsettled("node001")


async def test_a_device_with_two_open_journals_stays_pending_until_both_are_restored(
    tmp_path: Path,
    start_controller: Any,
    lost_writes_settled: None,
) -> None:
    async with one_gb200(tmp_path, start_controller) as (h, bmc):
        store = h.controller.store
        before = caps(bmc)
        priors = await priors_of(h)
        cycles = h.controller.runner.write_cycles
        await store.open_write_cycle(journal("older", {"gpu/0": priors["gpu/0"]}, "ctl-crashed", age=2))
        await store.open_write_cycle(journal("newer", {"gpu/1": priors["gpu/1"]}, "ctl-crashed", age=1))
        cap_write(bmc.state.caps["GPU_0"], 1150, None).apply()

        # the older journal's restore is refused by the BMC; the newer one's goes through
        bmc.faults.set("http500", writes_only=True, path_contains="GPU_0", count=10)
        checks = await cycles.restore_open("node001", WriteLog())
        assert {c.name: c.status for c in checks} == {"restore gpu/0": "fail", "restore gpu/1": "pass"}
        assert [r.cycle_id for r in await store.open_write_cycles()] == ["older"]
        assert cycles.unsettled("node001")  # the newer row's success does not release the node

        bmc.faults.set("none")
        await cycles.settle("node001", WriteLog())  # what the node's next request does first
        assert caps(bmc) == before and await store.open_write_cycles() == []
        assert not cycles.unsettled("node001")


async def test_an_out_of_process_plugins_receipts_are_kept_when_its_cycle_times_out(
    controller: Any,  # noqa: F811 (the fixture imported above)
    sink: Any,
    tmp_path: Path,
) -> None:
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        inventory = tmp_path / "inventory.toml"
        secrets = fleet.write_inventory(inventory, tmp_path / "secrets")
        with inventory.open("a") as fh:
            fh.write("\n" + plugin_table("redfish", serve_command("redfish")))
        h = await controller(inventory, secrets_dir=str(secrets))
        bmc = fleet.bmcs[0]
        before = caps(bmc)
        # the test write lands; the BMC answers it only after the request's 8 s have passed
        bmc.faults.set("late-reply", writes_only=True, count=1, hang_seconds=30)
        health = R.BMCHealthDeviceRequest(write_cycle=True, telemetry_interval_ms=20)
        await h.stub.SendDeviceRequest(
            R(device="node001", request_id="ext-1", timeout_seconds=8, bmc_health=health)
        )
        await sink.wait_for({"ext-1"}, timeout=90)
        assert caps(bmc) == before  # restored through the plugin process, under its own deadline
        admin = agrpc.DeviceControllerAdminStub(h.channel)
        record = await admin.GetRequest(apb.GetRequestRequest(request_id="ext-1"))
        statuses = [(w.method, w.status, w.note) for w in record.writes]
        # the test write the plugin never answered for: unknown, never "not written"
        unanswered = [s for s in statuses if s[0] == "bmc_health"]
        assert len(unanswered) == 1 and unanswered[0][1].startswith("unknown"), statuses
        assert all(s.startswith("unknown") or s == "200" for _, s, _ in statuses), statuses
        # the plugin process's own test writes may still be in flight: the journal waits them out,
        # the node pending, and is restored again once the wait is over (`LOST_WRITE_SECONDS`)
        (row,) = await h.controller.store.open_write_cycles()
        assert sorted(row.report["lost_writes"]) == sorted(row.priors) and row.report["recheck_after"]
        assert h.controller.runner.write_cycles.unsettled("node001")

        # a cap the plugin process never answered in time: its receipt says unknown too
        bmc.faults.set("late-reply", writes_only=True, count=1, hang_seconds=30)
        policies = pp.GPUPolicies(policies=[pp.GPUPolicy(gpu_id=0, power_limit=pp.PowerLimit(watts=700))])
        cap = R.GPUPoliciesSetRequest(
            resource_group="rg", gpu_policy_action=R.SET_POLICY, gpu_policies=policies
        )
        await h.stub.SendDeviceRequest(
            R(device="node001", request_id="ext-cap", timeout_seconds=5, gpu_policies_update=cap)
        )
        await sink.wait_for({"ext-cap"}, timeout=90)
        record = await admin.GetRequest(apb.GetRequestRequest(request_id="ext-cap"))
        assert [(w.method, w.status[:8]) for w in record.writes] == [("gpu_policies_update", "unknown:")]


async def test_a_cycles_own_restore_never_undoes_a_cap_devicectl_set_while_it_ran(
    tmp_path: Path, start_controller: Any, sink: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cycle stopped mid-way (a shutdown) restores from its journal what it did not prove back,
    except a cap that devicectl set after the cycle began (here by a request of another holder of
    the node, while the BMC held the cycle's first test write): that newer cap stays."""
    async with one_gb200(tmp_path, start_controller) as (h, bmc):
        store = h.controller.store
        before = caps(bmc)
        resolved, ctx, cycles = await cycle_of_node001(h, "internal-own-cycle")
        bmc.faults.set("hang", writes_only=True, count=1, hang_seconds=20)
        query = HealthQuery(skip_writes=False, **FAST)
        running = asyncio.create_task(cycles.run(resolved, ctx, query, "verify own", WriteLog()))
        await until(lambda: bmc.stats.faults_injected["hang"] >= 1, "the cycle's first test write")

        policies = pp.GPUPolicies(policies=[pp.GPUPolicy(gpu_id=0, power_limit=pp.PowerLimit(watts=700))])
        await h.stub.SendDeviceRequest(
            R(
                device="node001",
                request_id="cap-700",
                gpu_policies_update=R.GPUPoliciesSetRequest(
                    resource_group="rg", gpu_policy_action=R.SET_POLICY, gpu_policies=policies
                ),
            )
        )
        await sink.wait_for({"cap-700"}, timeout=60)
        assert sink.unique()["cap-700"].gpu_policies_update.results[0].ok
        running.cancel()  # a shutdown: the cycle restores from its journal before it ends
        with pytest.raises(asyncio.CancelledError):
            await running
        assert bmc.state.caps["GPU_0"].set_point == 700  # the newer cap stays
        after = caps(bmc)
        assert {k: v for k, v in after.items() if k != "GPU_0"} == {
            k: v for k, v in before.items() if k != "GPU_0"
        }
        (row,) = await store.write_cycles_of("verify own")
        # the held test write (module 0's) never answered: it may still land, so the journal waits
        # it out with the node pending; gpu/0 is devicectl's newer cap either way
        assert row.status == "open" and row.report["superseded"] == {"gpu/0": "cap-700"}, row.report
        assert row.report["lost_writes"] == ["module/0"] and cycles.unsettled("node001")
        # once the wait is over (here at once), the node is read and restored again, the newer cap
        # kept, and the journal closed
        monkeypatch.setattr(write_cycle, "LOST_WRITE_SECONDS", 0.0)
        await cycles.restore_open("node001", WriteLog())
        (row,) = await store.write_cycles_of("verify own")
        assert row.status == "closed" and bmc.state.caps["GPU_0"].set_point == 700, row.report
        assert not cycles.unsettled("node001")


async def test_close_reports_are_dropped_once_delivered_and_a_result_without_caps_reads_nothing(
    tmp_path: Path, start_controller: Any, sink: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with one_gb200(tmp_path, start_controller) as (h, _):
        cycles = h.controller.runner.write_cycles
        started = await h.admin.StartWriteCycle(apb.StartVerifyRequest(devices=["node001"], **FAST))
        await _done(h, started.checks[0].check_id)
        health = R.BMCHealthDeviceRequest(write_cycle=True, telemetry_interval_ms=20)
        await h.stub.SendDeviceRequest(R(device="node001", request_id="wc-1", bmc_health=health))
        await sink.wait_for({"wc-1"}, timeout=90)
        assert len(await h.controller.store.write_cycles_of("bmc_health wc-1")) == 1  # it did cycle
        assert cycles._reports == {}  # nothing is kept per request once it ended

        reads: list[str] = []
        store = h.controller.store
        desired_for = store.desired_for

        async def counted(device: str) -> Any:
            reads.append(device)
            return await desired_for(device)

        monkeypatch.setattr(store, "desired_for", counted)
        uncapped = HealthResult((HealthCheck("cap gpu/0", "pass", "", {"capped": False, "watts": 1200.0}),))
        assert await cycles.explained("node001", uncapped) is uncapped and reads == []
        capped = HealthResult((HealthCheck("cap gpu/0", "pass", "", {"capped": True, "watts": 900.0}),))
        (flagged,) = (await cycles.explained("node001", capped)).checks
        assert reads == ["node001"] and flagged.status == "warn", flagged  # devicectl did not set it


async def cancelled_during_its_insert(
    h: Any, monkeypatch: pytest.MonkeyPatch, writes: WriteLog
) -> WriteCycles:
    """Run a write cycle of node001 and cancel it (a shutdown, a deadline) once its journal's
    insert has committed, before the insert's caller resumes; the cycles, after the cancel."""
    store = h.controller.store
    resolved, ctx, cycles = await cycle_of_node001(h, "internal-cancelled-cycle")
    inserted, release = asyncio.Event(), asyncio.Event()
    insert = store.open_write_cycle

    async def insert_then_hold(row: WriteCycleRow) -> None:
        await insert(row)  # committed; the cancel lands before the insert's caller resumes
        inserted.set()
        await release.wait()

    monkeypatch.setattr(store, "open_write_cycle", insert_then_hold)
    query = HealthQuery(skip_writes=False, **FAST)
    running = asyncio.create_task(cycles.run(resolved, ctx, query, "verify cancelled", writes))
    await asyncio.wait_for(inserted.wait(), 60)
    running.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await running
    return cycles


async def test_a_cycle_cancelled_during_its_journal_insert_writes_nothing_and_leaves_no_open_journal(
    tmp_path: Path, start_controller: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancel that lands while the journal's insert commits: the cycle wrote nothing, so its
    journal is closed, never left open for a later restore to write the node's old reads back over
    a newer cap set outside devicectl."""
    async with one_gb200(tmp_path, start_controller) as (h, bmc):
        store = h.controller.store
        before = caps(bmc)
        writes = WriteLog()
        cycles = await cancelled_during_its_insert(h, monkeypatch, writes)
        assert not writes.entries() and caps(bmc) == before  # nothing written
        (row,) = await store.write_cycles_of("verify cancelled")
        assert row.status == "closed" and row.report["written"] is False, row
        assert await store.open_write_cycles() == [] and not cycles.unsettled("node001")


async def test_a_journal_insert_that_commits_and_then_fails_is_closed_unwritten(
    tmp_path: Path, start_controller: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal's insert commits and then raises (a commit retried that had landed: a duplicate
    key): the cycle fails having written nothing, and its journal is closed, not left open for a
    later restore to write the node's old reads back over what it holds by then."""
    async with one_gb200(tmp_path, start_controller) as (h, bmc):
        store = h.controller.store
        before = caps(bmc)
        resolved, ctx, cycles = await cycle_of_node001(h, "internal-insert-cycle")
        insert = store.open_write_cycle

        async def insert_then_fail(row: WriteCycleRow) -> None:
            await insert(row)
            raise RuntimeError("UNIQUE constraint failed: write_cycles.cycle_id")

        monkeypatch.setattr(store, "open_write_cycle", insert_then_fail)
        writes = WriteLog()
        with pytest.raises(RuntimeError):
            await cycles.run(resolved, ctx, HealthQuery(skip_writes=False, **FAST), "verify insert", writes)
        assert not writes.entries() and caps(bmc) == before  # nothing written
        (row,) = await store.write_cycles_of("verify insert")
        assert row.status == "closed" and row.report["written"] is False, row
        assert await store.open_write_cycles() == [] and not cycles.unsettled("node001")


async def test_a_cancelled_cycle_whose_unwritten_close_failed_is_closed_before_the_nodes_next_work(
    tmp_path: Path, start_controller: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, but the unwritten journal's close fails (a database fault): the journal may still
    be open, so the node stays pending, and its next work restores the journal first (nothing was
    written: its values are those in force) and closes it, rather than leaving it open for the
    next start to write its values over whatever the node's requests set meanwhile."""
    async with one_gb200(tmp_path, start_controller) as (h, bmc):
        store = h.controller.store
        before = caps(bmc)
        close = store.close_write_cycle
        failed: list[str] = []

        async def close_fails_once(cycle_id: str, *args: Any, **kwargs: Any) -> bool:
            if not failed:
                failed.append(cycle_id)
                raise OSError("disk I/O error")
            return await close(cycle_id, *args, **kwargs)

        monkeypatch.setattr(store, "close_write_cycle", close_fails_once)
        cycles = await cancelled_during_its_insert(h, monkeypatch, WriteLog())
        (row,) = await store.open_write_cycles(["node001"])
        assert failed == [row.cycle_id] and cycles.unsettled("node001")  # the close failed: still pending

        checks = await cycles.settle("node001", WriteLog())  # the node's next work, its lane held
        assert checks and all(c.status == "pass" for c in checks), checks
        assert await store.open_write_cycles() == [] and not cycles.unsettled("node001")
        assert caps(bmc) == before


async def test_one_journal_that_cannot_be_taken_at_a_start_leaves_the_others_restored_not_running(
    tmp_path: Path,
    start_controller: Any,
    monkeypatch: pytest.MonkeyPatch,
    lost_writes_settled: None,
) -> None:
    """At a start (SQLite: no shard leases), one journal whose takeover fails is that journal's
    failure alone: `recover` returns only once every other restore has ended, none left writing
    while the process goes on to serve; the failed one's device stays pending."""
    async with one_gb200(tmp_path, start_controller) as (h, bmc):
        store = h.controller.store
        before = caps(bmc)
        priors = await priors_of(h)
        await store.open_write_cycle(journal("a", {"gpu/0": priors["gpu/0"]}, "ctl-crashed", age=2))
        await store.open_write_cycle(journal("b", {"gpu/1": priors["gpu/1"]}, "ctl-crashed", age=1))
        cap_write(bmc.state.caps["GPU_0"], 1150, None).apply()
        cap_write(bmc.state.caps["GPU_1"], 1150, None).apply()
        bmc.latency = 0.5  # B's restore is still writing when A's takeover fails
        take = store.take_write_cycle

        async def failing_take(row: WriteCycleRow, *args: Any, **kw: Any) -> Any:
            if row.cycle_id == "a":
                raise RuntimeError("database is locked")
            return await take(row, *args, **kw)

        monkeypatch.setattr(store, "take_write_cycle", failing_take)
        cycles = WriteCycles(store, lambda d: h.controller.runner.resolve(d, b"", b""), "ctl-start")
        assert await cycles.recover(lambda device: True) == 2
        assert caps(bmc)["GPU_1"] == before["GPU_1"]  # B restored before `recover` returned
        assert [r.cycle_id for r in await store.open_write_cycles()] == ["a"]
        assert cycles.unsettled("node001")  # A: restored before the node's next work


@pytest.mark.parametrize(
    ("report", "waits"),
    [
        (None, {"gpu/0"}),  # no report: its cycle never closed it (a crash), every cap waits
        (["lost_writes"], {"gpu/0"}),  # no JSON object: says no more than none
        ("garbage", {"gpu/0"}),
        ({}, set()),
        ({"lost_writes": ["gpu/0"], "recheck_after": "soon"}, set()),
        ({"lost_writes": ["gpu/0"], "recheck_after": "2999-01-01T00:00:00"}, set()),  # no zone
        ({"lost_writes": "gpu/0", "recheck_after": "2999-01-01T00:00:00+00:00"}, set()),
        ({"lost_writes": ["gpu/0", "cpu/9", 7], "recheck_after": "2999-01-01T00:00:00+00:00"}, {"gpu/0"}),
        ({"lost_writes": ["gpu/0"], "recheck_after": "2000-01-01T00:00:00+00:00"}, set()),  # past
    ],
)
def test_a_journals_wait_for_a_lost_write_is_read_from_the_database_untrusted(
    report: Any, waits: set[str]
) -> None:
    """What a journal's last report says it still waits for comes from the database (another
    process, an older release, a hand): malformed is no wait, names only caps it journaled, and
    never a wait longer than one `LOST_WRITE_SECONDS` from now. A journal no cycle ever reported
    on was left by a process that ended mid-cycle: each of its caps waits."""
    row = replace(journal("x", {"gpu/0": {"watts": 700.0, "capped": True}}, "ctl"), report=report)
    keys, until = write_cycle._still_waiting(row)
    assert keys == waits
    assert until <= datetime.now(UTC) + timedelta(seconds=write_cycle.LOST_WRITE_SECONDS)


GPU0_EM = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_0/EnvironmentMetrics"
CPU0_EM = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/CPU_0/EnvironmentMetrics"
LOST = DeviceWrite(GPU0_EM, "PATCH", component="GPU 0", before=1200.0, status="unknown (late)")


@pytest.mark.parametrize(
    ("writes", "lost"),
    [
        ([LOST], {"gpu/0"}),
        # a later write found the test value in force: the lost one had landed, and lands once
        ([LOST, DeviceWrite(GPU0_EM, "PATCH", before=1150.0, status="200")], set()),
        # it found the old value: the lost one may still land after it
        ([LOST, DeviceWrite(GPU0_EM, "PATCH", before=1200.0, status="200")], {"gpu/0"}),
        # sent once more and landed on the old value: the restore's finding is that write's doing
        (
            [
                LOST,
                DeviceWrite(GPU0_EM, "PATCH", before=1200.0, status="200"),
                DeviceWrite(GPU0_EM, "PATCH", before=1150.0, status="200"),
            ],
            {"gpu/0"},
        ),
        # two lost: one landing says nothing of the other
        ([LOST, LOST, DeviceWrite(GPU0_EM, "PATCH", before=1150.0, status="200")], {"gpu/0"}),
        ([replace(LOST, status="400")], set()),  # refused: it changed nothing
        (
            [replace(LOST, target=GPU0_EM + "/Actions/Oem/NvidiaEnvironmentMetrics.ClearOOBSetPoint")],
            {"gpu/0"},
        ),
        # an out-of-process plugin that never answered, for the caps its receipt names
        (
            [DeviceWrite("plugin redfish", "bmc_health", component="gpu/0, cpu/0", status="unknown: x")],
            {"gpu/0", "cpu/0"},
        ),
        (
            [
                replace(
                    LOST, target="/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_0/EnvironmentMetricsX"
                )
            ],
            set(),
        ),
    ],
)
def test_the_caps_a_lost_test_write_may_still_change_are_read_from_its_receipts(
    writes: list[DeviceWrite], lost: set[str]
) -> None:
    priors = {"gpu/0": {"watts": 1200.0, "resource": GPU0_EM}, "cpu/0": {"watts": 420.0, "resource": CPU0_EM}}
    assert write_cycle._lost_writes(writes, priors) == lost


async def test_a_restore_queued_where_the_shard_lease_is_gone_leaves_the_journal_to_its_holder(
    tmp_path: Path,
    start_controller: Any,
    lost_writes_settled: None,
) -> None:
    """A restore that comes to a journal once this process no longer surely holds the node's shard
    lease (queued behind others while a rebalancing handed the shard on) neither takes the journal
    over nor writes the node: taken, the epoch it bumps would refuse the next holder its own
    restore and close, and nobody would restore the node."""

    class Lapsed(Shards):
        def valid_for(self, shard: int) -> float:
            return 0.0

    async with one_gb200(tmp_path, start_controller) as (h, bmc):
        store = h.controller.store
        before = await leftover_on_gpu0(h, bmc)

        def resolve(device: str) -> Any:
            return h.controller.runner.resolve(device, b"", b"")

        lapsed = WriteCycles(store, resolve, "ctl-lapsed", shards=Lapsed({}, 1))
        checks = await lapsed.restore_open("node001", WriteLog())
        assert [c.status for c in checks] == ["fail"] and "not restored here" in checks[0].detail, checks
        (row,) = await store.open_write_cycles()
        assert (row.owner, row.epoch) == ("ctl-crashed", 0)  # not taken over
        assert caps(bmc)["GPU_0"] != before["GPU_0"]  # nothing written
        holder = WriteCycles(store, resolve, "ctl-holder")
        assert [c.status for c in await holder.restore_open("node001", WriteLog())] == ["pass"]
        assert caps(bmc) == before and await store.open_write_cycles() == []


async def test_a_verifications_restore_of_a_leftover_counts_as_its_shards_work(
    tmp_path: Path, start_controller: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A verification that first restores a node's unfinished cycle holds the node's shard busy
    meanwhile, as its write cycle does: a rebalancing does not hand the shard on under it."""
    async with one_gb200(tmp_path, start_controller) as (h, _):
        runner = h.controller.runner
        cycles = runner.write_cycles
        shard = runner.shards.shard_for("node001")
        busy: list[int] = []

        async def settle(device: str, writes: WriteLog) -> list[HealthCheck]:
            busy.append(runner.running_shards.get(shard, 0))
            return []

        monkeypatch.setattr(cycles, "unsettled", lambda device: True)
        monkeypatch.setattr(cycles, "settle", settle)
        read = await h.admin.StartVerify(apb.StartVerifyRequest(devices=["node001"], **FAST))
        await _done(h, read.checks[0].check_id)
        assert busy and busy[0] >= 1, busy


async def test_a_failed_read_of_gained_journals_keeps_their_nodes_unsettled_until_read(
    tmp_path: Path,
    start_controller: Any,
    monkeypatch: pytest.MonkeyPatch,
    lost_writes_settled: None,
) -> None:
    """Where the lease round's read of gained shards' journals fails, those shards still run: a
    request of one of their nodes, then or later, reads and restores its node's journals first
    (until a later round reads them), never running over a leftover test value."""
    async with one_gb200(tmp_path, start_controller) as (h, bmc):
        store = h.controller.store
        before = await leftover_on_gpu0(h, bmc)
        cycles = WriteCycles(store, lambda d: h.controller.runner.resolve(d, b"", b""), "ctl-gainer")
        read = store.open_write_cycles

        async def unreadable(*args: Any) -> Any:
            raise RuntimeError("database is locked")

        monkeypatch.setattr(store, "open_write_cycles", unreadable)
        with pytest.raises(RuntimeError):
            await cycles.hold(lambda device: True)
        monkeypatch.setattr(store, "open_write_cycles", read)
        assert cycles.unsettled("node001")  # its journals were never read: not known settled
        checks = await cycles.settle("node001", WriteLog())  # what a request of it runs first
        assert [c.status for c in checks] == ["pass"] and caps(bmc) == before
        assert not cycles.unsettled("node001") and await store.open_write_cycles() == []
