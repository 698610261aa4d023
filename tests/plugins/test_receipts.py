"""The write log's receipts: one entry per write, its status, timing and read-back as the write's
choke point reports them, and a dry run refused before anything is sent."""

from __future__ import annotations

import asyncio
import threading

import pytest

from plugins.base import write_log
from plugins.base.receipts import DeviceWrite, WriteLog, WriteRefusedError, gather_writes, recording

TARGET = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_0/EnvironmentMetrics"


def test_a_write_gets_one_receipt_with_its_answer_status_and_read_back() -> None:
    log = WriteLog()
    body = {"PowerLimitWatts": {"SetPoint": 700}}
    with log.write(
        TARGET, "PATCH", body, component="GPU 0", before=1200.0, note="allowed 200..1200 W"
    ) as index:
        assert index == 0 and log.last == 0
    body["PowerLimitWatts"] = {}  # the receipt keeps what was sent
    log.set_status(index, "204")
    log.read_back(index, 700.0)
    log.read_back(index, 700.0, note="read back")
    (entry,) = log.entries()
    assert entry == DeviceWrite(
        TARGET,
        "PATCH",
        {"PowerLimitWatts": {"SetPoint": 700}},
        "GPU 0",
        1200.0,
        700.0,
        "204",
        entry.duration_ms,
        "read back",
    )
    assert entry.duration_ms >= 0.0 and not entry.planned
    assert log.entries() == (entry,)  # read again: the same
    log.set_status(index, "200")
    assert log.entries()[0].status == "200" and entry.status == "204"  # an entry read stays as read


def test_a_write_that_raised_is_an_error_where_answered_else_unknown() -> None:
    log = WriteLog()

    class Refused(Exception):
        status = 400

    with pytest.raises(Refused), log.write(TARGET, "PATCH", {}) as first:
        raise Refused
    with pytest.raises(TimeoutError), log.write(TARGET, "PATCH") as second:
        raise TimeoutError
    entries = log.entries()
    assert (first, second) == (0, 1)
    assert entries[0].status == "error: 400"
    assert entries[1].status.startswith("unknown: TimeoutError") and entries[1].body == {}


def test_a_dry_run_refuses_a_write_before_its_block_runs_and_plans_instead() -> None:
    log = WriteLog(dry_run=True)
    sent: list[str] = []
    with pytest.raises(WriteRefusedError), log.write(TARGET, "PATCH", {"x": 1}):
        sent.append("sent")
    assert sent == [] and log.entries() == ()
    index = log.plan(TARGET, "PATCH", {"x": 1}, component="GPU 0")
    assert log.entries()[index].planned


def test_updates_name_only_receipt_fields_and_an_unknown_index_changes_nothing() -> None:
    log = WriteLog()
    with log.write(TARGET, "PATCH") as index:
        pass
    with pytest.raises(TypeError, match="no field"):
        log._update(index, colour="red")
    log.read_back(None, 5.0)
    log.read_back(7, 5.0)
    assert log.entries()[0].after is None and log.entries()[0].status == "ok"


def test_writes_from_threads_each_get_their_receipt() -> None:
    log = WriteLog()

    def write(n: int) -> None:
        with log.write(f"{TARGET}/{n}", "PATCH") as index:
            pass
        log.read_back(index, float(n))

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    entries = log.entries()
    assert sorted(e.after for e in entries) == [float(n) for n in range(8)]
    assert all(e.target.endswith(f"/{int(e.after or 0)}") for e in entries)


def test_the_current_log_follows_the_operation() -> None:
    log = WriteLog()
    with recording(log):
        assert write_log() is log
    assert write_log() is not log


async def test_writes_gathered_stop_together_when_one_raises() -> None:
    # a write's unexpected error is raised only once the others have stopped: none goes on
    # writing after the operation ended; a second one's own error is not left for the loop to log
    ended: list[str] = []

    async def write(name: str, fails_after: float | None = None) -> str:
        try:
            await asyncio.sleep(fails_after if fails_after is not None else 3600)
            if fails_after is not None:
                raise RuntimeError(f"{name} failed")
            return name
        finally:
            ended.append(name)

    async def quick(name: str) -> str:
        return name

    assert await gather_writes(quick("a"), quick("b")) == ["a", "b"]
    with pytest.raises(RuntimeError, match="first failed"):
        await gather_writes(write("first", 0.01), write("slow"), write("second", 0.02))
    assert sorted(ended) == ["first", "second", "slow"], "a write went on after the error was raised"
