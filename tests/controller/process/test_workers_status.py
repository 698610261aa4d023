"""`devicectl status` and `devicectl_delivery_receiver_up` against a `serve --workers 2` front end
tell what its executors (which deliver) see: with the topology sink killed and responses waiting,
status exits 1 naming the executors whose callback is down, and the front end's metric is 0.
Real processes on a real PostgreSQL database."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from bench.responses import ResponseTracker
from controller.delivery.sink import TopologySink
from tests.controller.process.test_workers import Fleet
from tests.controller.terminal import Run, pipe


@pytest.fixture
async def tracker() -> AsyncIterator[ResponseTracker]:
    t = ResponseTracker()  # the fleet wants one; the responses go to this test's own sink
    await t.start()
    try:
        yield t
    finally:
        await t.stop()


def gauge(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        lines = reply.read().decode().splitlines()
    return float(next(line.rsplit(" ", 1)[1] for line in lines if line.startswith(name + " ")))


@pytest.mark.postgres
@pytest.mark.timeout(300)
async def test_status_combines_the_executors_view_of_the_callback(
    pg_database: URL, tmp_path: Path, tracker: ResponseTracker
) -> None:
    sink = TopologySink("127.0.0.1:0")
    await sink.start()
    url = pg_database.render_as_string(hide_password=False)
    fleet = Fleet(tmp_path, url, tracker, sink.address, 0)
    await fleet.start()
    server = fleet.front.address

    async def status() -> Run:
        return await asyncio.to_thread(pipe, "--server", server, "status")

    try:
        up: list[Run] = []

        async def reported_up() -> bool:
            up.append(await status())
            return up[-1].code == 0

        await until_async(reported_up, 60, "the executors' first reports")
        assert "ok (all 2 executors)" in up[-1].out, up[-1].out
        assert gauge(fleet.metrics, "devicectl_delivery_receiver_up") == 1

        await sink.stop()  # the topology callback dies
        await fleet.send("down", 5)
        seen: list[Run] = []

        async def reported_down() -> bool:
            seen.append(await asyncio.to_thread(pipe, "--server", server, "status", "-o", "json"))
            data = json.loads(seen[-1].out)
            return data["undelivered"] == 5 and not data["callback_ok"] and seen[-1].code == 1

        await until_async(reported_down, 120, "status to see the callback down")
        data = json.loads(seen[-1].out)
        assert not data["healthy"] and len(data["processes"]) == 2
        down = [p["instance_id"] for p in data["processes"] if not p["callback_ok"]]
        assert down and set(down) <= {"wk-w1", "wk-w2"}
        assert all(f"{name}:" in data["callback_error"] for name in down)
        text = await status()
        assert text.code == 1, text.out + text.err  # it said "topology callback ok", exit 0
        assert "topology callback ok" not in " ".join(text.out.split())
        for name in down:
            assert any(line.split()[:3] == ["callback", "at", name] and "DOWN" in line for line in text.lines)
        assert gauge(fleet.metrics, "devicectl_delivery_receiver_up") == 0  # it was 1
        # every process's lines say which process wrote them (they share the front end's output)
        log = fleet.front.log_path.read_text()
        for name in ("wk", "wk-w1", "wk-w2"):
            assert f" instance={name} " in log, name
    finally:
        await fleet.front.stop()
        await sink.stop()


async def until_async(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.5)
