"""Fault injection: hang, reset, 500, 503, NVIDIA busy/timeout, invalid JSON, cap revert, fail-next-K."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from bmcsim import FaultMode, SimulatedBmc

GPU0 = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_0/EnvironmentMetrics"
GPU1 = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_1/EnvironmentMetrics"
SET_700 = {"PowerLimitWatts": {"SetPoint": 700}}

Api = Callable[[SimulatedBmc], Any]


async def _eventually(check: Callable[[], bool], within_s: float = 2.0) -> None:
    deadline = asyncio.get_running_loop().time() + within_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


async def test_hang_outlasts_the_client_and_frees_the_handler(gb200: SimulatedBmc, api: Api) -> None:
    gb200.faults.set("hang")
    with pytest.raises(asyncio.TimeoutError):
        await api(gb200).get(GPU0, deadline_s=0.3)
    assert gb200.stats.faults_injected["hang"] == 1
    # the client gave up and closed the connection: the hung handler must not linger
    await _eventually(lambda: gb200.stats.in_flight == 0)
    gb200.faults.clear()
    assert (await api(gb200).get(GPU0)).status == 200


async def test_connection_reset(gb200: SimulatedBmc, api: Api) -> None:
    gb200.faults.set(FaultMode.RESET)
    client = api(gb200)
    # PATCH is not idempotent, so aiohttp does not retry it on another connection
    with pytest.raises(aiohttp.ClientError):
        await client.patch(GPU0, SET_700)
    assert gb200.stats.faults_injected["reset"] == 1
    assert gb200.stats.responses[0] == 1
    assert gb200.state.caps["GPU_0"].set_point == 1200
    with pytest.raises(aiohttp.ClientError):
        await client.get(GPU0)
    gb200.faults.clear()
    assert (await client.get(GPU0)).status == 200


async def test_http_500_on_writes_only(gb200: SimulatedBmc, api: Api) -> None:
    client = api(gb200)
    gb200.faults.set("http500", writes_only=True)
    assert (await client.get(GPU0)).status == 200
    failed = await client.patch(GPU0, SET_700)
    assert failed.status == 500
    assert failed.body["error"]["code"].endswith("InternalError")
    assert gb200.state.caps["GPU_0"].set_point == 1200
    # logging in is not a write
    assert (await client.login()).status == 201


async def test_http_503_with_retry_after(gb200: SimulatedBmc, api: Api) -> None:
    gb200.faults.set("http503", retry_after=2)
    reply = await api(gb200).get(GPU0)
    assert reply.status == 503
    assert reply.headers["Retry-After"] == "2"
    assert reply.body["error"]["code"].endswith("ServiceTemporarilyUnavailable")


async def test_nvidia_busy_applies_nothing(gb200: SimulatedBmc, api: Api) -> None:
    gb200.faults.set("nvidia-busy", writes_only=True)
    reply = await api(gb200).patch(GPU0, SET_700)
    assert reply.status == 500
    (info,) = reply.body["error"]["@Message.ExtendedInfo"]
    assert info["MessageArgs"] == ["0x50A"]
    assert "0x50A" in reply.body["error"]["message"]
    assert "60 seconds" in info["Resolution"]
    assert gb200.state.caps["GPU_0"].set_point == 1200


async def test_nvidia_timeout_applies_the_write(gb200: SimulatedBmc, api: Api) -> None:
    gb200.faults.set("nvidia-timeout", writes_only=True)
    reply = await api(gb200).patch(GPU0, SET_700)
    assert reply.status == 500
    assert reply.body["error"]["@Message.ExtendedInfo"][0]["MessageArgs"] == ["0x600"]
    assert gb200.state.caps["GPU_0"].set_point == 700
    # a rejected write is not turned into "maybe applied"
    assert (await api(gb200).patch(GPU0, {"PowerLimitWatts": {"SetPoint": 1}})).status == 400


async def test_operation_timeout_applies_the_write(gb200: SimulatedBmc, api: Api) -> None:
    gb200.faults.set("operation-timeout", writes_only=True)
    reply = await api(gb200).patch(GPU0, SET_700)
    assert reply.status == 500
    assert reply.body["error"]["@Message.ExtendedInfo"][0]["MessageId"].endswith(".OperationTimeout")
    assert gb200.state.caps["GPU_0"].set_point == 700
    assert (await api(gb200).patch(GPU0, {"PowerLimitWatts": {"SetPoint": 1}})).status == 400


async def test_invalid_json_body(gb200: SimulatedBmc, api: Api) -> None:
    gb200.faults.set("invalid-json")
    reply = await api(gb200).get(GPU0)
    assert reply.status == 200
    assert isinstance(reply.body, str)
    with pytest.raises(json.JSONDecodeError):
        json.loads(reply.body)
    written = await api(gb200).patch(GPU0, SET_700)
    assert isinstance(written.body, str)
    assert gb200.state.caps["GPU_0"].set_point == 700


async def test_cap_silently_reverts(gb200: SimulatedBmc, api: Api) -> None:
    gb200.faults.revert_after = 0.2
    client = api(gb200)
    reply = await client.patch(GPU0, SET_700)
    assert reply.status == 200 and reply.body["PowerLimitWatts"]["SetPoint"] == 700
    etag = reply.headers["ETag"]
    await _eventually(lambda: gb200.state.caps["GPU_0"].set_point == 1200)
    after = await client.get(GPU0)
    assert after.body["PowerLimitWatts"]["SetPoint"] == 1200
    assert after.headers["ETag"] != etag


async def test_fail_next_k_then_recover(gb200: SimulatedBmc, api: Api) -> None:
    gb200.faults.fail_next(2)
    client = api(gb200)
    assert [(await client.get(GPU0)).status for _ in range(3)] == [500, 500, 200]
    assert gb200.faults.mode is FaultMode.NONE
    gb200.faults.fail_next(1, "http503", writes_only=True)
    assert (await client.get(GPU0)).status == 200
    assert (await client.patch(GPU0, SET_700)).status == 503
    assert (await client.patch(GPU0, SET_700)).status == 200


async def test_fault_limited_to_a_path(gb200: SimulatedBmc, api: Api) -> None:
    gb200.faults.set("http500", path_contains="GPU_1")
    client = api(gb200)
    assert (await client.get(GPU0)).status == 200
    assert (await client.get(GPU1)).status == 500


def test_fault_spec_round_trip() -> None:
    from bmcsim import Faults

    faults = Faults()
    faults.update({"mode": "http503", "count": 3, "retry_after": 7, "writes_only": True})
    assert faults.to_dict()["mode"] == "http503"
    assert (faults.count, faults.retry_after, faults.writes_only) == (3, 7, True)
    faults.update({"revert_after": 1.5})
    assert faults.mode is FaultMode.HTTP_503 and faults.revert_after == 1.5
    with pytest.raises(ValueError):
        faults.update({"mode": "meteor"})
    with pytest.raises(ValueError):
        faults.update({"colour": "red"})


async def test_late_reply_applies_the_write_then_holds_the_answer(gb200: SimulatedBmc, api: Api) -> None:
    """A BMC still at work when the client (or a gateway in front of it) gives up on the reply."""
    gb200.faults.set("late-reply", writes_only=True, hang_seconds=30, count=1, then={"mode": "http500"})
    client = api(gb200)
    with pytest.raises(asyncio.TimeoutError):
        await client.patch(GPU0, SET_700, deadline_s=0.3)
    assert gb200.state.caps["GPU_0"].set_point == 700  # it landed; only the answer is late
    assert gb200.stats.faults_injected["late-reply"] == 1
    await _eventually(lambda: gb200.stats.in_flight == 0)  # the held handler ends with its client
    # `then`: the next fault follows once the counted one is spent
    assert gb200.faults.mode is FaultMode.HTTP_500 and gb200.faults.then is None
    assert (await client.get(GPU0)).status == 500
    gb200.faults.clear()
    with pytest.raises(ValueError):
        gb200.faults.set("late-reply", then={"mode": "http500"})  # `then` follows a count


async def test_a_held_reply_keeps_its_own_faults_hold_when_then_switches_to_another(
    gb200: SimulatedBmc, api: Api
) -> None:
    """Firing the counted fault switches to its `then` at once: the request it hit is held for the
    fired fault's `hang_seconds`, not for the next one's."""
    after = {"mode": "late-reply", "count": 1, "hang_seconds": 0.05}
    gb200.faults.set("late-reply", writes_only=True, hang_seconds=30, count=1, then=after)
    client = api(gb200)
    with pytest.raises(asyncio.TimeoutError):
        await client.patch(GPU0, SET_700, deadline_s=1.0)  # held 30 s, not 0.05 s
    assert gb200.faults.hang_seconds == 0.05  # the next fault's hold is in force now
    assert (await client.get(GPU0, deadline_s=5.0)).status == 200  # held 0.05 s
