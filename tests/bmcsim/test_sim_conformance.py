"""Protocol conformance of the simulator: $metadata, standard headers, 405/412/501, accounts and roles."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from bmcsim import SimulatedBmc, SimulatorFleet

Api = Callable[[SimulatedBmc], Any]
NODE = "/redfish/v1/Chassis/1/Controls/PowerLimit"
ACCOUNTS = "/redfish/v1/AccountService/Accounts"
EDMX = "{http://docs.oasis-open.org/odata/ns/edmx}"


@pytest.fixture
async def h100(cert_dir: Path) -> AsyncIterator[SimulatedBmc]:
    async with SimulatorFleet(n=1, model="dgx-h100", cert_dir=cert_dir) as fleet:
        yield fleet.bmcs[0]


def _ids(reply: Any) -> list[str]:
    return [i["MessageId"].rsplit(".", 1)[1] for i in reply.body["error"]["@Message.ExtendedInfo"]]


async def _account(client: Any, role: str) -> tuple[str, str]:
    name, password = f"user-{role.lower()}", "Secret-pass-1"
    made = await client.post(ACCOUNTS, {"UserName": name, "Password": password, "RoleId": role})
    assert made.status == 201, made.body
    assert made.headers["Location"] == made.body["@odata.id"]
    return name, password


async def _login(client: Any, name: str, password: str) -> dict[str, str]:
    path = "/redfish/v1/SessionService/Sessions"
    reply = await client.post(path, {"UserName": name, "Password": password}, auth=False)
    assert reply.status == 201, reply.body
    return {"X-Auth-Token": reply.headers["X-Auth-Token"]}


async def test_read_only_account_cannot_write_a_cap(dmtf: SimulatedBmc, api: Api) -> None:
    admin = api(dmtf)
    before = (await admin.get(NODE)).body["SetPoint"]
    token = await _login(admin, *await _account(admin, "ReadOnly"))
    denied = await admin.call("PATCH", NODE, {"SetPoint": 700}, headers=token, auth=False)
    assert denied.status == 403
    assert _ids(denied) == ["InsufficientPrivilege"]
    assert (await admin.get(NODE)).body["SetPoint"] == before
    # it still reads, and cannot create accounts either
    assert (await admin.call("GET", NODE, headers=token, auth=False)).status == 200
    made = await admin.call(
        "POST", ACCOUNTS, {"UserName": "x", "Password": "Secret-pass-2"}, headers=token, auth=False
    )
    assert made.status == 403

    operator = await _login(admin, *await _account(admin, "Operator"))
    done = await admin.call("PATCH", NODE, {"SetPoint": 700}, headers=operator, auth=False)
    assert done.status == 200 and done.body["SetPoint"] == 700
    denied = await admin.call(
        "POST", ACCOUNTS, {"UserName": "y", "Password": "Secret-pass-3"}, headers=operator, auth=False
    )
    assert denied.status == 403


async def test_accounts_etag_if_match_and_roles(gb200: SimulatedBmc, api: Api) -> None:
    client = api(gb200)
    await _account(client, "ReadOnly")
    path = f"{ACCOUNTS}/2"
    first = await client.get(path)
    assert first.body["Password"] is None and first.body["RoleId"] == "ReadOnly"
    etag = first.headers["ETag"]
    assert (
        await client.patch(path, {"Password": "Other-pass-9"}, headers={"If-Match": etag + "x"})
    ).status == 412
    changed = await client.patch(path, {"Password": "Other-pass-9"}, headers={"If-Match": etag})
    assert changed.status == 200 and changed.headers["ETag"] != etag
    assert _ids(await client.patch(path, {"BogusProp": 1})) == ["PropertyUnknown"]
    assert _ids(await client.patch(path, {"@odata.id": path})) == ["NoOperation"]
    roles = (await client.get("/redfish/v1/AccountService/Roles")).body["Members"]
    assert [r["@odata.id"].rsplit("/", 1)[1] for r in roles] == ["Administrator", "Operator", "ReadOnly"]
    assert (await client.call("DELETE", path)).status == 204
    assert (await client.call("DELETE", f"{ACCOUNTS}/1")).status == 403  # the BMC's own administrator stays


async def test_metadata_lists_the_model_namespaces(h100: SimulatedBmc, api: Api) -> None:
    client = api(h100)
    reply = await client.get("/redfish/v1/$metadata", auth=False)
    assert reply.status == 200 and reply.headers["Content-Type"].startswith("application/xml")
    root = ET.fromstring(reply.body)
    refs = {r.get("Uri"): [i.get("Namespace") for i in r] for r in root.iter(f"{EDMX}Reference")}
    # the versions the DGX H100 mockup's documents declare (AMI's host BMC speaks Redfish 1.11.0)
    assert "ServiceRoot.v1_11_0" in refs["http://redfish.dmtf.org/schemas/v1/ServiceRoot_v1.xml"]
    assert "EnvironmentMetrics.v1_2_0" in refs["http://redfish.dmtf.org/schemas/v1/EnvironmentMetrics_v1.xml"]


async def test_headers_and_refusals(gb200: SimulatedBmc, api: Api) -> None:
    client = api(gb200)
    root = await client.get("/redfish/v1")
    assert root.body["Tasks"] == {"@odata.id": "/redfish/v1/TaskService"} and "TaskService" not in root.body
    assert (
        root.headers["Link"]
        == "<https://redfish.dmtf.org/schemas/v1/ServiceRoot.v1_17_0.json>; rel=describedby"
    )
    assert root.headers["Allow"] == "GET, HEAD"
    unauthorized = await client.get("/redfish/v1/Systems", auth=False)
    assert unauthorized.status == 401 and unauthorized.headers["WWW-Authenticate"].startswith("Basic ")
    unknown = await client.call("FAKEMETHODFORTEST", "/redfish/v1")
    assert unknown.status == 501 and unknown.body["error"]["@Message.ExtendedInfo"]
    put = await client.call("PUT", "/redfish/v1/Systems")
    assert put.status == 405 and put.headers["Allow"] == "GET, HEAD"
    assert (await client.get("/redfish/v1", headers={"OData-Version": "4.1"})).status == 412
    assert _ids(await client.get("/redfish/v1/Systems?$expand=.")) == ["QueryNotSupported"]
    assert (await client.get("/redfish/v1/Systems?plain=1")).status == 200  # only $ parameters are refused
    members = "/redfish/v1/SessionService/Sessions/Members"
    login = await client.post(members, {"UserName": gb200.username, "Password": gb200.password}, auth=False)
    assert login.status == 201 and login.headers["X-Auth-Token"]
