"""Connection behaviour: sessions, auth, TLS, per-BMC concurrency, deadlines, ETags and tasks."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest

from plugins.base import (
    Credentials,
    Empty,
    Endpoint,
    GpuMetricsQuery,
    GpuPoliciesChange,
    GpuPolicy,
    HostEnvironmentError,
    InvalidRequestError,
    Ping,
    PolicyAction,
    PowerLimit,
)
from plugins.redfish import RedfishSettings
from plugins.redfish._client.pool import BmcPool
from plugins.redfish._device.op_bmc import OpBmc
from plugins.redfish._wire.errors import DeadlineExceededError, SessionLimitError
from plugins.redfish._wire.transport import _DEADLINE, deadline_scope
from tests.plugins.redfish.harness import Harness

PROC_EM = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/{id}/EnvironmentMetrics"
SESSIONS = "/redfish/v1/SessionService/Sessions"


def one_gpu(gpu: int, watts: float) -> GpuPoliciesChange:
    return GpuPoliciesChange("rg", PolicyAction.SET, policies=(GpuPolicy(gpu, PowerLimit(watts=watts)),))


async def test_one_session_per_bmc_shared_by_devices_and_deleted_on_close(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(n=3, model=["gb200", "dmtf", "dgx-h100"]) as h:
        for _ in range(3):
            await asyncio.gather(*(h.call("std_metrics", b, Empty()) for b in h.fleet.bmcs))
        # a second device behind the same BMC shares its session and connection slots
        other = h.ctx(h.fleet.bmcs[0])
        other = type(other)(**{**other.__dict__, "device_id": "node0-twin"})
        await h.plugin.std_metrics(other, Empty())
        assert [b.stats.sessions_created for b in h.fleet.bmcs] == [1, 1, 1]
        assert [b.stats.open_sessions for b in h.fleet.bmcs] == [1, 1, 1]

        await h.plugin.forget("node0")  # node0-twin still uses that BMC: keep the session
        assert h.fleet.bmcs[0].stats.open_sessions == 1
        await h.plugin.forget("node0-twin")
        assert h.fleet.bmcs[0].stats.open_sessions == 0
        assert h.fleet.bmcs[0].stats.sessions_deleted == 1

        await h.plugin.close()
        assert [b.stats.open_sessions for b in h.fleet.bmcs] == [0, 0, 0]
        assert [b.stats.sessions_deleted for b in h.fleet.bmcs] == [1, 1, 1]


async def test_expired_session_is_renewed_once_for_reads_and_writes(
    gb200: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("std_metrics", bmc, Empty())
    bmc.expire_sessions()
    gb200.reset()
    out = await gb200.call("gpu_metrics", bmc, GpuMetricsQuery((0,)))
    assert out.result.ok
    # the 401 GET, a new login (service root + POST), the GET again
    assert gb200.calls(bmc) == {"GET " + PROC_EM: 2, "GET /redfish/v1": 1, "POST " + SESSIONS: 1}

    # a session that expires between the GET and the PATCH: the write is sent again once, after login
    send = OpBmc.send

    async def expire_then_send(self: OpBmc, request: Any, etag: str | None, **kw: Any) -> int:
        bmc.expire_sessions()
        return await send(self, request, etag, **kw)  # the receipt's index

    monkeypatch.setattr(OpBmc, "send", expire_then_send)
    gb200.reset()
    out = await gb200.call("update_gpu_policies", bmc, one_gpu(0, 555))
    assert out.result.results[0].ok and out.result.results[0].applied_watts == 555
    assert gb200.calls(bmc) == {
        "GET " + PROC_EM: 2,
        "PATCH " + PROC_EM: 2,
        "GET /redfish/v1": 1,
        "POST " + SESSIONS: 1,
        "DELETE " + SESSIONS + "/{id}": 1,  # the expired session is deleted before logging in again
    }
    assert bmc.stats.open_sessions == 1


async def test_basic_auth_option_opens_no_session(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    gb200.options["auth"] = "basic"
    out = await gb200.call("update_gpu_policies", bmc, one_gpu(2, 700))
    assert out.result.results[0].ok
    assert bmc.stats.sessions_created == 0 and "POST " + SESSIONS not in gb200.calls(bmc)
    await gb200.plugin.close()
    assert bmc.stats.open_sessions == 0


async def test_session_limit_falls_back_to_basic_auth_only_when_allowed(
    gb200: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    bmc = gb200.fleet.bmcs[0]
    bmc.configure(session_limit=0)
    with pytest.raises(SessionLimitError, match=r"session table is full.* set `basic_fallback = true`"):
        await gb200.call("std_metrics", bmc, Empty())
    assert bmc.stats.session_limit_rejections == 1  # not retried: waiting frees nothing
    assert bmc.stats.calls.get(("GET", "/redfish/v1/Systems")) is None  # no Basic requests either
    with caplog.at_level(logging.WARNING, logger="plugins.redfish"):
        out = await gb200.call("std_metrics", bmc, Empty(), options={"basic_fallback": True})
    assert out.result.ok
    assert bmc.stats.session_limit_rejections == 2 and bmc.stats.open_sessions == 0
    assert "session limit reached; using Basic auth (basic_fallback)" in caplog.text


async def test_insecure_switch_works_and_is_logged(gb200: Harness, caplog: pytest.LogCaptureFixture) -> None:
    bmc = gb200.fleet.bmcs[0]
    with caplog.at_level(logging.WARNING, logger="plugins.redfish"):
        out = await gb200.call("ping", bmc, Ping(), ca_bundle=None, options={"insecure": True})
    assert out.result.ok
    assert "TLS certificate verification is OFF" in caplog.text and bmc.url in caplog.text
    assert bmc.password not in caplog.text


async def test_global_ca_bundle_and_missing_bundle_file(make_harness: Callable[..., Any]) -> None:
    async with make_harness(n=1, model="gb200") as h:
        bmc = h.fleet.bmcs[0]
        h.plugin.pool.defaults = RedfishSettings(ca_bundle=str(h.fleet.ca_bundle))
        h.plugin.settings = h.plugin.pool.defaults
        out = await h.call("ping", bmc, Ping(), ca_bundle=None)  # no per-device bundle: the global one
        assert out.result.ok
    async with make_harness(n=1, model="gb200") as h:
        with pytest.raises(HostEnvironmentError, match=r"CA bundle '/nonexistent/ca\.pem' cannot be read"):
            await h.call("ping", h.fleet.bmcs[0], Ping(), ca_bundle="/nonexistent/ca.pem")


async def test_bad_options_are_rejected_with_the_bmc_named(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    with pytest.raises(InvalidRequestError, match="unknown Redfish option"):
        await gb200.call("ping", bmc, Ping(), options={"concurency": 3})
    with pytest.raises(InvalidRequestError, match="auth must be one of"):
        await gb200.call("ping", bmc, Ping(), options={"auth": "kerberos"})


@pytest.mark.parametrize("limit", [2, 3])
async def test_per_bmc_concurrency_limit_is_never_exceeded(
    make_harness: Callable[..., Any], limit: int
) -> None:
    async with make_harness(n=2, model="gb200", latency=0.005) as h:
        busy, calm = h.fleet.bmcs
        opts = {"concurrency": limit}
        await h.call("std_metrics", busy, Empty(), options=opts)
        h.reset()
        # control, metrics and ping at once, all against one BMC
        burst = [h.call("std_metrics", busy, Empty(), options=opts) for _ in range(8)]
        burst += [h.call("ping", busy, Ping(), options=opts) for _ in range(8)]
        burst += [
            h.call("update_gpu_policies", busy, one_gpu(i % 4, 500 + i), options=opts) for i in range(8)
        ]
        burst += [h.call("std_metrics", calm, Empty(), options=opts) for _ in range(2)]
        outs = await asyncio.gather(*burst)
        assert all(getattr(o.result, "ok", True) for o in outs)
        assert busy.stats.max_in_flight == limit  # used, and never above the limit
        assert busy.stats.max_open_connections <= limit
        client = h.plugin.pool.get(busy.url)
        assert client is not None and client.transport.max_in_flight == limit


async def test_deadline_bounds_everything_even_a_hung_bmc(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("std_metrics", bmc, Empty())
    bmc.faults.set("hang", hang_seconds=30)
    started = time.monotonic()
    out = await gb200.call("std_metrics", bmc, Empty(), timeout=0.8, options={"read_timeout": 30})
    elapsed = time.monotonic() - started
    # the 0.8 s deadline, not the 30 s read timeout, ended the call (the bound above it is loose:
    # a busy host may run the call's end late, never 30 s late)
    assert 0.7 < elapsed < 10
    assert not out.result.ok and "deadline" in out.result.error
    assert out.reach_error

    started = time.monotonic()
    ping = await gb200.call("ping", bmc, Ping(retry_count=5), timeout=0.5, options={"read_timeout": 0.2})
    assert time.monotonic() - started < 1.0
    assert not ping.result.ok and ping.reach_error
    bmc.faults.clear()  # a hung BMC cannot delete the session either: let teardown check for leaks


async def test_a_request_waiting_for_a_busy_slot_gives_up_at_its_deadline(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("std_metrics", bmc, Empty(), options={"concurrency": 1})
    client = gb200.plugin.pool.get(bmc.url)
    assert client is not None
    bmc.faults.set("hang", hang_seconds=30)
    hung = asyncio.ensure_future(client.get("/redfish/v1/", deadline=time.monotonic() + 0.6))
    for _ in range(50):  # until the hung GET holds the only slot
        if client.transport.in_flight:
            break
        await asyncio.sleep(0.01)
    assert client.transport.in_flight == 1
    started = time.monotonic()
    with pytest.raises(DeadlineExceededError, match="waiting for a free connection slot"):
        await client.get("/redfish/v1/Chassis", deadline=started + 0.2)
    assert 0.15 < time.monotonic() - started < 0.5
    with pytest.raises(DeadlineExceededError, match="deadline passed before the BMC replied"):
        await hung
    assert client.transport.in_flight == 0 and client.transport.max_in_flight == 1
    bmc.faults.clear()
    # a free slot is taken at once, and a request still gets its reply
    assert (await client.get("/redfish/v1/", deadline=time.monotonic() + 5)).body


async def test_etag_mismatch_412_rereads_and_writes_once_more(
    gb200: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("std_metrics", bmc, Empty())
    gb200.reset()
    send = OpBmc.send
    sent: list[str | None] = []

    async def someone_else_writes_first(self: OpBmc, request: Any, etag: str | None, **kw: Any) -> None:
        sent.append(etag)
        if len(sent) == 1:
            bmc.state.caps["GPU_1"].revision += 1  # another client changed GPU_1: our ETag is stale
        await send(self, request, etag, **kw)

    monkeypatch.setattr(OpBmc, "send", someone_else_writes_first)
    # EnvironmentMetrics is written without If-Match by default (body-hash ETags): force strong
    out = await gb200.call("update_gpu_policies", bmc, one_gpu(1, 480), options={"etag_policy": "strong"})
    assert out.result.results[0].ok and out.result.results[0].applied_watts == 480
    assert len(sent) == 2 and sent[0] != sent[1] and all(sent)
    assert bmc.stats.responses[412] == 1
    assert gb200.calls(bmc) == {"GET " + PROC_EM: 3, "PATCH " + PROC_EM: 2}


async def test_202_accepted_is_followed_through_the_task_monitor(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    bmc.configure(async_writes=True, task_delay=0.05)
    await gb200.call("std_metrics", bmc, Empty())
    gb200.reset()
    out = await gb200.call("update_gpu_policies", bmc, one_gpu(3, 720))
    assert out.result.results[0].ok and out.result.results[0].applied_watts == 720
    assert bmc.stats.tasks_created == 1
    calls = gb200.calls(bmc)
    assert calls["PATCH " + PROC_EM] == 1 and calls["GET /redfish/v1/TaskService/Tasks/{id}"] >= 1


async def test_202_task_past_the_deadline_is_a_timeout(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    bmc.configure(async_writes=True, task_delay=5)
    await gb200.call("std_metrics", bmc, Empty())
    out = await gb200.call("update_gpu_policies", bmc, one_gpu(3, 720), timeout=1.0)
    result = out.result.results[0]
    assert not result.ok and "had not finished when the request's deadline passed" in result.message


@pytest.mark.parametrize(("keepalive_timeout", "reconnects"), [(300.0, False), (0.2, True)])
async def test_idle_connections_are_kept_for_keepalive_timeout(
    make_harness: Callable[..., Any], keepalive_timeout: float, reconnects: bool
) -> None:
    settings = RedfishSettings(keepalive_timeout=keepalive_timeout)
    async with make_harness(settings, n=1, model="gb200", latency=0.0) as h:
        bmc = h.fleet.bmcs[0]
        opts = {"concurrency": 1}
        await h.call("std_metrics", bmc, Empty(), options=opts)
        opened = bmc.stats.connections_opened
        assert opened >= 1
        await asyncio.sleep(0.6)  # idle: past the short timeout, far below the default
        await h.call("std_metrics", bmc, Empty(), options=opts)
        assert (bmc.stats.connections_opened > opened) is reconnects


def test_keepalive_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="keepalive_timeout must be positive"):
        RedfishSettings(keepalive_timeout=0)


def test_merged_settings_are_kept_until_the_endpoint_or_the_defaults_change() -> None:
    pool = BmcPool()
    defaults = RedfishSettings()
    endpoint = Endpoint(
        url="https://10.0.0.1", credentials=Credentials("u", "p1"), options={"concurrency": 3}
    )
    first = pool.settings_for(endpoint, defaults)
    same = Endpoint(url="https://10.0.0.1", credentials=Credentials("u", "p1"), options={"concurrency": 3})
    assert pool.settings_for(same, defaults) is first  # an equal endpoint: no second merge
    rotated = pool.settings_for(
        Endpoint(url="https://10.0.0.1", credentials=Credentials("u", "p2"), options={"concurrency": 3}),
        defaults,
    )
    assert rotated.password == "p2" and rotated.concurrency == 3
    retuned = pool.settings_for(
        Endpoint(url="https://10.0.0.1", credentials=Credentials("u", "p2"), options={"concurrency": 5}),
        defaults,
    )
    assert retuned.concurrency == 5
    slower = RedfishSettings(read_timeout=60.0)
    assert pool.settings_for(same, slower).read_timeout == 60.0


async def test_a_logged_in_call_is_bounded_by_its_own_deadline_and_leaves_none_set(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("std_metrics", bmc, Empty())
    client = gb200.plugin.pool.get(bmc.url)
    assert client is not None and client.auth_mode == "session"
    bmc.faults.set("hang", hang_seconds=30)
    started = time.monotonic()
    with deadline_scope(started + 30):  # an enclosing block's deadline never lengthens a call's own
        with pytest.raises(DeadlineExceededError, match="deadline passed before the BMC replied"):
            await client.get("/redfish/v1/Chassis", deadline=started + 0.2)
        assert _DEADLINE.get() == started + 30
    assert time.monotonic() - started < 5
    assert _DEADLINE.get() is None
    with deadline_scope(None):  # None: the enclosing block's stays (here: none)
        assert _DEADLINE.get() is None
        with deadline_scope(started + 1), deadline_scope(None):
            assert _DEADLINE.get() == started + 1
    bmc.faults.clear()
