"""Redfish sessions a killed process left open are deleted by the next one (issue 9, defect 13)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from plugins.base import Empty
from plugins.redfish import RedfishPlugin
from plugins.redfish._errors import SessionLimitError


async def _crash(plugin: RedfishPlugin) -> None:
    """Drop a plugin the way SIGKILL does: connections gone, no logout, its sessions left on the BMC."""
    pool = plugin.pool
    http = pool._http
    pool._clients.clear()
    if http is not None:
        await http.close()
    pool._http = None


async def test_sessions_of_killed_processes_do_not_accumulate(
    make_harness: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    async with make_harness(n=1, model="gb200", session_limit=4) as h:
        bmc = h.fleet.bmcs[0]
        first = await h.call("std_metrics", bmc, Empty())
        recorded = first.state["sessions"][bmc.url]
        assert len(recorded) == 1 and recorded[0].startswith("/redfish/v1/SessionService/Sessions/")
        assert bmc.sessions.ids() == [recorded[0].rsplit("/", 1)[1]]
        with caplog.at_level(logging.WARNING, logger="plugins.redfish"):
            for _ in range(10):  # ten SIGKILLs with a session open, each followed by a fresh process
                await _crash(h.plugin)
                h.plugin = RedfishPlugin()
                await h.plugin.start()
                out = await h.call("std_metrics", bmc, Empty())
                assert out.result.ok, out.result.error
                assert bmc.stats.open_sessions == 1  # the leftover was deleted after the new login
                assert out.state["sessions"][bmc.url] == [
                    f"{bmc.sessions.ids() and '/redfish/v1/SessionService/Sessions/' + bmc.sessions.ids()[0]}"
                ]
                client = h.plugin.pool.clients()[0]
                assert client.auth_mode == "session" and client.sessions_reaped == 1
        await h.plugin.close()
        assert bmc.stats.open_sessions == 0 and bmc.stats.session_limit_rejections == 0
        assert "Basic" not in caplog.text
        assert bmc.password not in caplog.text


async def test_full_session_table_frees_only_our_leftover_and_never_falls_back_silently(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(n=1, model="gb200", session_limit=4) as h:
        bmc = h.fleet.bmcs[0]
        first = await h.call("std_metrics", bmc, Empty())
        ours = first.state["sessions"][bmc.url][0].rsplit("/", 1)[1]
        await _crash(h.plugin)
        foreign = [bmc.sessions.create().id for _ in range(3)]  # another tool on the same account
        assert bmc.sessions.is_full()
        h.plugin = RedfishPlugin()
        await h.plugin.start()
        out = await h.call("std_metrics", bmc, Empty())
        assert out.result.ok, out.result.error
        assert bmc.stats.session_limit_rejections == 1
        live = set(bmc.sessions.ids())
        assert ours not in live and set(foreign) <= live and len(live) == 4
        assert h.plugin.pool.clients()[0].auth_mode == "session"
        # a full table with nothing of ours in it: a clear error, no silent Basic auth
        await _crash(h.plugin)
        bmc.sessions.delete(out.state["sessions"][bmc.url][0].rsplit("/", 1)[1])
        bmc.sessions.create()
        h.plugin = RedfishPlugin()
        await h.plugin.start()
        with pytest.raises(
            SessionLimitError, match="none of its sessions is one this controller left behind"
        ):
            await h.call("std_metrics", bmc, Empty(), state={})
        await h.plugin.close()
        for sid in bmc.sessions.ids():
            bmc.sessions.delete(sid)
