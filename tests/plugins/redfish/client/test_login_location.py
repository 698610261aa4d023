"""A login answer whose `Location` names another origin (a hostile or misconfigured BMC, a proxy that
rewrites it): the session is kept by its token, nothing is ever sent to that `Location`, and no
request logs in again for it (each login would leave one more session in a small table)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import pytest

import bmcsim._common
import bmcsim._gb200
from plugins.base import Empty

FOREIGN = [
    "https://203.0.113.9/redfish/v1/SessionService/Sessions/",
    "https://bmcuser:hunter2@203.0.113.9/redfish/v1/SessionService/Sessions/",
]


@pytest.mark.parametrize("foreign", FOREIGN)
async def test_a_login_location_at_another_origin_keeps_the_session_by_its_token(
    make_harness: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    foreign: str,
) -> None:
    login = bmcsim._common._login

    def foreign_location(bmc: Any, req: Any) -> Any:
        reply = login(bmc, req)
        moved = foreign + reply.headers["Location"].rpartition("/")[2]
        return dataclasses.replace(reply, headers={**reply.headers, "Location": moved})

    routes = bmcsim._gb200.PLATFORM.router._exact
    route = routes[bmcsim._common.SESSIONS]
    monkeypatch.setitem(routes, bmcsim._common.SESSIONS, dataclasses.replace(route, post=foreign_location))
    caplog.set_level(logging.WARNING)
    async with make_harness(n=1, model="gb200") as h:
        bmc = h.fleet.bmcs[0]
        for _ in range(3):
            out = await h.call("std_metrics", bmc, Empty())
            assert out.result.ok, out.result
        assert bmc.stats.sessions_created == 1, "a login again for every request"
        assert bmc.stats.open_sessions == 1
        client = h.plugin.pool.clients()[0]
        assert client.session_uri == ""  # not a member of the session collection: never DELETEd
        assert "outside its session collection" in caplog.text
        assert "hunter2" not in caplog.text  # credentials in the Location are never logged
        await client.logout()
        assert bmc.stats.open_sessions == 1  # never DELETEd at its foreign Location: it expires
        assert "203.0.113.9" not in " ".join(str(key) for key in bmc.stats.calls)
        assert bmc.sessions.expire_all() == 1  # the BMC's inactivity timeout, for the harness


async def test_a_login_where_the_service_root_names_it_carries_our_context(
    make_harness: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session collection is the one the service root links (`Links.Sessions`), not a fixed
    path: the login POSTed there still says whose session it is (`Session.Context`), or a crash
    would leave a session no later process can prove its own."""
    routes = bmcsim._gb200.PLATFORM.router._exact
    members = f"{bmcsim._common.SESSIONS}/Members"  # bmcsim takes a login here too
    root = routes[bmcsim._common.ROOT]
    service_root = root.get
    assert service_root is not None and routes[members].post is not None

    def linking_members(bmc: Any, req: Any) -> Any:
        reply = service_root(bmc, req)
        body = {**reply.body, "Links": {**reply.body["Links"], "Sessions": {"@odata.id": members}}}
        return dataclasses.replace(reply, body=body)

    monkeypatch.setitem(routes, bmcsim._common.ROOT, dataclasses.replace(root, get=linking_members))
    async with make_harness(n=1, model="gb200") as h:
        bmc = h.fleet.bmcs[0]
        out = await h.call("std_metrics", bmc, Empty())
        assert out.result.ok, out.result
        assert bmc.stats.calls.get(("POST", members)) == 1, bmc.stats.calls
        client = h.plugin.pool.clients()[0]
        assert client.marker
        (session_id,) = bmc.sessions.ids()
        session = bmc.sessions.by_id(session_id)
        assert session is not None and session.context == client.marker
        await client.settled()  # the sweep after the first login
        # the login's answer showed our session: the sweep did not read it again
        assert ("GET", f"{bmcsim._common.SESSIONS}/{{id}}") not in bmc.stats.calls, bmc.stats.calls
