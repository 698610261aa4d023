"""What the executors of `serve --workers N` tell their front end: each writes its delivery state
(callback up or down, why, since when, how many it delivered) as a JSON line, every second, to a
pipe the front end gave it; the front end keeps the last line per executor. `devicectl status`
and the front end's `devicectl_delivery_receiver_up` then say what the processes that deliver
see, not what the front end (which delivers nothing) does. An executor silent for STALE_AFTER
seconds counts as down: its callback is unknown, never reported as up."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

#: set in an executor's environment: the pipe it writes its reports to
STATUS_FD = "DEVICECTL_STATUS_FD"
REPORT_INTERVAL = 1.0
STALE_AFTER = 5.0
_MAX_LINE = 64 * 1024


@dataclass
class Report:
    """One process's delivery state as its front end last heard it."""

    instance_id: str
    callback_ok: bool
    callback_error: str = ""
    #: unix time the callback went down (0: up)
    since: float = 0.0
    delivered: int = 0
    dead_lettered: int = 0
    #: seconds since the front end last heard from it
    age: float = 0.0
    #: why the executor's process is not running (it ended and is being started again); '' if it runs
    not_running: str = ""


def snapshot(instance_id: str, delivery: Any) -> dict[str, Any]:
    """The line an executor writes: its `Delivery`'s destination state and counters."""
    destination = delivery.destination
    return {
        "instance_id": instance_id,
        "callback_ok": not destination.failing,
        "callback_error": destination.reason if destination.failing else "",
        "since": float(destination.since or 0) if destination.failing else 0.0,
        "delivered": int(delivery.delivered),
        "dead_lettered": int(delivery.dead_lettered),
    }


async def report_forever(make: Callable[[], dict[str, Any]], fd: int | None = None) -> None:
    """In an executor: write `make()` to the front end's pipe every REPORT_INTERVAL seconds (a
    no-op without one). A full pipe (a front end not reading) drops a line, never blocks."""
    if fd is None:
        text = os.environ.get(STATUS_FD, "")
        if not text.isdigit():
            return
        fd = int(text)
    os.set_blocking(fd, False)
    try:
        while True:
            line = (json.dumps(make()) + "\n").encode()
            try:
                os.write(fd, line)
            except BlockingIOError:
                pass
            except OSError:  # the front end is gone: nothing to report to
                return
            await asyncio.sleep(REPORT_INTERVAL)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


class Reports:
    """The front end's side: one pipe per executor, the last report heard on each."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[dict[str, Any], float]] = {}
        self._names: dict[int, str] = {}
        self._readers: dict[int, asyncio.Task[None]] = {}
        #: executor index -> how it last ended, until the process started after it reports
        self._ended: dict[int, str] = {}

    def ended(self, index: int, how: str) -> None:
        """Executor `index`'s process ended (`how`: "signal SIGKILL"); it is being started again."""
        self._ended[index] = how

    def pipe(self, index: int, name: str) -> int:
        """A new pipe for executor `index` (called at each start): returns the end to hand it;
        the caller closes that end once the child has it."""
        read, write = os.pipe()
        os.set_inheritable(write, True)
        old = self._readers.pop(index, None)
        if old is not None:
            old.cancel()
        self._names[index] = name
        self._last.pop(index, None)  # a restarted executor has said nothing yet
        self._readers[index] = asyncio.create_task(self._read(index, read), name=f"reports w{index}")
        return write

    async def _read(self, index: int, fd: int) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=_MAX_LINE)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
        )
        try:
            while line := await reader.readline():
                try:
                    data = json.loads(line)
                except ValueError:
                    continue
                if isinstance(data, dict):
                    self._last[index] = (data, time.monotonic())
                    self._ended.pop(index, None)  # the new process runs and reports
        except (ValueError, asyncio.LimitOverrunError):  # an overlong line: stop listening to it
            log.warning("executor %s: unreadable status report", self._names.get(index, index))
        finally:
            transport.close()

    def current(self) -> list[Report]:
        """Each executor's last report; one not heard from for STALE_AFTER s (or never) is down."""
        now = time.monotonic()
        out = []
        for index, name in sorted(self._names.items()):
            data, at = self._last.get(index, ({}, None))
            age = now - at if at is not None else float("inf")
            report = Report(
                instance_id=str(data.get("instance_id") or name),
                callback_ok=bool(data.get("callback_ok")),
                callback_error=str(data.get("callback_error") or ""),
                since=float(data.get("since") or 0.0),
                delivered=int(data.get("delivered") or 0),
                dead_lettered=int(data.get("dead_lettered") or 0),
                age=age,
            )
            if index in self._ended:  # a dead process says nothing about the callback
                report.not_running = f"ended with {self._ended[index]}; starting it again"
                report.callback_ok = False
                report.callback_error = "callback state unknown: the executor is not running"
            elif age > STALE_AFTER:
                heard = "never reported" if at is None else f"no report for {age:.0f} s"
                report.callback_ok = False
                report.callback_error = f"callback state unknown: {heard}"
            out.append(report)
        return out

    def all_up(self) -> bool:
        """Every running executor reports its callback up (none: nothing says so); one whose
        process ended and is being started again is left out: it says nothing about the callback."""
        reports = [r for r in self.current() if not r.not_running]
        return bool(reports) and all(r.callback_ok for r in reports)

    async def close(self) -> None:
        for task in self._readers.values():
            task.cancel()
        await asyncio.gather(*self._readers.values(), return_exceptions=True)
        self._readers.clear()
