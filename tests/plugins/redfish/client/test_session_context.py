"""Sessions on BMCs that do not keep `Session.Context`, or refuse it: no one else's session is ever
deleted, and a full table of sessions that cannot be told apart says what would free it."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from plugins.base import Empty
from plugins.redfish import RedfishPlugin
from plugins.redfish._client.session_table import Sweep
from plugins.redfish._wire.errors import SessionLimitError
from tests.plugins.redfish.client.test_sessions import SESSIONS, _contexts, _crash


async def _restart(h: Any) -> None:
    """SIGKILL the plugin's process and start a fresh one (nothing recorded is handed over)."""
    await _crash(h.plugin)
    h.plugin = RedfishPlugin()
    await h.plugin.start()


async def test_unmarked_sessions_are_deleted_only_when_our_identity_opened_them(
    make_harness: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    async with make_harness(n=1, model="gb200", session_limit=8) as h:
        bmc = h.fleet.bmcs[0]
        bmc.configure(session_context="drop")
        await h.call("std_metrics", bmc, Empty())
        assert len(bmc.sessions) == 1  # ours, in the identity's record: the next holder's to delete
        # another live client on the same account, behind the same address (NAT): indistinguishable
        live = bmc.sessions.create(client="127.0.0.1").id
        await _restart(h)
        with caplog.at_level(logging.WARNING, logger="plugins.redfish"):
            out = await h.call("std_metrics", bmc, Empty(), state={})
            await h.plugin.pool.clients()[0].settled()
        assert out.result.ok, out.result.error
        mine = h.plugin.pool.clients()[0].session_uri.rsplit("/", 1)[1]
        assert set(bmc.sessions.ids()) == {live, mine}
        assert bmc.stats.sessions_deleted == 1
        assert "does not keep the Redfish Session.Context" in caplog.text
        await h.plugin.close()
        bmc.sessions.delete(live)


@pytest.mark.parametrize("exclusive", [False, True])
async def test_a_full_table_of_unmarked_sessions_not_ours_is_left_alone_and_explained(
    make_harness: Callable[..., Any], caplog: pytest.LogCaptureFixture, exclusive: bool
) -> None:
    async with make_harness(n=1, model="gb200", session_limit=4) as h:
        bmc = h.fleet.bmcs[0]
        bmc.configure(session_context="drop")
        for _ in range(4):  # four SIGKILLs, each after a login: each leftover is the next one's
            await h.call("std_metrics", bmc, Empty(), state={})
            await _restart(h)
        assert len(bmc.sessions) == 1  # the last one's, recorded: nothing accumulates
        # three more of our account from our address that no devicectl identity here opened
        others = [bmc.sessions.create(client="127.0.0.1").id for _ in range(3)]
        await _restart(h)
        assert bmc.sessions.is_full()
        h.options["exclusive_account"] = exclusive
        with caplog.at_level(logging.WARNING, logger="plugins.redfish"):
            out = await h.call("std_metrics", bmc, Empty(), state={})
        assert out.result.ok, out.result.error  # our own leftover (recorded) freed the table
        assert set(others) <= set(bmc.sessions.ids()) and len(bmc.sessions) == 4
        assert ("not deleted (exclusive_account cannot prove them ours" in caplog.text) is exclusive
        await _restart(h)
        (ours,) = set(bmc.sessions.ids()) - set(others)
        bmc.sessions.delete(ours)  # expired, say; a fourth session that is not ours takes its place
        others.append(bmc.sessions.create(client="127.0.0.1").id)
        with pytest.raises(SessionLimitError) as caught:
            await h.call("std_metrics", bmc, Empty(), state={})
        message = str(caught.value)
        assert "session table is full: 4 of 4 sessions open" in message
        assert "carry no Context and are not in this controller's record" in message
        assert len(bmc.sessions) == 4 and set(others) <= set(bmc.sessions.ids())
        await h.plugin.close()
        for sid in others:
            bmc.sessions.delete(sid)


async def test_a_bmc_that_refuses_context_is_logged_into_without_it(
    make_harness: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    async with make_harness(n=1, model="gb200", session_limit=8) as h:
        bmc = h.fleet.bmcs[0]
        bmc.configure(session_context="reject")  # 400 PropertyUnknown naming Context
        with caplog.at_level(logging.WARNING, logger="plugins.redfish"):
            out = await h.call("std_metrics", bmc, Empty())
        assert out.result.ok, out.result.error
        assert bmc.stats.responses[400] == 1 and bmc.stats.sessions_created == 1
        assert _contexts(bmc) == [None]
        assert "refuses the Redfish Session.Context devicectl sets at login" in caplog.text
        assert "PropertyUnknown" in caplog.text
        # remembered: a 401 later logs in again without trying Context first
        bmc.sessions.expire_all()
        out = await h.call("std_metrics", bmc, Empty())
        assert out.result.ok, out.result.error
        assert bmc.stats.responses[400] == 1 and bmc.stats.sessions_created == 2
        await h.plugin.close()


async def test_a_recorded_session_uri_now_another_accounts_is_not_deleted(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(n=1, model="gb200", session_limit=8) as h:
        bmc = h.fleet.bmcs[0]
        first = await h.call("std_metrics", bmc, Empty())
        recorded = first.state["sessions"][bmc.url][0]
        assert recorded.startswith(SESSIONS)
        await _restart(h)
        # the BMC reused the id (iDRAC numbers sessions 1, 2, ...): it is now an operator's session
        reused = bmc.sessions.by_id(recorded.rsplit("/", 1)[1])
        assert reused is not None
        reused.username, reused.context = "operator", None
        out = await h.call("std_metrics", bmc, Empty())  # the state still records the URI
        assert out.result.ok, out.result.error
        assert reused.id in bmc.sessions.ids() and bmc.stats.sessions_deleted == 0
        await h.plugin.close()
        bmc.sessions.delete(reused.id)


async def test_a_sweep_with_basic_auth_lends_it_to_no_other_request(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(n=1, model="gb200", session_limit=4) as h:
        bmc = h.fleet.bmcs[0]
        h.plugin.set_client_id("ctl-a")
        for _ in range(4):  # earlier processes' sessions fill the table
            bmc.sessions.create(context="devicectl/ctl-a/0dead0", client="127.0.0.1")
        bmc.configure(latency=0.1)  # the sweep (list, read four, delete four) takes about a second
        first = asyncio.create_task(h.call("std_metrics", bmc, Empty()))
        await asyncio.sleep(0.35)  # the login was refused and the sweep is under way
        others = [h.call("std_metrics", bmc, Empty()) for _ in range(3)]
        outs = await asyncio.gather(first, *others)
        assert all(o.result.ok for o in outs), [o.result.error for o in outs]
        basic = {path for (_, path) in bmc.stats.basic_auth_calls}
        assert basic and all(p.startswith(SESSIONS.rstrip("/")) for p in basic), sorted(basic)
        assert len(bmc.sessions) == 1 and h.plugin.pool.clients()[0].auth_mode == "session"
        await h.plugin.close()


async def test_a_table_that_fills_again_after_the_sweep_says_what_was_deleted(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(n=1, model="gb200") as h:
        bmc = h.fleet.bmcs[0]
        await h.call("std_metrics", bmc, Empty())
        client = h.plugin.pool.clients()[0]
        sweep = Sweep(listed=4, deleted=2, others=Counter({("admin", "10.1.2.3", "other-tool"): 2}))
        text = client._full_table(sweep)
        assert "4 of 4 sessions open" in text and "none of them" not in text
        assert "2 of them earlier processes of this controller's" in text
        assert "filled up again before the next login" in text
        assert "held by 2 of account 'admin' from 10.1.2.3 (Context 'other-tool')" in text
        await h.plugin.close()
