"""Redfish sessions a killed process left open are deleted by the next one, and no one else's are."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import REGISTRY

from bmcsim import SimulatedBmc
from plugins.base import Empty
from plugins.redfish import RedfishPlugin
from plugins.redfish._wire.errors import AccessError, SessionLimitError

SESSIONS = "/redfish/v1/SessionService/Sessions/"
SESSION_COLLECTION = "/redfish/v1/SessionService/Sessions"
ACCOUNT = "/redfish/v1/AccountService/Accounts/admin"


async def _crash(plugin: RedfishPlugin) -> None:
    """Drop a plugin the way SIGKILL does: connections gone, no logout, its sessions left on the BMC."""
    pool = plugin.pool
    http = pool._http
    pool._clients.clear()
    if http is not None:
        await http.close()
    pool._http = None
    if pool.identity is not None:  # the kernel releases a dead process's identity lease
        pool.identity.release()
        pool.identity = None


async def _plugin(client_id: str) -> RedfishPlugin:
    plugin = RedfishPlugin()
    plugin.set_client_id(client_id)
    await plugin.start()
    return plugin


def _limit_reached(result: str) -> float:
    """`devicectl_bmc_session_limit_reached_total{result}`: what the session-table alert reads."""
    return REGISTRY.get_sample_value("devicectl_bmc_session_limit_reached_total", {"result": result}) or 0.0


def _contexts(bmc: SimulatedBmc) -> list[str | None]:
    return [bmc.sessions.by_id(sid).context for sid in bmc.sessions.ids()]  # type: ignore[union-attr]


async def test_sessions_of_killed_processes_do_not_accumulate(
    make_harness: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    async with make_harness(n=1, model="gb200", session_limit=4) as h:
        bmc = h.fleet.bmcs[0]
        h.plugin.set_client_id("ctl-a")
        first = await h.call("std_metrics", bmc, Empty())
        recorded = first.state["sessions"][bmc.url]
        assert len(recorded) == 1 and recorded[0].startswith(SESSIONS)
        assert _contexts(bmc) == [f"devicectl/ctl-a/{h.plugin.pool.boot}"]
        with caplog.at_level(logging.WARNING, logger="plugins.redfish"):
            for _ in range(10):  # ten SIGKILLs with a session open, each followed by a fresh process
                await _crash(h.plugin)
                h.plugin = await _plugin("ctl-a")
                out = await h.call("std_metrics", bmc, Empty(), state={})  # nothing recorded
                assert out.result.ok, out.result.error
                assert bmc.stats.open_sessions == 1  # the leftover was found by its Context
                assert _contexts(bmc) == [f"devicectl/ctl-a/{h.plugin.pool.boot}"]
                client = h.plugin.pool.clients()[0]
                assert client.auth_mode == "session" and client.sessions_reaped == 1
        await h.plugin.close()
        assert bmc.stats.open_sessions == 0 and bmc.stats.session_limit_rejections == 0
        assert "Basic" not in caplog.text
        assert bmc.password not in caplog.text


async def test_a_sweep_deletes_only_earlier_processes_of_this_controller(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(n=1, model="gb200", session_limit=8) as h:
        bmc = h.fleet.bmcs[0]
        other = await _plugin("ctl-b")  # a second live controller on the same BMC (and account)
        h.plugin.set_client_id("ctl-a")
        await h.call("std_metrics", bmc, Empty())
        await other.std_metrics(h.ctx(bmc, state={}), Empty())
        await other.pool.clients()[0].settled()
        tool = bmc.sessions.create(context="ipmitool-web", client="127.0.0.1").id  # another tool
        bare = bmc.sessions.create(client="127.0.0.1").id  # another client that sets no Context
        b_session = other.pool.clients()[0].session_uri.rsplit("/", 1)[1]
        await _crash(h.plugin)
        h.plugin = await _plugin("ctl-a")
        out = await h.call("std_metrics", bmc, Empty(), state={})
        assert out.result.ok, out.result.error
        live = set(bmc.sessions.ids())
        mine = h.plugin.pool.clients()[0].session_uri.rsplit("/", 1)[1]
        assert live == {mine, b_session, tool, bare}
        assert h.plugin.pool.clients()[0].sessions_reaped == 1
        await other.close()
        bmc.sessions.delete(tool)
        bmc.sessions.delete(bare)
        await h.plugin.close()


async def test_devices_behind_one_bmc_share_one_session(make_harness: Callable[..., Any]) -> None:
    async with make_harness(n=1, model="gb200") as h:
        bmc = h.fleet.bmcs[0]
        for device in ("tray-a", "tray-b", "tray-c"):
            ctx = dataclasses.replace(h.ctx(bmc, state={}), device_id=device)
            out = await h.plugin.std_metrics(ctx, Empty())
            assert out.result.ok, out.result.error
        assert bmc.stats.sessions_created == 1 and bmc.stats.open_sessions == 1
        assert len(h.plugin.pool.clients()) == 1


async def test_an_exclusive_account_on_a_bmc_that_drops_context_is_swept_by_account_and_address(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(n=1, model="gb200", session_limit=8) as h:
        bmc = h.fleet.bmcs[0]
        bmc.configure(session_context="drop")
        h.options["exclusive_account"] = True  # the device says: this account is devicectl's alone
        await h.call("std_metrics", bmc, Empty())
        assert _contexts(bmc) == [None]
        elsewhere = bmc.sessions.create(client="10.9.9.9").id  # same account, another host
        tagged = bmc.sessions.create(context="other-tool", client="127.0.0.1").id
        await _crash(h.plugin)
        h.plugin = RedfishPlugin()
        await h.plugin.start()
        out = await h.call("std_metrics", bmc, Empty(), state={})
        assert out.result.ok, out.result.error
        mine = h.plugin.pool.clients()[0].session_uri.rsplit("/", 1)[1]
        assert set(bmc.sessions.ids()) == {mine, elsewhere, tagged}
        bmc.sessions.delete(elsewhere)
        bmc.sessions.delete(tagged)
        await h.plugin.close()


async def test_full_session_table_frees_only_our_leftover_and_never_falls_back_silently(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(n=1, model="gb200", session_limit=4) as h:
        bmc = h.fleet.bmcs[0]
        await h.call("std_metrics", bmc, Empty())
        ours = bmc.sessions.ids()[0]
        await _crash(h.plugin)
        foreign = [bmc.sessions.create(client="10.1.2.3").id for _ in range(3)]  # another tool
        assert bmc.sessions.is_full()
        h.plugin = RedfishPlugin()
        await h.plugin.start()
        freed, refused = _limit_reached("freed"), _limit_reached("refused")
        out = await h.call("std_metrics", bmc, Empty(), state={})  # nothing recorded: found by Context
        assert out.result.ok, out.result.error
        assert bmc.stats.session_limit_rejections == 1
        assert _limit_reached("freed") == freed + 1 and _limit_reached("refused") == refused
        live = set(bmc.sessions.ids())
        assert ours not in live and set(foreign) <= live and len(live) == 4
        assert h.plugin.pool.clients()[0].auth_mode == "session"
        # a full table with nothing of ours in it: a clear error with the BMC's figures, no Basic auth
        await _crash(h.plugin)
        bmc.sessions.delete(next(s for s in bmc.sessions.ids() if s not in foreign))
        bmc.sessions.create(context="other-tool", client="10.1.2.4")
        h.plugin = RedfishPlugin()
        await h.plugin.start()
        with pytest.raises(SessionLimitError) as caught:
            await h.call("std_metrics", bmc, Empty(), state={})
        message = str(caught.value)
        assert "session table is full: 4 of 4 sessions open" in message
        assert "none of them this controller's" in message
        assert _limit_reached("refused") == refused + 1
        assert "3 of account 'admin' from 10.1.2.3" in message
        assert "1 of account 'admin' from 10.1.2.4 (Context 'other-tool')" in message
        assert len(bmc.sessions) == 4
        await h.plugin.close()
        for sid in bmc.sessions.ids():
            bmc.sessions.delete(sid)


async def test_a_sweep_outlives_the_request_that_found_the_table_full(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(n=1, model="gb200", session_limit=4) as h:
        bmc = h.fleet.bmcs[0]
        h.plugin.set_client_id("ctl-a")
        dead = [
            bmc.sessions.create(context="devicectl/ctl-a/0dead0", client="127.0.0.1").id for _ in range(4)
        ]
        bmc.configure(latency=0.2)  # listing, reading and deleting four sessions take over a second
        call = asyncio.ensure_future(h.call("std_metrics", bmc, Empty(), timeout=30))
        # NOTE: the request ends (the runner cancels a call at its deadline) once its login was
        # refused and the sweep it started is listing the table: a fixed 0.5 s deadline ended it
        # before the login's refusal came back on a slow host (connect, GET /redfish/v1 and the
        # POST at 0.2 s each), so no sweep had started and there was nothing to outlive
        listing = ("GET", "/redfish/v1/SessionService/Sessions")
        for _ in range(400):
            if bmc.stats.calls.get(listing) or call.done():
                break
            await asyncio.sleep(0.025)
        assert bmc.stats.session_limit_rejections == 1 and bmc.stats.calls.get(listing) == 1
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        for _ in range(100):
            if not set(dead) & set(bmc.sessions.ids()):
                break
            await asyncio.sleep(0.05)
        assert not set(dead) & set(bmc.sessions.ids()), "the sweep stopped with the request"
        bmc.configure(latency=0.0)
        out = await h.call("std_metrics", bmc, Empty())
        assert out.result.ok, out.result.error
        assert len(bmc.sessions) == 1
        await h.plugin.close()


async def test_a_login_that_requires_a_password_change_is_refused_and_its_session_deleted(
    make_harness: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """DSP0266: a service may open the session and answer `PasswordChangeRequired` with it."""
    async with make_harness(n=1, model="gb200") as h:
        bmc = h.fleet.bmcs[0]
        router = bmc.platform.router
        matched = router.match(SESSION_COLLECTION)
        assert matched is not None
        route = matched[0]
        login = route.post
        assert login is not None

        def must_change_password(sim: Any, req: Any) -> Any:
            reply = login(sim, req)
            reply.body["@Message.ExtendedInfo"] = [
                {"MessageId": "Base.1.8.PasswordChangeRequired", "MessageArgs": [ACCOUNT]}
            ]
            return reply

        changed = dataclasses.replace(route, post=must_change_password)
        monkeypatch.setitem(router._exact, SESSION_COLLECTION, changed)
        with pytest.raises(AccessError, match="requires a password change for 'admin'"):
            await h.call("std_metrics", bmc, Empty())
        assert bmc.stats.sessions_created >= 1 and bmc.stats.open_sessions == 0
