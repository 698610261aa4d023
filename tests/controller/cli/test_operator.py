"""What an operator sees at a terminal and a script reads from a pipe: a dry run that cannot be
taken for an applied change, `--gpu N=none` that removes a cap, tables that fit, JSON for scripts,
and exit codes. Each command runs as its own process, in an 80-column pseudo-terminal and in a pipe,
against a controller on a real port driving simulated GB200 BMCs over HTTPS."""

from __future__ import annotations

import asyncio
import json
import re
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench.ports import free_port as _closed_port  # nothing listens there
from bmcsim import SimulatedBmc, SimulatorFleet
from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller.delivery.sink import TopologySink
from controller.inventory import DeviceEntry, load_inventory
from tests.controller.conftest import MEMORY, memory_inventory
from tests.controller.observability.test_metrics import gpu_caps
from tests.controller.terminal import Run, both, fits, pipe, tty, tty_interrupted


@dataclass
class Site:
    server: str
    bmc: SimulatedBmc
    harness: Any
    sink: TopologySink

    def cli(self, *args: str) -> tuple[str, ...]:
        return ("--server", self.server, *args)


@pytest.fixture
async def site(tmp_path: Path, sink: TopologySink, start_controller: Any) -> AsyncIterator[Site]:
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        secrets = fleet.write_inventory(tmp_path / "inventory.toml", tmp_path / "secrets")
        h = await start_controller(load_inventory(tmp_path / "inventory.toml"), secrets_dir=str(secrets))
        yield Site(f"127.0.0.1:{h.controller.port}", fleet.bmcs[0], h, sink)
        await h.controller.stop()  # before the fleet goes: it logs out of the BMC


def gpu_set_point(bmc: SimulatedBmc, gpu: int) -> float | None:
    return bmc.state.set_points().get(f"GPU_{gpu}")


# ---- dry run ---------------------------------------------------------------------------------------


async def test_a_dry_run_prints_only_the_plan_under_a_nothing_written_heading(site: Site) -> None:
    before = site.bmc.state.set_points()
    terminal, piped = await both(
        *site.cli("send", "gpu-policies", "--device", "node001", "--gpu", "0=450", "--dry-run")
    )
    for run in (terminal, piped):
        assert run.code == 0, run.out + run.err
        assert run.lines[0].startswith("DRY RUN: nothing was written."), run.out
        assert "would make 1 write" in run.lines[0]
        # the plan, and nothing that reads like a result: no "ok", no result/power table
        assert "planned" not in run.out or "send" in run.out
        assert ": ok" not in run.out and "RESULT" not in run.out and " ok " not in run.out, run.out
        assert "SetPoint" in run.out and "450" in run.out
    fits(terminal)
    assert site.bmc.stats.writes_applied == 0 and site.bmc.state.set_points() == before

    run = await asyncio.to_thread(
        pipe,
        *site.cli("send", "gpu-policies", "--device", "node001", "--gpu", "0=450", "--dry-run", "-o", "json"),
    )
    plan = json.loads(run.out)
    assert (plan["dry_run"], plan["outcome"], plan["written"]) == (True, "planned", 0)
    assert "ok" not in plan and "response" not in plan
    assert [w["status"] for w in plan["writes"]] == ["planned"]


async def test_a_dry_run_that_would_fail_says_so(site: Site) -> None:
    run = await asyncio.to_thread(
        pipe,
        *site.cli(
            "send", "gpu-policies", "--device", "node001", "--gpu", "0=5000", "--dry-run", "-o", "json"
        ),
    )
    assert run.code == 1
    plan = json.loads(run.out)
    assert plan["outcome"] == "would_fail" and "above the maximum" in plan["error"]
    assert "applied 0 W" not in run.out and "not applied" in plan["error"]
    run = await asyncio.to_thread(
        pipe, *site.cli("send", "gpu-policies", "--device", "node001", "--gpu", "0=5000", "--dry-run")
    )
    assert run.code == 1 and run.out.startswith("DRY RUN: nothing was written.")
    assert "the request would fail: GPU 0: 5000 W is above the maximum" in run.err


# ---- --gpu N=none ----------------------------------------------------------------------------------


