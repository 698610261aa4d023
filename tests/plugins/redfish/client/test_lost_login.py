"""A login whose answer never came (the BMC made the session, the reply was lost or came after the
request's deadline) leaves a session with this very process's Context: it is not the session in
use, and no later process is needed to find it. The next login's sweep deletes it, so a BMC holds
one session of ours, not two (the 51st session of the 50-BMC SIGKILL drill)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from bmcsim._faults import FaultMode
from plugins.base import Empty
from plugins.redfish._wire.errors import DeadlineExceededError

SESSIONS = "/SessionService/Sessions"


async def test_a_login_answered_too_late_leaves_no_second_session(make_harness: Callable[..., Any]) -> None:
    async with make_harness(n=1, model="gb200") as h:
        bmc = h.fleet.bmcs[0]
        # the login is processed (the session exists on the BMC), its reply held past the deadline
        bmc.faults.set(
            FaultMode.LATE_REPLY, path_contains="/SessionService/Sessions", count=1, hang_seconds=5
        )
        with pytest.raises(DeadlineExceededError, match="POST /redfish/v1/SessionService/Sessions"):
            await h.call("std_metrics", bmc, Empty(), timeout=1.0)
        assert bmc.stats.open_sessions == 1  # made on the BMC, never answered to us
        out = await h.call("std_metrics", bmc, Empty())  # logs in again
        assert out.result.ok, out.result
        assert bmc.stats.open_sessions == 1, "the lost login's session is still open beside ours"
        client = h.plugin.pool.clients()[0]
        assert client.session_uri.rpartition("/")[2] in bmc.sessions.ids()  # the one left is ours


async def test_a_lost_login_never_takes_another_live_clients_session(
    make_harness: Callable[..., Any],
) -> None:
    """Two clients of this process on one BMC (two names for it: the same Context on both): the
    sweep after one's lost login deletes that login's session, never the other's live one."""
    async with make_harness(n=1, model="gb200") as h:
        bmc = h.fleet.bmcs[0]
        other = h.ctx(bmc)
        other = dataclasses.replace(
            other, endpoint=dataclasses.replace(other.endpoint, url=bmc.url.replace("127.0.0.1", "localhost"))
        )
        assert (await h.plugin.std_metrics(other, Empty())).result.ok  # the other client's session
        assert bmc.stats.open_sessions == 1
        bmc.faults.set(
            FaultMode.LATE_REPLY, path_contains="/SessionService/Sessions", count=1, hang_seconds=5
        )
        with pytest.raises(DeadlineExceededError):
            await h.call("std_metrics", bmc, Empty(), timeout=1.0)
        assert bmc.stats.open_sessions == 2
        assert (await h.call("std_metrics", bmc, Empty())).result.ok
        clients = h.plugin.pool.clients()
        assert len(clients) == 2 and all(c.session_uri for c in clients)
        assert bmc.stats.open_sessions == 2  # one per client: the lost login's is gone, none live was
        assert {c.session_uri.rpartition("/")[2] for c in clients} == set(bmc.sessions.ids())
        assert (await h.plugin.std_metrics(other, Empty())).result.ok  # its session still works
