"""An executor whose process ended (SIGKILL) is reported as not running, never as "topology
callback DOWN": the front end's reports of its executors (`controller/process/reports.py`), combined
as `devicectl status` gets them (`GetStatus`) and printed by its renderer."""

from __future__ import annotations

import asyncio
import json
import os

from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller.api.admin import combine_executors
from controller.cli import _render
from controller.cli._options import Options
from controller.cli._status import status_show
from controller.process.reports import Reports


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
