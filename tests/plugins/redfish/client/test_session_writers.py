"""Two live processes on one host, one BMC, one account and one client address (the same client id,
as `serve` beside `plugin serve`, or two replicas with one host name): neither ever deletes the
other's Redfish session, whether the BMC keeps `Session.Context` or drops it (`exclusive_account`
or not). Real child processes, real HTTPS simulator."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from bmcsim import SimulatedBmc
from plugins.base import Empty
from plugins.redfish import RedfishPlugin
from tests.serve_process import ROOT

CLIENT = "ctl-same"
CASES = [
    pytest.param("keep", {}, id="context-kept"),
    pytest.param("drop", {}, id="context-dropped"),
    pytest.param("drop", {"exclusive_account": True}, id="context-dropped-exclusive"),
]


@asynccontextmanager
async def _child(bmc: SimulatedBmc, ca_bundle: str, options: dict[str, Any]) -> AsyncIterator[str]:
    """A live plugin process with our client id, logged in and swept; yields its session's id."""
    before = set(bmc.sessions.ids())
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.plugins.redfish.client.session_child",
        CLIENT,
        bmc.url,
        ca_bundle,
        bmc.model,
        json.dumps(options),
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(bmc.password.encode() + b"\n")
    await proc.stdin.drain()
    proc.stdin.close()
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)  # the BMC serves meanwhile
        assert line.strip() == b"ready", line
        (session,) = set(bmc.sessions.ids()) - before
        yield session
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


async def _plugin(options: dict[str, Any]) -> RedfishPlugin:
    plugin = RedfishPlugin()
    plugin.set_client_id(CLIENT)
    await plugin.start()
    return plugin


@pytest.mark.parametrize(("context", "options"), CASES)
async def test_a_live_process_with_our_client_id_keeps_its_session_and_we_keep_ours(
    make_harness: Callable[..., Any], context: str, options: dict[str, Any]
) -> None:
    async with make_harness(n=1, model="gb200", session_limit=8) as h:
        bmc = h.fleet.bmcs[0]
        bmc.configure(session_context=context)
        bundle = str(h.fleet.ca_bundle)
        # the child logs in first, we log in and sweep after it
        async with _child(bmc, bundle, options) as theirs:
            plugin = await _plugin(options)
            try:
                out = await plugin.std_metrics(h.ctx(bmc, state={}, options=options), Empty())
                assert out.result.ok, out.result.error
                client = plugin.pool.clients()[0]
                await client.settled()
                assert plugin.pool.identity is not None and plugin.pool.identity.client_id != CLIENT
                assert theirs in bmc.sessions.ids() and bmc.stats.sessions_deleted == 0
                ours = client.session_uri.rsplit("/", 1)[1]
                # and the other way round: a second child logs in and sweeps while we are live
                async with _child(bmc, bundle, options) as second:
                    assert {ours, theirs, second} <= set(bmc.sessions.ids())
                    assert bmc.stats.sessions_deleted == 0
                    out = await plugin.std_metrics(h.ctx(bmc, state={}, options=options), Empty())
                    assert out.result.ok, out.result.error
                    assert bmc.stats.sessions_created == 3  # ours was never taken from us
            finally:
                await plugin.close()
        # both children were killed: the next process with the client id takes the identity of
        # one of them back and deletes what it left (by marker or by its record); no other
        left = set(bmc.sessions.ids())
        assert theirs in left and second in left
        plugin = await _plugin(options)
        try:
            out = await plugin.std_metrics(h.ctx(bmc, state={}, options=options), Empty())
            assert out.result.ok, out.result.error
            await plugin.pool.clients()[0].settled()
            assert plugin.pool.identity is not None and plugin.pool.identity.client_id == CLIENT
            assert theirs not in bmc.sessions.ids()  # the first child held CLIENT itself
        finally:
            await plugin.close()
        for sid in bmc.sessions.ids():
            bmc.sessions.delete(sid)
