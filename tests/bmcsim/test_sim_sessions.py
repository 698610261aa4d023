"""Redfish sessions, Basic auth and 401 handling, with aiohttp and the DMTF async client."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from redfish.aio import AsyncRedfishClient
from redfish.aio.exceptions import RedfishHTTPError

from bmcsim import SimulatedBmc

SESSIONS = "/redfish/v1/SessionService/Sessions"
GPU0 = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_0/EnvironmentMetrics"

Api = Callable[[SimulatedBmc], Any]


async def test_service_root_needs_no_auth(gb200: SimulatedBmc, api: Api) -> None:
    client = api(gb200)
    root = await client.get("/redfish/v1/", auth=False)
    assert root.status == 200
    assert root.body["Links"]["Sessions"]["@odata.id"] == SESSIONS
    assert root.body["Vendor"] == "NVIDIA"
    assert (await client.get("/redfish", auth=False)).body == {"v1": "/redfish/v1/"}
    assert (await client.get("/redfish/v1/Systems", auth=False)).status == 401


async def test_login_logout_and_collection(gb200: SimulatedBmc, api: Api) -> None:
    client = api(gb200)
    login = await client.login()
    assert login.status == 201
    location = login.headers["Location"]
    assert location == login.body["@odata.id"]
    assert location.startswith(SESSIONS + "/")
    assert login.body["Password"] is None
    assert gb200.stats.open_sessions == 1

    listed = await client.get(SESSIONS)
    assert [m["@odata.id"] for m in listed.body["Members"]] == [location]
    assert (await client.get(location)).body["UserName"] == "admin"

    assert (await client.call("DELETE", location)).status == 204
    assert gb200.stats.open_sessions == 0
    assert gb200.stats.sessions_created == 1
    assert gb200.stats.sessions_deleted == 1
    # the token died with the session
    gone = await client.get(GPU0)
    assert gone.status == 401
    assert gone.body["error"]["code"].endswith("NoValidSession")


async def test_bad_credentials_and_missing_fields(gb200: SimulatedBmc, api: Api) -> None:
    client = api(gb200)
    bad = await client.post(SESSIONS, {"UserName": "admin", "Password": "wrong"}, auth=False)
    assert bad.status == 401
    assert "wrong" not in str(bad.body)
    missing = await client.post(SESSIONS, {"UserName": "admin"}, auth=False)
    assert missing.status == 400
    assert missing.body["error"]["@Message.ExtendedInfo"][0]["MessageId"].endswith("PropertyMissing")
    assert gb200.stats.logins_failed == 1


async def test_session_limit(gb200: SimulatedBmc, api: Api) -> None:
    gb200.configure(session_limit=2)
    clients = [api(gb200) for _ in range(3)]
    assert (await clients[0].login()).status == 201
    assert (await clients[1].login()).status == 201
    refused = await clients[2].login()
    assert refused.status == 503
    assert refused.body["error"]["code"].endswith("SessionLimitExceeded")
    assert gb200.stats.session_limit_rejections == 1
    # Basic auth still works when the session table is full
    assert (await api(gb200).get(GPU0)).status == 200
    # logging one out makes room
    await clients[0].call("DELETE", (await clients[0].get(SESSIONS)).body["Members"][0]["@odata.id"])
    assert (await clients[2].login()).status == 201


async def test_expire_all_sessions_gives_401(gb200: SimulatedBmc, api: Api) -> None:
    client = api(gb200)
    await client.login()
    assert (await client.get(GPU0)).status == 200
    assert gb200.expire_sessions() == 1
    expired = await client.get(GPU0)
    assert expired.status == 401
    assert gb200.stats.sessions_expired == 1
    assert (await client.login()).status == 201
    assert (await client.get(GPU0)).status == 200


async def test_inactivity_timeout(gb200: SimulatedBmc, api: Api) -> None:
    gb200.configure(session_timeout=0.2)
    client = api(gb200)
    await client.login()
    assert (await client.get(GPU0)).status == 200
    await asyncio.sleep(0.3)
    assert (await client.get(GPU0)).status == 401


async def test_basic_auth_and_bad_basic(gb200: SimulatedBmc, api: Api) -> None:
    client = api(gb200)
    assert (await client.get(GPU0)).status == 200
    wrong = await client.get(GPU0, auth=False, headers={"Authorization": "Basic YWRtaW46bm9wZQ=="})
    assert wrong.status == 401
    garbage = await client.get(GPU0, auth=False, headers={"Authorization": "Basic !!!"})
    assert garbage.status == 401


async def test_dmtf_async_client_login_relogin_logout(
    gb200: SimulatedBmc, http: aiohttp.ClientSession
) -> None:
    client = AsyncRedfishClient(gb200.url, gb200.username, gb200.password, session=http, timeout=10)
    await client.login()
    assert gb200.stats.sessions_created == 1
    reply = await client.get(GPU0)
    assert reply.status == 200
    assert reply.dict["PowerLimitWatts"]["AllowableMax"] == 1200

    # after the BMC forgets every session the client logs in again once and retries the GET
    gb200.expire_sessions()
    again = await client.get(GPU0)
    assert again.status == 200
    assert gb200.stats.sessions_created == 2

    patched = await client.patch(GPU0, body={"PowerLimitWatts": {"SetPoint": 900}})
    assert patched.status == 200
    assert gb200.state.caps["GPU_0"].set_point == 900

    await client.logout()
    assert gb200.stats.open_sessions == 0
    assert gb200.stats.sessions_deleted == 1


async def test_dmtf_async_client_session_limit(gb200: SimulatedBmc, http: aiohttp.ClientSession) -> None:
    gb200.configure(session_limit=1)
    first = AsyncRedfishClient(gb200.url, gb200.username, gb200.password, session=http)
    second = AsyncRedfishClient(gb200.url, gb200.username, gb200.password, session=http)
    await first.login()
    with pytest.raises(RedfishHTTPError) as caught:
        await second.login()
    assert caught.value.response.status == 503
    # the documented fallback: Basic auth needs no session slot
    await second.login(auth="basic")
    assert (await second.get(GPU0)).status == 200
    await first.logout()
