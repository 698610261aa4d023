"""A login whose answer never came (the BMC made the session, the reply was lost or came after the
request's deadline) leaves a session with this very process's Context: it is not the session in
use, and no later process is needed to find it. The next login's sweep deletes it, so a BMC holds
one session of ours, not two (the 51st session of the 50-BMC SIGKILL drill)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from bmcsim._faults import FaultMode
from plugins.base import Empty
from plugins.redfish._wire.errors import DeadlineExceededError


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
