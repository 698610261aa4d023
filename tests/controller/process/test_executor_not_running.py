"""An executor whose process ended (SIGKILL) is reported as not running, never as "topology
callback DOWN": the front end's reports of its executors (`controller/process/reports.py`), combined
as `devicectl status` gets them (`GetStatus`) and printed by its renderer; and the same with real
processes (`devicectl serve --workers 3` on PostgreSQL, `devicectl status`)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from bench.loadgen import device_ids
from bench.processes import write_noop_inventory
from bench.scaleout_ingest import ProcessTree
from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller.api.admin import combine_executors
from controller.cli import _render
from controller.cli._options import Options
from controller.cli._status import status_show
from controller.delivery.sink import TopologySink
from controller.process.reports import Reports
from tests.controller.process.test_workers import executors_of, until
from tests.controller.process.test_workers_status import until_async
from tests.controller.terminal import Run, pipe


async def reported(reports: Reports, index: int, name: str, **line: object) -> None:
    """Executor `index` writes one report line on its pipe, as `report_forever` does."""
    fd = reports.pipe(index, name)
    os.write(fd, (json.dumps({"instance_id": name, **line}) + "\n").encode())
    os.close(fd)
    async with asyncio.timeout(10):
        while True:  # the front end's reader task takes the line in
            if any(r.instance_id == name and r.age < 5 for r in reports.current()):
                return
            await asyncio.sleep(0.01)


async def test_a_killed_executor_is_not_running_not_callback_down(capsys: object) -> None:
    reports = Reports()
    try:
        for i in (1, 2, 3):
            await reported(reports, i, f"wk-w{i}", callback_ok=True, delivered=4)
        assert reports.all_up()
        reports.ended(2, "signal SIGKILL")  # what ExecutorPool records when the process ends

        status = apb.ControllerStatus(journal_ok=True, callback_ok=True)
        combine_executors(status, reports.current())
        assert status.callback_ok and status.callback_error == ""
        assert reports.all_up()  # devicectl_delivery_receiver_up stays 1: the callback is not down
        (dead,) = [p for p in status.processes if p.not_running]
        assert dead.instance_id == "wk-w2" and "SIGKILL" in dead.not_running

        _render.set_output("table", wide=True, no_headers=False)
        code = status_show(Options(json=False, output="table"), status)
        out = " ".join(capsys.readouterr().out.split())  # type: ignore[attr-defined]
        assert code == 1  # an executor is not running: not healthy
        assert "DOWN" not in out, out
        assert "ok (all 2 running executors; 1 executor(s) not running)" in out, out
        assert "NOT RUNNING: ended with signal SIGKILL; starting it again" in out, out

        # the executor started again reports: it runs, and the callback is still up
        await reported(reports, 2, "wk-w2", callback_ok=True)
        status = apb.ControllerStatus(journal_ok=True, callback_ok=True)
        combine_executors(status, reports.current())
        assert status.callback_ok and not any(p.not_running for p in status.processes)
    finally:
        await reports.close()


@pytest.mark.postgres
@pytest.mark.timeout(300)
async def test_a_sigkilled_executor_process_reads_as_not_running_in_devicectl_status(
    pg_database: URL, tmp_path: Path
) -> None:
    """The same with real processes: `devicectl serve --workers 3` on PostgreSQL, one executor
    SIGKILLed, `devicectl status` as its own process. The front end starts the executor again at
    once; its new process is held (SIGSTOP) before its first report, so the moment between the kill
    and the new process's first report (when `status` must say "not running") lasts while it is
    read, without a race, and then released to show the executor running again."""
    sink = TopologySink("127.0.0.1:0")
    await sink.start()
    inventory = tmp_path / "inventory.toml"
    write_noop_inventory(inventory, device_ids("wk", 6), delay=0)
    config = tmp_path / "devicectl.toml"
    config.write_text("[devicectl]\nlease_ttl = 2.0\nsweep_interval = 0.5\nshutdown_grace = 5.0\n")
    front = ProcessTree(
        tmp_path,
        database_url=pg_database.render_as_string(hide_password=False),
        callback=sink.address,
        inventory=inventory,
        instance_id="wk",
        name="workers",
        extra_args=("--workers", "3", "--config", str(config)),
    )
    await front.start()
    held: int | None = None

    async def status(*args: str) -> Run:
        return await asyncio.to_thread(pipe, "--server", front.address, "status", *args)

    try:
        await until(lambda: len(executors_of(front.pid)) == 3, 120, "three executors")
        seen: list[Run] = []

        async def all_up() -> bool:
            seen.append(await status())
            return seen[-1].code == 0 and "ok (all 3 executors)" in " ".join(seen[-1].out.split())

        await until_async(all_up, 120, "the three executors' first reports")

        killed = executors_of(front.pid)["wk-w2"]
        os.kill(killed, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while held is None:  # hold the new process before it can report (it takes seconds to start)
            assert time.monotonic() < deadline, "the front end did not start the executor again"
            new = executors_of(front.pid).get("wk-w2")
            if new is not None and new != killed:
                os.kill(new, signal.SIGSTOP)
                held = new
            await asyncio.sleep(0.02)

        shown = await status("-o", "json")
        data = json.loads(shown.out)
        assert shown.code == 1, shown.out + shown.err  # an executor is not running: not healthy
        assert data["callback_ok"] and not data.get("callback_error"), data
        (dead,) = [p for p in data["processes"] if p.get("not_running")]
        assert dead["instance_id"] == "wk-w2" and "SIGKILL" in dead["not_running"], dead
        text = await status()
        out = " ".join(text.out.split())
        assert text.code == 1 and "DOWN" not in out, out
        assert "ok (all 2 running executors; 1 executor(s) not running)" in out, out
        assert "NOT RUNNING: ended with signal SIGKILL; starting it again" in out, out

        os.kill(held, signal.SIGCONT)  # released: it reports, and runs
        held = None
        await until_async(all_up, 120, "the executor started again to report")
    finally:
        if held is not None:
            os.kill(held, signal.SIGCONT)
        await front.stop()
        await sink.stop()
    assert "Traceback" not in front.log_path.read_text()
