"""A re-login refused with SessionLimitExceeded must not stop the next login (reliability drill row)."""

from __future__ import annotations

from typing import Any

import pytest

from plugins.base import Empty, GpuMetricsQuery, GpuPoliciesChange, GpuPolicy, PolicyAction, PowerLimit
from plugins.redfish._device.op_bmc import OpBmc
from tests.plugins.redfish.harness import Harness


def _one_gpu(watts: float) -> GpuPoliciesChange:
    return GpuPoliciesChange("rg", PolicyAction.SET, policies=(GpuPolicy(0, PowerLimit(watts=watts)),))


async def _refused_relogin(h: Harness) -> None:
    """Open a session, then expire it while the BMC's session table admits nobody."""
    bmc = h.fleet.bmcs[0]
    assert (await h.call("std_metrics", bmc, Empty())).result.ok
    bmc.configure(session_limit=0)
    bmc.expire_sessions()


async def test_read_after_refused_relogin_logs_in_again_with_a_session(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await _refused_relogin(gb200)
    # the read's 401 is re-logged-in inside the Redfish library, and that login is refused: the
    # precise error, on this call and the next, never 401 NoValidSession
    for _ in range(2):
        out = await gb200.call("gpu_metrics", bmc, GpuMetricsQuery((0,)))
        assert not out.result.ok and "session table is full" in out.result.error, out.result
    bmc.configure(session_limit=4)
    created = bmc.stats.sessions_created
    out = await gb200.call("gpu_metrics", bmc, GpuMetricsQuery((0,)))
    assert out.result.ok, out.result
    assert bmc.stats.sessions_created == created + 1 and bmc.stats.open_sessions == 1
    assert gb200.plugin.pool.clients()[0].auth_mode == "session"  # a session, not Basic
    out = await gb200.call("gpu_metrics", bmc, GpuMetricsQuery((0,)))  # and it is kept
    assert out.result.ok and bmc.stats.sessions_created == created + 1


async def test_write_after_refused_relogin_logs_in_again_with_a_session(
    gb200: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    bmc = gb200.fleet.bmcs[0]
    assert (await gb200.call("std_metrics", bmc, Empty())).result.ok
    send = OpBmc.send

    async def table_full_before_the_write(self: OpBmc, request: Any, etag: str | None, **kw: Any) -> None:
        # the session expires between the read and the PATCH, and no new one is admitted: the
        # PATCH's 401 makes this client (not the library) log in again, and that login is refused
        bmc.configure(session_limit=0)
        bmc.expire_sessions()
        await send(self, request, etag, **kw)

    monkeypatch.setattr(OpBmc, "send", table_full_before_the_write)
    out = await gb200.call("update_gpu_policies", bmc, _one_gpu(600))
    assert not out.result.results[0].ok and "session table is full" in out.result.results[0].message
    monkeypatch.setattr(OpBmc, "send", send)
    out = await gb200.call("update_gpu_policies", bmc, _one_gpu(600))  # still full: still precise
    assert not out.result.results[0].ok and "session table is full" in out.result.results[0].message
    bmc.configure(session_limit=4)
    out = await gb200.call("update_gpu_policies", bmc, _one_gpu(610))
    assert out.result.results[0].ok and out.result.results[0].applied_watts == 610, out.result
    assert bmc.stats.open_sessions == 1
    assert gb200.plugin.pool.clients()[0].auth_mode == "session"
