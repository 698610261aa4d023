"""An idle Redfish session is refreshed before the BMC expires it (`BmcPool._keep_warm`): the
next request after a quiet spell longer than the BMC's session timeout needs no new login (real
HTTPS simulator; its own session table decides what expired)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from plugins.base import Empty
from plugins.redfish import RedfishSettings

#: the simulated BMC forgets a session idle this long
SESSION_TIMEOUT = 1.2


@pytest.mark.parametrize("refresh_after", [0.4, 0.0], ids=["refreshed", "not-refreshed"])
async def test_an_idle_session_outlives_the_bmc_timeout_only_when_refreshed(
    make_harness: Callable[..., Any], refresh_after: float
) -> None:
    settings = RedfishSettings(session_refresh_after=refresh_after)
    async with make_harness(settings, n=1, model="gb200", session_timeout=SESSION_TIMEOUT) as h:
        bmc = h.fleet.bmcs[0]
        first = await h.plugin.std_metrics(h.ctx(bmc, state={}), Empty())
        assert first.result.ok, first.result.error
        await h.plugin.pool.clients()[0].settled()
        assert bmc.stats.sessions_created == 1
        await asyncio.sleep(SESSION_TIMEOUT * 2.5)  # idle, as between two waves
        again = await h.plugin.std_metrics(h.ctx(bmc, state=dict(first.state or {})), Empty())
        assert again.result.ok, again.result.error
        # refreshed: the same session serves; else the BMC expired it and a login was needed
        assert bmc.stats.sessions_created == (1 if refresh_after else 2)


async def test_a_session_the_library_opens_again_after_a_401_is_recorded(
    make_harness: Callable[..., Any],
) -> None:
    """A GET answered 401 (the BMC forgot the session) logs in again inside the DMTF client: the
    new session goes into the identity's record in place of the old one, as any login's does."""
    async with make_harness(n=1, model="gb200") as h:
        bmc = h.fleet.bmcs[0]
        first = await h.plugin.std_metrics(h.ctx(bmc, state={}), Empty())
        assert first.result.ok, first.result.error
        client = h.plugin.pool.clients()[0]
        await client.settled()
        identity = h.plugin.pool.identity
        assert identity is not None
        before = client.session_uri
        assert identity.recorded(client.origin) == [before]
        bmc.sessions.expire_all()
        again = await h.plugin.std_metrics(h.ctx(bmc, state=dict(first.state or {})), Empty())
        assert again.result.ok, again.result.error
        assert client.session_uri != before and bmc.stats.sessions_created == 2
        assert identity.recorded(client.origin) == [client.session_uri]
