"""A write cycle is a journaled transaction: a real `devicectl serve` killed (SIGKILL) or stopped
(SIGTERM) while the HTTPS simulator holds the test value ends with every cap back to what it was,
and the verification's record says which cap was restored to which value, with the receipts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc

from bmcsim import SimulatorFleet
from bmcsim._gb200_writes import cap_write
from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller._proto.devicecontroller.v1 import admin_pb2_grpc as agrpc
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc
from controller._proto.devicecontroller.v1 import policy_pb2 as pp
from controller.execution import write_cycle
from controller.execution.write_cycle import plan_of
from controller.inventory import load_inventory
from controller.store import WriteCycleRow
from plugins.base import HealthCheck, HealthResult, WriteLog
from tests.serve_process import ROOT, free_port, start_serving

FAST = {"telemetry_interval_ms": 20, "latency_samples": 2, "samples_per_telemetry": 1}


def caps(bmc: Any) -> dict[str, Any]:
    return {name: cap.snapshot() for name, cap in bmc.state.caps.items()}


@contextlib.asynccontextmanager
async def one_gb200(tmp_path: Path, start_controller: Any, **settings: Any) -> AsyncIterator[tuple[Any, Any]]:
    """An in-process controller (the `start_controller` fixture's harness, with `settings`) over one
    simulated GB200 tray, and that tray's BMC."""
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        inventory = tmp_path / "inventory.toml"
        secrets = fleet.write_inventory(inventory, tmp_path / "secrets")
        h = await start_controller(load_inventory(inventory), secrets_dir=str(secrets), **settings)
        yield h, fleet.bmcs[0]


async def until(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def record(port: int, check_id: str) -> apb.BmcCheckRecord:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        admin = agrpc.DeviceControllerAdminStub(channel)
        return (await admin.GetBmcCheck(apb.GetBmcCheckRequest(id=check_id), timeout=30)).checks[0]


async def finished(port: int, check_id: str, timeout: float = 90.0) -> apb.BmcCheckRecord:
    deadline = time.monotonic() + timeout
    while True:
        found = await record(port, check_id)
        if found.status not in ("queued", "running"):
            return found
        assert time.monotonic() < deadline, found
        await asyncio.sleep(0.2)


class Serve:
    """`devicectl serve` on SQLite as its own process, over the simulator fleet's inventory."""

    def __init__(self, tmp: Path, fleet: SimulatorFleet, callback: str) -> None:
        inventory = tmp / "inventory.toml"
        secrets = fleet.write_inventory(inventory, tmp / "secrets")
        self.port = free_port()
        self.args = [
            sys.executable, "-m", "controller", "serve",
            "--listen", f"127.0.0.1:{self.port}",
            "--database-url", f"sqlite:///{tmp}/devicectl.db",
            "--callback", callback,
            "--inventory", str(inventory),
            "--secrets-dir", str(secrets),
            "--instance-id", "cycle-journal",
            "--auto-upgrade",
        ]  # fmt: skip
        self.env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.log = tmp / "serve.log"
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        self.proc = await start_serving(self.args, self.env, self.log, self.port, tries=300)

    async def signal(self, sig: int) -> None:
        """Signal the process and wait for its exit (the simulator shares this event loop: it
        keeps answering the stopping controller meanwhile)."""
        assert self.proc is not None
        self.proc.send_signal(sig)
        await asyncio.to_thread(self.proc.wait, 60)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    async def write_cycle(self, device: str) -> str:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{self.port}") as channel:
            admin = agrpc.DeviceControllerAdminStub(channel)
            batch = await admin.StartWriteCycle(apb.StartVerifyRequest(devices=[device], **FAST), timeout=30)
        return str(batch.checks[0].check_id)


async def _held_mid_cycle(serve: Serve, bmc: Any) -> tuple[str, dict[str, Any]]:
    """Start a write cycle whose first cap write lands but is answered only much later."""
    before = caps(bmc)
    bmc.faults.set("late-reply", writes_only=True, count=1, hang_seconds=120)
    check_id = await serve.write_cycle("node001")
    await until(lambda: caps(bmc) != before, "the test value to land")
    return check_id, before


async def test_a_sigkill_mid_cycle_is_restored_from_the_journal_at_the_restart(
    tmp_path: Path, sink: Any
) -> None:
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        bmc = fleet.bmcs[0]
        serve = Serve(tmp_path, fleet, sink.address)
        await serve.start()
        try:
            check_id, before = await _held_mid_cycle(serve, bmc)
            await serve.signal(signal.SIGKILL)
            changed = [name for name, snap in caps(bmc).items() if snap != before[name]]
            assert len(changed) == 1  # the killed cycle left its test value in force

            await serve.start()  # the restart restores it from the journal before anything else
            got = await finished(serve.port, check_id)
            assert caps(bmc) == before
            assert got.status == "interrupted", got
            assert "restored from its journal:" in got.error and "NOT restored" not in got.error, got.error
            # the killed cycle's other test writes died unanswered: the journal waits them out
            assert (
                "may still land (the controller that ran the cycle left no record of its answers)"
                in got.error
            ), got.error
            assert any(w.method in ("PATCH", "POST") for w in got.writes), (got.error, got.writes)

            # a re-run reads the real value as "before" and leaves it in force
            again = await finished(serve.port, await serve.write_cycle("node001"))
            assert again.status == "done" and again.verdict in ("pass", "warn"), again
            assert caps(bmc) == before
        finally:
            serve.stop()


async def test_a_sigterm_mid_cycle_restores_and_keeps_both_receipts(tmp_path: Path, sink: Any) -> None:
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        bmc = fleet.bmcs[0]
        serve = Serve(tmp_path, fleet, sink.address)
        await serve.start()
        try:
            check_id, before = await _held_mid_cycle(serve, bmc)
            await serve.signal(signal.SIGTERM)
            assert caps(bmc) == before  # restored by the stopping controller itself

            await serve.start()
            got = await record(serve.port, check_id)
            assert got.status == "interrupted", got
            assert got.error.startswith("stopped by a controller shutdown during its write cycle"), got.error
            assert "restored" in got.error and "NOT restored" not in got.error, got.error
            sent = [w for w in got.writes if w.method in ("PATCH", "POST")]
            assert len(sent) >= 2, [(w.method, w.status, w.note) for w in got.writes]
            assert sent[0].status.startswith("unknown"), sent[0]  # the test write: no answer came
            assert sent[-1].status == "200" and "restore" in sent[-1].note, sent[-1]
        finally:
            serve.stop()


async def test_a_sigkill_mid_bmc_health_cycle_restores_and_the_rerun_reads_the_real_value(
    tmp_path: Path, sink: Any
) -> None:
    """The topology server's door: the journaled request runs again after the restart, once the
    journal is restored, so its "before" is the node's real value, never the leftover test value."""
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        bmc = fleet.bmcs[0]
        serve = Serve(tmp_path, fleet, sink.address)
        await serve.start()
        try:
            before = caps(bmc)
            bmc.faults.set("late-reply", writes_only=True, count=1, hang_seconds=120)
            health = pb.DeviceControllerRequest.BMCHealthDeviceRequest(
                write_cycle=True, telemetry_interval_ms=20
            )
            async with grpc.aio.insecure_channel(f"127.0.0.1:{serve.port}") as channel:
                stub = dgrpc.DeviceControllerStub(channel)
                await stub.SendDeviceRequest(
                    pb.DeviceControllerRequest(device="node001", request_id="dps-1", bmc_health=health),
                    timeout=30,
                )
            await until(lambda: caps(bmc) != before, "the test value to land")
            await serve.signal(signal.SIGKILL)
            assert caps(bmc) != before

            await serve.start()
            await sink.wait_for({"dps-1"}, timeout=120)
            answer = sink.unique()["dps-1"].bmc_health
            assert caps(bmc) == before
            writes = [c for c in answer.checks if c.name.startswith("write ")]
            assert len(writes) == 8 and all(c.status == "pass" for c in writes), answer
            # every "before" is the node's own value (no explicit cap), never the leftover test cap
            assert not any(json.loads(c.evidence_json)["before"]["capped"] for c in writes), writes
            assert answer.success and answer.verdict in ("pass", "warn"), answer
        finally:
            serve.stop()


# ---- in one controller process: the request's deadline, and an unfinished journal --------------

R = pb.DeviceControllerRequest


async def test_a_slow_test_write_past_the_requests_deadline_is_restored_under_its_own(
    tmp_path: Path, start_controller: Any, sink: Any
) -> None:
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        inventory = tmp_path / "inventory.toml"
        secrets = fleet.write_inventory(inventory, tmp_path / "secrets")
        h = await start_controller(load_inventory(inventory), secrets_dir=str(secrets))
        bmc = fleet.bmcs[0]
        before = caps(bmc)
        # the BMC applies the test write and answers it only after the request's 8 s have passed
        bmc.faults.set("late-reply", writes_only=True, count=1, hang_seconds=30)
        health = R.BMCHealthDeviceRequest(write_cycle=True, telemetry_interval_ms=20)
        await h.stub.SendDeviceRequest(
            R(device="node001", request_id="slow-1", timeout_seconds=8, bmc_health=health)
        )
        await sink.wait_for({"slow-1"}, timeout=60)
        answer = sink.unique()["slow-1"].bmc_health
        assert caps(bmc) == before  # the restore was sent, under its own deadline
        assert "the request's deadline passed" not in answer.error, answer.error
        record = await h.admin.GetRequest(apb.GetRequestRequest(request_id="slow-1"))
        sent = [w for w in record.writes if w.method in ("PATCH", "POST")]
        assert sent[0].status.startswith("unknown"), sent[0]  # landed or not known: never "error"
        assert not any("DeadlineExceeded" in w.status and w.status.startswith("error") for w in sent)
        assert any("restore" in w.note and w.status == "200" for w in sent), sent
        assert await h.controller.store.open_write_cycles() == []  # the journal is closed


async def test_the_requests_deadline_never_cuts_the_restore_write_in_flight(
    tmp_path: Path, start_controller: Any, sink: Any
) -> None:
    """The request's deadline cancels the cycle while a restore's write is on the wire: the cancel
    waits for its answer, never cuts it (a cut write is one more "may have landed" on the node)."""
    async with one_gb200(tmp_path, start_controller) as (h, bmc):
        before = caps(bmc)
        # the first restore is answered 12 s late: the request's 8 s end while it is on the wire
        bmc.faults.set("late-reply", path_contains="ClearOOBSetPoint", count=1, hang_seconds=12)
        health = R.BMCHealthDeviceRequest(write_cycle=True, telemetry_interval_ms=20)
        await h.stub.SendDeviceRequest(
            R(device="node001", request_id="cut-1", timeout_seconds=8, bmc_health=health)
        )
        await sink.wait_for({"cut-1"}, timeout=60)
        assert "deadline" in sink.unique()["cut-1"].bmc_health.error
        assert caps(bmc) == before
        record = await h.admin.GetRequest(apb.GetRequestRequest(request_id="cut-1"))
        sent = [w for w in record.writes if w.method in ("PATCH", "POST")]
        assert [w.status for w in sent] == ["200", "200"], sent  # the test write, its restore
        assert "restore" in sent[1].note and sent[1].duration_ms >= 11_000, sent
        assert await h.controller.store.open_write_cycles() == []


async def test_a_test_write_whose_task_outlives_the_deadline_is_waited_out_and_then_restored(
    tmp_path: Path, start_controller: Any, sink: Any, monkeypatch: Any
) -> None:
    """A BMC answers the test write with 202 and a task that is still running when the request's
    deadline passes: the restore reads the old value in force and writes nothing, and the task
    lands the test value later. The journal is not closed on that read: it waits the lost write
    out, the node pending, and the journal sweep restores the node once the wait is over."""
    monkeypatch.setattr(write_cycle, "LOST_WRITE_SECONDS", 12.0)
    async with one_gb200(tmp_path, start_controller, sweep_interval=0.5) as (h, bmc):
        before = caps(bmc)
        bmc.configure(async_writes=True, task_delay=8.0)  # each cap write lands 8 s after its 202
        health = R.BMCHealthDeviceRequest(write_cycle=True, telemetry_interval_ms=20)
        await h.stub.SendDeviceRequest(
            R(device="node001", request_id="task-1", timeout_seconds=4, bmc_health=health)
        )
        await sink.wait_for({"task-1"}, timeout=60)
        store, cycles = h.controller.store, h.controller.runner.write_cycles
        (row,) = await store.open_write_cycles()  # not closed on a read that a late task can undo
        assert row.report["lost_writes"] and row.report["recheck_after"], row.report
        assert cycles.unsettled("node001")
        await until(lambda: caps(bmc) != before, "a test write's task to land after the answer", 30)
        # the journal sweep restores the node once the wait is over, and closes the journal
        for _ in range(300):
            if not await store.open_write_cycles() and caps(bmc) == before:
                break
            await asyncio.sleep(0.2)
        assert caps(bmc) == before
        assert await store.open_write_cycles() == [] and not cycles.unsettled("node001")


async def test_a_journal_a_crash_left_waits_out_the_test_writes_that_died_unanswered(
    tmp_path: Path, start_controller: Any, monkeypatch: Any
) -> None:
    """A journal no cycle ever closed: the process running the cycle ended (a crash), and with it
    the answers of the test writes it had sent. The start's restore reads the old values in force
    and writes nothing; a test write the dead process sent then lands. The journal is not closed on
    that first read: it waits `LOST_WRITE_SECONDS` for every cap, the node pending, and the journal
    sweep restores what landed and closes it once the wait is over."""
    monkeypatch.setattr(write_cycle, "LOST_WRITE_SECONDS", 6.0)
    async with one_gb200(tmp_path, start_controller, sweep_interval=0.3) as (h, bmc):
        store, cycles = h.controller.store, h.controller.runner.write_cycles
        before = caps(bmc)
        await _leave_open_journal(h, "crashed", "verify crashed")
        assert await cycles.recover(lambda device: True) == 1  # what a start does
        (row,) = await store.open_write_cycles()  # nothing to restore, yet not closed
        assert caps(bmc) == before and bmc.stats.writes_applied == 0, bmc.stats.calls
        assert sorted(row.report["lost_writes"]) == sorted(row.priors) and row.report["recheck_after"]
        assert cycles.unsettled("node001")
        # the dead process's test write to GPU 2 lands now, after the start's restore
        cap_write(bmc.state.caps["GPU_2"], 1150, None).apply()
        assert caps(bmc) != before
        for _ in range(200):
            if not await store.open_write_cycles():
                break
            await asyncio.sleep(0.1)
        assert caps(bmc) == before and not cycles.unsettled("node001")
        (closed,) = await store.write_cycles_of("verify crashed")
        assert closed.status == "closed" and "lost_writes" not in closed.report, closed.report


async def test_a_restore_that_failed_is_tried_again_by_the_journal_sweep_unasked(
    tmp_path: Path,
    start_controller: Any,
    monkeypatch: Any,
    lost_writes_settled: None,
) -> None:
    """A journal whose restore failed (its writes refused) is restored again `RETRY_SECONDS`
    later by the journal sweep, with no request of the node needed to set it off."""
    monkeypatch.setattr(write_cycle, "RETRY_SECONDS", 0.5)
    async with one_gb200(tmp_path, start_controller, sweep_interval=0.3) as (h, bmc):
        before = caps(bmc)
        await _leave_open_journal(h, "leftover", "verify leftover")
        cap_write(bmc.state.caps["GPU_0"], 1150, None).apply()  # the leftover test value
        bmc.faults.set("http500", writes_only=True)  # every restore write refused for now
        cycles = h.controller.runner.write_cycles
        checks = await cycles.restore_open("node001", WriteLog())
        assert any(c.status != "pass" for c in checks) and cycles.unsettled("node001"), checks
        assert caps(bmc) != before
        bmc.faults.set("none")
        for _ in range(100):
            if not await h.controller.store.open_write_cycles():
                break
            await asyncio.sleep(0.1)
        assert caps(bmc) == before and not cycles.unsettled("node001")
        assert await h.controller.store.open_write_cycles() == []


async def test_a_write_cycle_stopped_in_its_restore_of_a_leftover_never_says_nothing_was_written(
    tmp_path: Path, start_controller: Any
) -> None:
    """A shutdown that stops a write cycle while it restores an earlier cycle's leftover (before its
    own journal): the restore wrote the node, so the record says what its receipts show, never
    "nothing was written"."""
    async with one_gb200(tmp_path, start_controller) as (h, bmc):
        await _leave_open_journal(h, "leftover", "verify leftover")
        cap_write(bmc.state.caps["GPU_0"], 1150, None).apply()  # the leftover test value
        # the leftover's restore lands and is answered late
        bmc.faults.set("late-reply", writes_only=True, count=1, hang_seconds=3)
        started = await h.admin.StartWriteCycle(apb.StartVerifyRequest(devices=["node001"], **FAST))
        check_id = started.checks[0].check_id
        await until(lambda: bmc.stats.faults_injected["late-reply"] >= 1, "the leftover's restore write")
        await h.controller.checker.stop()  # a shutdown: the cycle ends after that restore
        row = await h.controller.store.bmc_check(check_id)
        assert row is not None and row.status == "interrupted", row
        assert "nothing was written" not in row.error and "GPU 0 written" in row.error, row.error


async def test_a_rerun_restores_an_unfinished_cycle_first_and_never_takes_its_test_value_as_before(
    tmp_path: Path, start_controller: Any
) -> None:
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        inventory = tmp_path / "inventory.toml"
        secrets = fleet.write_inventory(inventory, tmp_path / "secrets")
        h = await start_controller(load_inventory(inventory), secrets_dir=str(secrets))
        bmc = fleet.bmcs[0]
        before = caps(bmc)
        # a cycle that died after its test write (its journal open, the value one step below)
        await _leave_open_journal(h, "leftover", "verify leftover")
        name = "GPU_0"
        cap_write(bmc.state.caps[name], 1150, None).apply()  # the test value, as a write leaves it
        assert caps(bmc) != before
        started = await h.admin.StartWriteCycle(apb.StartVerifyRequest(devices=["node001"], **FAST))
        result = await _done(h, started.checks[0].check_id)
        names = {c["name"]: c for c in result["checks"]}
        restores = [c for n, c in names.items() if n.startswith("restore ")]
        assert restores and all(c["status"] == "pass" for c in restores), restores
        assert all("unfinished write cycle (verify leftover)" in c["detail"] for c in restores)
        assert caps(bmc) == before, name  # restored to the journal's value, not the leftover
        # the rerun's own journal is closed; the dead cycle's stays open: a test write it sent
        # may still land, so its caps are read again once the wait is over
        (left,) = await h.controller.store.open_write_cycles()
        assert left.cycle_id == "leftover" and sorted(left.report["lost_writes"]) == sorted(left.priors)


async def _leave_open_journal(h: Any, cycle_id: str, origin: str, clock: timedelta = timedelta()) -> None:
    """An open journal another controller left for node001, holding the values a read-only verify
    reads now as the priors to restore; `clock`: how far that controller's host clock was off."""
    read = await h.admin.StartVerify(apb.StartVerifyRequest(devices=["node001"], **FAST))
    plain = await _done(h, read.checks[0].check_id)
    priors = plan_of(HealthResult(tuple(HealthCheck.from_json(c) for c in plain["checks"])))
    assert priors
    await h.controller.store.open_write_cycle(
        WriteCycleRow(
            cycle_id=cycle_id,
            device="node001",
            origin=origin,
            priors=priors,
            status="open",
            report=None,
            owner="elsewhere",
            created_at=datetime.now(UTC) + clock,
            closed_at=None,
        )
    )


async def _done(h: Any, check_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 90
    while True:
        got = (await h.admin.GetBmcCheck(apb.GetBmcCheckRequest(id=check_id))).checks[0]
        if got.status not in ("queued", "running"):
            assert got.status == "done", got
            found: dict[str, Any] = json.loads(got.result_json)
            return found
        assert time.monotonic() < deadline, got
        await asyncio.sleep(0.1)


async def test_read_only_verify_flags_an_explicit_cap_devicectl_did_not_set(
    tmp_path: Path, start_controller: Any, sink: Any
) -> None:
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        inventory = tmp_path / "inventory.toml"
        secrets = fleet.write_inventory(inventory, tmp_path / "secrets")
        h = await start_controller(load_inventory(inventory), secrets_dir=str(secrets))
        bmc = fleet.bmcs[0]

        async def gpu1() -> dict[str, Any]:
            started = await h.admin.StartVerify(apb.StartVerifyRequest(devices=["node001"], **FAST))
            found = await _done(h, started.checks[0].check_id)
            return next(c for c in found["checks"] if c["name"] == "cap gpu/1")

        cap_write(bmc.state.caps["GPU_1"], 1150, None).apply()  # e.g. a leftover test value
        left = await gpu1()
        assert left["status"] == "warn" and "1150 W that devicectl did not set" in left["detail"], left

        policies = pp.GPUPolicies(policies=[pp.GPUPolicy(gpu_id=1, power_limit=pp.PowerLimit(watts=700))])
        await h.stub.SendDeviceRequest(
            R(
                device="node001",
                request_id="set-700",
                gpu_policies_update=R.GPUPoliciesSetRequest(
                    resource_group="rg", gpu_policy_action=R.SET_POLICY, gpu_policies=policies
                ),
            )
        )
        await sink.wait_for({"set-700"}, timeout=60)
        ours = await gpu1()
        assert ours["status"] == "pass" and "set by devicectl (request set-700)" in ours["detail"], ours

        cap_write(bmc.state.caps["GPU_1"], 650, None).apply()  # changed behind devicectl's back
        moved = await gpu1()
        assert moved["status"] == "warn", moved
        assert "650 W differs from what devicectl last set (700 W, request set-700)" in moved["detail"]


async def test_a_leftover_journal_never_undoes_a_cap_devicectl_set_since(
    tmp_path: Path,
    start_controller: Any,
    sink: Any,
    lost_writes_settled: None,
) -> None:
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        inventory = tmp_path / "inventory.toml"
        secrets = fleet.write_inventory(inventory, tmp_path / "secrets")
        h = await start_controller(load_inventory(inventory), secrets_dir=str(secrets))
        bmc = fleet.bmcs[0]
        before = caps(bmc)
        await _leave_open_journal(h, "older", "verify older")
        cap_write(bmc.state.caps["GPU_0"], 1150, None).apply()  # its leftover test value, as written
        policies = pp.GPUPolicies(policies=[pp.GPUPolicy(gpu_id=1, power_limit=pp.PowerLimit(watts=700))])
        await h.stub.SendDeviceRequest(
            R(
                device="node001",
                request_id="later-700",
                gpu_policies_update=R.GPUPoliciesSetRequest(
                    resource_group="rg", gpu_policy_action=R.SET_POLICY, gpu_policies=policies
                ),
            )
        )
        await sink.wait_for({"later-700"}, timeout=60)
        started = await h.admin.StartWriteCycle(apb.StartVerifyRequest(devices=["node001"], **FAST))
        await _done(h, started.checks[0].check_id)
        assert bmc.state.caps["GPU_1"].set_point == 700  # the newer cap stays
        after = caps(bmc)
        assert after["GPU_0"] == before["GPU_0"]  # the leftover is gone
        cycles = await h.controller.store.write_cycles_of("verify older")
        assert cycles[0].status == "closed" and cycles[0].report["superseded"] == {"gpu/1": "later-700"}


async def test_a_leftover_journal_from_a_host_whose_clock_ran_ahead_never_undoes_a_later_cap(
    tmp_path: Path,
    start_controller: Any,
    sink: Any,
    lost_writes_settled: None,
) -> None:
    """The journal's host clock an hour ahead: the request set after the journal opened still wins
    (compared by `set_at` against `created_at`, it looked older and was undone)."""
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        inventory = tmp_path / "inventory.toml"
        secrets = fleet.write_inventory(inventory, tmp_path / "secrets")
        h = await start_controller(load_inventory(inventory), secrets_dir=str(secrets))
        bmc = fleet.bmcs[0]
        await _leave_open_journal(h, "ahead", "verify ahead", clock=timedelta(hours=1))
        await h.stub.SendDeviceRequest(_set_gpu1(700, "later-700"))
        await sink.wait_for({"later-700"}, timeout=60)
        started = await h.admin.StartWriteCycle(apb.StartVerifyRequest(devices=["node001"], **FAST))
        await _done(h, started.checks[0].check_id)
        assert bmc.state.caps["GPU_1"].set_point == 700  # the newer cap stays
        cycles = await h.controller.store.write_cycles_of("verify ahead")
        assert cycles[0].status == "closed" and cycles[0].report["superseded"] == {"gpu/1": "later-700"}
        assert cycles[0].desired_at_open == {}  # nothing had set a limit when it opened


async def test_a_leftover_journal_from_a_host_whose_clock_ran_behind_restores_its_test_cap(
    tmp_path: Path,
    start_controller: Any,
    sink: Any,
    lost_writes_settled: None,
) -> None:
    """The journal's host clock an hour behind, and GPU 1's desired limit set before the journal
    opened: its test value is restored (compared by `set_at` against `created_at`, the earlier
    request looked newer, the cap was taken as superseded and the test value stayed)."""
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        inventory = tmp_path / "inventory.toml"
        secrets = fleet.write_inventory(inventory, tmp_path / "secrets")
        h = await start_controller(load_inventory(inventory), secrets_dir=str(secrets))
        bmc = fleet.bmcs[0]
        await h.stub.SendDeviceRequest(_set_gpu1(700, "earlier-700"))
        await sink.wait_for({"earlier-700"}, timeout=60)
        await _leave_open_journal(h, "behind", "verify behind", clock=-timedelta(hours=1))
        cap_write(bmc.state.caps["GPU_1"], 1150, None).apply()  # its leftover test value, as written
        started = await h.admin.StartWriteCycle(apb.StartVerifyRequest(devices=["node001"], **FAST))
        await _done(h, started.checks[0].check_id)
        assert bmc.state.caps["GPU_1"].set_point == 700  # the test value is gone
        cycles = await h.controller.store.write_cycles_of("verify behind")
        assert cycles[0].desired_at_open == {"gpu/1": "earlier-700"}
        assert cycles[0].status == "closed" and cycles[0].report["superseded"] == {}, cycles[0].report


def _set_gpu1(watts: int, request_id: str) -> Any:
    policies = pp.GPUPolicies(policies=[pp.GPUPolicy(gpu_id=1, power_limit=pp.PowerLimit(watts=watts))])
    return R(
        device="node001",
        request_id=request_id,
        gpu_policies_update=R.GPUPoliciesSetRequest(
            resource_group="rg", gpu_policy_action=R.SET_POLICY, gpu_policies=policies
        ),
    )


async def test_a_journal_whose_close_failed_is_restored_and_closed_before_the_nodes_next_request(
    tmp_path: Path, start_controller: Any, sink: Any, monkeypatch: Any
) -> None:
    """The cycle put every cap back, but its journal's close failed (a database fault): whether it
    closed is unknown. The node's next request restores the journal (its values are those in force)
    and closes it before it runs, rather than the journal waiting open for the next start, which would
    write its values over whatever the node's requests set meanwhile."""
    async with one_gb200(tmp_path, start_controller) as (h, bmc):
        store = h.controller.store
        before = caps(bmc)
        original = type(store).close_write_cycle
        failed: list[str] = []

        async def fails_once(self: Any, cycle_id: str, *args: Any, **kwargs: Any) -> bool:
            if not failed:
                failed.append(cycle_id)
                raise OSError("disk I/O error")
            return bool(await original(self, cycle_id, *args, **kwargs))

        monkeypatch.setattr(type(store), "close_write_cycle", fails_once)
        batch = await h.admin.StartWriteCycle(apb.StartVerifyRequest(devices=["node001"], **FAST), timeout=30)
        got = await finished(h.controller.port, str(batch.checks[0].check_id))
        assert got.status == "done", got
        assert failed and caps(bmc) == before  # every cap back; only the close failed
        assert [r.cycle_id for r in await store.open_write_cycles(["node001"])] == failed

        ping = pb.DeviceControllerRequest.PingRequest()
        await h.stub.SendDeviceRequest(
            pb.DeviceControllerRequest(device="node001", request_id="after-the-cycle", ping=ping)
        )
        await sink.wait_for({"after-the-cycle"}, timeout=30)
        assert await store.open_write_cycles(["node001"]) == []  # restored and closed before the ping ran
        assert caps(bmc) == before