async def test_gpu_none_removes_the_cap_with_receipts(site: Site) -> None:
    original = gpu_set_point(site.bmc, 0)
    cap = site.bmc.state.caps["GPU_1"]
    cap.set_point, cap.oob_active = 600, True  # an out-of-band cap devicectl never recorded
    run = await asyncio.to_thread(
        pipe, *site.cli("send", "gpu-policies", "--device", "node001", "--gpu", "0=450", "--wait")
    )
    assert run.code == 0 and gpu_set_point(site.bmc, 0) == 450, run.out + run.err
    writes = site.bmc.stats.writes_applied
    terminal, piped = await both(
        *site.cli(
            "send", "gpu-policies", "--device", "node001", "--gpu", "0=none", "--gpu", "1=none",
            "--request-id", "none-1", "--wait",
        )
    )  # fmt: skip
    assert terminal.code == 0, terminal.out
    fits(terminal)
    # before: `gpu_policies_update: {}`, ok, no write, and the GPU kept its cap
    assert gpu_set_point(site.bmc, 0) == original
    assert site.bmc.state.caps["GPU_1"].set_point != 600, terminal.out
    assert site.bmc.stats.writes_applied == writes + 2
    for gpu in ("GPU 0", "GPU 1"):
        assert any(line.startswith(gpu) and " ok " in line for line in terminal.lines), terminal.out
    assert "cap removed" in terminal.out
    shown = await asyncio.to_thread(pipe, *site.cli("requests", "show", "none-1"))
    receipts = [
        line
        for line in shown.lines
        if line.startswith(("GPU 0 ", "GPU 1 ")) and ("PATCH" in line or "POST" in line)
    ]
    assert len(receipts) == 2, shown.out
    # second time: nothing left to remove, and it says so instead of a bare ok
    piped = await asyncio.to_thread(
        pipe,
        *site.cli("send", "gpu-policies", "--device", "node001", "--gpu", "1=none", "--wait", "-o", "json"),
    )
    result = json.loads(piped.out)["response"]["gpu_policies_update"]["results"]
    assert result[0]["ok"] and "no cap to remove" in result[0]["diag_msg"], piped.out
    assert site.bmc.stats.writes_applied == writes + 2


# ---- tables, JSON and exit codes (the in-memory plugin: fast) --------------------------------------


@pytest.fixture
async def memory(start_controller: Any) -> AsyncIterator[Any]:
    h = await start_controller(
        {
            **memory_inventory(1),
            "node-with-a-long-name-0001": DeviceEntry(
                "node-with-a-long-name-0001", MEMORY, {"fail": "rejected"}
            ),
            "slow": DeviceEntry("slow", MEMORY, {"Model": "DGX_GB200", "delay": 60}),
        }
    )
    yield h


async def test_tables_fit_80_columns_and_pipes_get_plain_columns(memory: Any) -> None:
    server = f"127.0.0.1:{memory.controller.port}"
    for rid, device in (("t-ok", "node000"), ("t-failed", "node-with-a-long-name-0001")):
        await memory.stub.SendDeviceRequest(gpu_caps(device, rid, {0: 480, 1: 470}))
    await wait_finished(memory, {"t-ok", "t-failed"})
    for args in (("requests", "list"), ("requests", "show", "t-failed"), ("devices", "list"), ("status",)):
        terminal, piped = await both("--server", server, *args)
        assert terminal.code == piped.code == 0, terminal.out + piped.err
        fits(terminal)  # cut at 80 columns, never wrapped, no box drawing
        assert not re.search("[\u2500-\u257f]", piped.out), piped.out  # nothing box-drawn into a pipe
    terminal, piped = await both("--server", server, "requests", "list")
    header = piped.lines[1].split()
    assert header[:4] == ["request_id", "device", "kind", "outcome"], piped.out
    row = next(line for line in piped.lines if line.startswith("t-failed"))
    assert "node-with-a-long-name-0001" in row and row.split()[3] == "failed"  # a row is one line
    assert any(line.endswith("…") for line in terminal.lines)  # the error is cut at the terminal's width
    wide = await asyncio.to_thread(tty, "--server", server, "requests", "list", "-o", "wide")
    assert "finished" in wide.lines[1] and "status" in wide.lines[1]
    assert not any(line.endswith("…") for line in wide.lines)  # -o wide cuts nothing


async def test_outcome_filter(memory: Any, db_url: str) -> None:
    """On SQLite and PostgreSQL (`db_url`): the filter is the journal's query."""
    server = f"127.0.0.1:{memory.controller.port}"
    await memory.stub.SendDeviceRequest(gpu_caps("node000", "f-ok", {0: 480}))
    await memory.stub.SendDeviceRequest(gpu_caps("node-with-a-long-name-0001", "f-bad", {0: 480}))
    await wait_finished(memory, {"f-ok", "f-bad"})
    for status, expected in (("failed", ["f-bad"]), ("ok", ["f-ok"]), ("completed", ["f-bad", "f-ok"])):
        run = await asyncio.to_thread(
            pipe, "--server", server, "requests", "list", "--status", status, "-o", "json"
        )
        assert run.code == 0, run.err  # `--status failed` used to be refused
        assert [r["request_id"] for r in json.loads(run.out)] == expected


