"""A process SIGKILLed between its Redfish login and the first use of the session: the next
process deletes that session (real child processes, real HTTPS simulator)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from bmcsim import SimulatedBmc
from plugins.base import Empty
from plugins.redfish import RedfishPlugin
from tests.serve_process import ROOT

CLIENT = "ctl-crash"


def _markers(bmc: SimulatedBmc) -> set[str]:
    return {s.context or "" for s in map(bmc.sessions.by_id, bmc.sessions.ids()) if s is not None}


async def _kill_right_after_login(bmc: SimulatedBmc, ca_bundle: str) -> str:
    """Start a plugin process and SIGKILL it as soon as its session exists; returns its marker."""
    before = _markers(bmc)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.plugins.redfish.client.session_child",
            CLIENT,
            bmc.url,
            ca_bundle,
            bmc.model,
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None
    proc.stdin.write(bmc.password.encode() + b"\n")
    proc.stdin.close()
    deadline = time.monotonic() + 60
    try:
        while not (new := _markers(bmc) - before):
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "the child never logged in"
            await asyncio.sleep(0.005)  # the BMC runs in this loop: each poll lets it serve
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    (marker,) = new
    assert marker.startswith(f"devicectl/{CLIENT}/")
    return marker


async def test_sessions_of_processes_killed_right_after_login_are_deleted_by_the_next(
    make_harness: Callable[..., Any],
) -> None:
    # 0.3 s per request: a killed child has logged in and done nothing else with its session
    async with make_harness(n=1, model="gb200", session_limit=4, latency=0.3) as h:
        bmc = h.fleet.bmcs[0]
        foreign = bmc.sessions.create(context="another-tool", client="127.0.0.1").id
        killed = [await _kill_right_after_login(bmc, str(h.fleet.ca_bundle)) for _ in range(4)]
        assert len(set(killed)) == 4
        # the fourth child found the table full of three leftovers and another tool's session: its
        # login was refused, it deleted the leftovers (marked, never recorded anywhere) and got in
        assert bmc.stats.session_limit_rejections >= 1
        assert foreign in bmc.sessions.ids() and len(bmc.sessions) <= 4
        bmc.configure(latency=0.0)
        plugin = RedfishPlugin()
        plugin.set_client_id(CLIENT)
        await plugin.start()
        try:
            out = await plugin.std_metrics(h.ctx(bmc, state={}), Empty())  # no state: nothing recorded
            assert out.result.ok, out.result.error
            await plugin.pool.clients()[0].settled()  # the sweep after the login runs apart
            assert _markers(bmc) == {"another-tool", f"devicectl/{CLIENT}/{plugin.pool.boot}"}
            assert len(bmc.sessions) == 2
        finally:
            await plugin.close()
        assert bmc.sessions.ids() == [foreign]
        bmc.sessions.delete(foreign)
