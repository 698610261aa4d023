"""Asynchronous writes through tasks, per-call latency and the per-BMC counters."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from redfish.aio import AsyncRedfishClient

from bmcsim import UNMATCHED, SimulatedBmc, SimulatorFleet

GPU0 = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_0/EnvironmentMetrics"
TEMPLATE = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/{id}/EnvironmentMetrics"

Api = Callable[[SimulatedBmc], Any]


async def test_async_write_goes_through_a_task(gb200: SimulatedBmc, api: Api) -> None:
    gb200.configure(async_writes=True, task_delay=0.3)
    client = api(gb200)
    accepted = await client.patch(GPU0, {"PowerLimitWatts": {"SetPoint": 600}})
    assert accepted.status == 202
    monitor = accepted.headers["Location"]
    assert monitor.startswith("/redfish/v1/TaskService/Tasks/")
    assert int(accepted.headers["Retry-After"]) >= 1
    assert accepted.body["TaskState"] == "Running"
    # nothing lands before the task completes
    assert gb200.state.caps["GPU_0"].set_point == 1200
    running = await client.get(monitor)
    assert running.status == 200 and running.body["TaskState"] == "Running"
    assert running.body["Payload"]["TargetUri"] == GPU0

    await asyncio.sleep(0.45)
    done = await client.get(monitor)
    assert done.body["TaskState"] == "Completed"
    assert done.body["PercentComplete"] == 100
    assert gb200.state.caps["GPU_0"].set_point == 600
    tasks = await client.get("/redfish/v1/TaskService/Tasks")
    assert tasks.body["Members"] == [{"@odata.id": monitor}]
    assert (await client.get("/redfish/v1/TaskService")).body["Tasks"]["@odata.id"].endswith("/Tasks")
    # validation still happens up front
    assert (await client.patch(GPU0, {"PowerLimitWatts": {"SetPoint": 5}})).status == 400
    assert gb200.stats.tasks_created == 1


async def test_async_write_via_dmtf_client(gb200: SimulatedBmc, http: aiohttp.ClientSession) -> None:
    gb200.configure(async_writes=True, task_delay=0.05)
    client = AsyncRedfishClient(gb200.url, gb200.username, gb200.password, session=http)
    await client.login()
    reply = await client.patch(GPU0, body={"PowerLimitWatts": {"SetPoint": 555}})
    assert reply.status == 202
    location = reply.getheader("Location")
    await asyncio.sleep(0.15)
    task = await client.get(location)
    assert task.dict["TaskState"] == "Completed"
    assert gb200.state.caps["GPU_0"].set_point == 555
    await client.logout()


async def test_counters_and_reset(gb200: SimulatedBmc, api: Api) -> None:
    client = api(gb200)
    await client.login()
    for _ in range(3):
        await client.get(GPU0)
    await client.patch(GPU0, {"PowerLimitWatts": {"SetPoint": 800}})
    await client.get("/redfish/v1/NoSuchThing")
    stats = gb200.stats
    assert stats.count("GET", TEMPLATE) == 3
    assert stats.calls[("PATCH", TEMPLATE)] == 1
    assert stats.count("POST", "/redfish/v1/SessionService/Sessions") == 1
    assert stats.count("GET", UNMATCHED) == 1
    assert stats.total_calls == 6
    assert stats.writes_applied == 1
    assert stats.responses[200] == 4 and stats.responses[404] == 1
    assert stats.open_sessions == 1
    assert stats.max_open_connections >= 1
    snapshot = stats.to_dict()
    assert snapshot["calls"][f"GET {TEMPLATE}"] == 3
    stats.reset()
    assert stats.total_calls == 0 and not stats.calls
    assert stats.open_sessions == 1  # a gauge, not a counter


async def test_latency_and_max_concurrency(gb200: SimulatedBmc, api: Api) -> None:
    gb200.latency = 0.1
    client = api(gb200)
    start = asyncio.get_running_loop().time()
    replies = await asyncio.gather(*(client.get(GPU0) for _ in range(5)))
    elapsed = asyncio.get_running_loop().time() - start
    assert all(r.status == 200 for r in replies)
    assert gb200.stats.max_in_flight == 5  # all five at once
    assert elapsed >= 0.1  # each waited out the latency
    assert gb200.stats.in_flight == 0

    gb200.stats.reset()
    for _ in range(3):
        await client.get(GPU0)
    assert gb200.stats.max_in_flight == 1


async def test_client_side_limit_is_visible(gb200: SimulatedBmc, ssl_ctx: Any) -> None:
    gb200.latency = 0.05
    connector = aiohttp.TCPConnector(ssl=ssl_ctx, limit_per_host=2)
    async with aiohttp.ClientSession(connector=connector) as http:
        client = AsyncRedfishClient(gb200.url, gb200.username, gb200.password, session=http)
        await client.login(auth="basic")
        await asyncio.gather(*(client.get(GPU0) for _ in range(8)))
    assert gb200.stats.max_in_flight == 2
    assert gb200.stats.max_open_connections <= 2


async def test_two_sessions_in_flight_at_once_are_recorded(gb200: SimulatedBmc, api: Api) -> None:
    """Two clients (each its own login, as two controller processes) overlapping on one BMC."""
    gb200.latency = 0.1
    first, second = api(gb200), api(gb200)
    await first.login()
    await second.login()
    replies = await asyncio.gather(first.get(GPU0), first.get(GPU0), second.get(GPU0))
    assert all(r.status == 200 for r in replies)
    snapshot = gb200.stats.to_dict()
    assert snapshot["max_sessions_in_flight"] == 2
    assert snapshot["session_overlaps"] >= 1
    assert snapshot["max_in_flight"] == 3


async def test_sessions_one_after_the_other_are_not_an_overlap(gb200: SimulatedBmc, api: Api) -> None:
    gb200.latency = 0.05
    first, second = api(gb200), api(gb200)
    await first.login()
    await second.login()
    await asyncio.gather(first.get(GPU0), first.get(GPU0))  # one session, two requests at once
    await second.get(GPU0)
    await first.get(GPU0)
    unauthenticated = api(gb200)  # Basic auth: no session, never counted as a client
    await asyncio.gather(unauthenticated.get(GPU0), second.get(GPU0))
    stats = gb200.stats
    assert stats.max_sessions_in_flight == 1
    assert stats.session_overlaps == 0
    assert stats.max_in_flight == 2
    # the fleet totals (what the control endpoint serves) keep the per-BMC figures
    stats.reset()
    assert stats.to_dict()["session_overlaps"] == 0 and stats.max_sessions_in_flight == 0


async def test_fleet_totals_sum_overlaps_and_keep_the_worst_bmc(cert_dir: Path, api: Api) -> None:
    async with SimulatorFleet(n=2, model="gb200", cert_dir=cert_dir, latency=0.1) as fleet:
        busy, quiet = fleet.bmcs
        one, two, alone = api(busy), api(busy), api(quiet)
        for client in (one, two, alone):
            await client.login()
        await asyncio.gather(one.get(GPU0), two.get(GPU0), alone.get(GPU0))
        stats = fleet.stats()
    assert stats["totals"]["max_sessions_in_flight"] == 2
    assert stats["totals"]["session_overlaps"] == 1
    assert [b["session_overlaps"] for b in stats["bmcs"]] == [1, 0]