async def test_status_json_has_numbers_zeros_and_lower_case_enums(memory: Any) -> None:
    server = f"127.0.0.1:{memory.controller.port}"
    run = await asyncio.to_thread(pipe, "--server", server, "status", "-o", "json")
    status = json.loads(run.out)
    assert run.code == 0 and status["healthy"] is True
    for key in ("undelivered", "dead_letters", "delivered"):
        assert status[key] == 0 and isinstance(status[key], int), status  # present, and a number
    await memory.stub.SendDeviceRequest(gpu_caps("node000", "e-1", {0: 480}))
    await wait_finished(memory, {"e-1"})
    run = await asyncio.to_thread(pipe, "--server", server, "requests", "show", "e-1", "-o", "json")
    record = json.loads(run.out)
    assert record["status"] == "completed" and record["delivery_attempts"] == 0  # not "COMPLETED"
    assert record["error"] == "" and isinstance(record["attempts"], int)


async def test_status_exits_1_while_the_callback_is_down(start_controller: Any) -> None:
    h = await start_controller(memory_inventory(1), callback=f"127.0.0.1:{_closed_port()}")
    server = f"127.0.0.1:{h.controller.port}"
    await h.stub.SendDeviceRequest(gpu_caps("node000", "down-1", {0: 480}))

    async def down() -> Run:
        while True:
            run = await asyncio.to_thread(pipe, "--server", server, "status", "-o", "json")
            if not json.loads(run.out)["callback_ok"]:
                return run
            await asyncio.sleep(0.2)

    run = await asyncio.wait_for(down(), 30)
    assert run.code == 1 and json.loads(run.out)["healthy"] is False  # it used to exit 0
    terminal, piped = await both("--server", server, "status")
    assert terminal.code == piped.code == 1 and "DOWN since" in piped.out


async def test_ctrl_c_while_waiting_names_the_request(memory: Any) -> None:
    server = f"127.0.0.1:{memory.controller.port}"
    run = await asyncio.to_thread(
        tty_interrupted,
        "--server", server, "send", "ping", "--device", "slow", "--request-id", "int-1", "--wait",
        after="waiting for int-1",
    )  # fmt: skip
    assert run.code == 130
    assert "interrupted: request int-1 was accepted and runs on" in run.out  # it used to say nothing
    assert "devicectl requests show int-1" in run.out
    record = await memory.admin.GetRequest(apb.GetRequestRequest(request_id="int-1"))
    assert record.request_id == "int-1"  # journaled: it goes on without the client


async def test_ctrl_c_reaches_the_command_even_where_the_suite_ignores_it(memory: Any) -> None:
    """The cause of a flaky run of the test above: started from a background job (CI's runner may
    start the suite so), the suite and every child inherit SIGINT ignored, so the "Ctrl-C" was
    ignored and the command waited the request out (exit 1). The terminal harness starts the
    command as a terminal does, whatever the suite inherited."""
    server = f"127.0.0.1:{memory.controller.port}"
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # what a background job inherits
    try:
        run = await asyncio.to_thread(
            tty_interrupted,
            "--server", server, "send", "ping", "--device", "slow", "--request-id", "int-2", "--wait",
            after="waiting for int-2",
        )  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, previous)
    assert run.code == 130, run.out
    assert "interrupted: request int-2 was accepted and runs on" in run.out


async def test_send_to_an_unknown_device_is_refused(memory: Any) -> None:
    server = f"127.0.0.1:{memory.controller.port}"
    terminal, piped = await both(
        "--server", server, "send", "ping", "--device", "nosuch", "--request-id", "u-1"
    )
    for run in (terminal, piped):
        assert run.code == 2, run.out  # it used to say "accepted" and exit 0
        assert "unknown device 'nosuch'" in run.out + run.err and "accepted" not in run.out
    listed = await memory.admin.ListRequests(apb.ListRequestsRequest())
    assert "u-1" not in [r.request_id for r in listed.requests]  # nothing was sent
    run = await asyncio.to_thread(pipe, "--server", server, "send", "ping", "--device", "node000")
    assert run.code == 0 and run.out.startswith("accepted request_id=")


async def wait_finished(h: Any, ids: set[str]) -> None:
    async def finished() -> None:
        while True:
            listed = await h.admin.ListRequests(apb.ListRequestsRequest(status=apb.COMPLETED))
            if ids <= {r.request_id for r in listed.requests}:
                return
            await asyncio.sleep(0.1)

    await asyncio.wait_for(finished(), 30)
