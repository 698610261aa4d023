"""The plugin against the simulator's `bmcweb` profile: body-hash ETags over live readings, task
monitors (202, then 204 once, then 404; `Retry-After: 30`), failing tasks, the DPS proxy's allow-list."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from bmcsim import SimulatedBmc
from bmcsim._bmcweb import DPS_ALLOW_LIST
from plugins.base import Empty, GpuMetricsQuery, Ping, PolicyAction, PolicyChange, ProfileChange
from plugins.redfish._discovery.discovery import DISCOVERY_PATHS, ENVIRONMENT_METRICS
from plugins.redfish._discovery.walk import Walker
from plugins.redfish._wire.errors import PlatformUnsupportedError
from tests.plugins.redfish.client.test_connections import one_gpu
from tests.plugins.redfish.harness import Harness
from tests.plugins.redfish.platforms.test_controls_power_node_manager import policy
from tests.plugins.redfish.platforms.test_gb200 import CHASSIS_EM, PROC_EM, node_policy

TASK = "/redfish/v1/TaskService/Tasks/{id}"
MONITOR = "/redfish/v1/TaskService/TaskMonitors/{id}"
#: the proxy refuses to list sessions: the one try after the first login is a 403
_REFUSED_SESSION_LISTINGS = 1
#: and the processor-module chassis, which discovery reads for their links (dps.md §7): one each
_REFUSED_MODULE_CHASSIS = 2
_REFUSED = _REFUSED_SESSION_LISTINGS + _REFUSED_MODULE_CHASSIS


@pytest.fixture
async def bmcweb(make_harness: Callable[..., Any]) -> AsyncIterator[Harness]:
    """One GB200 BMC behaving like NVIDIA's bmcweb behind the DPS proxy."""
    async with make_harness(n=1, model="gb200") as h:
        h.fleet.bmcs[0].configure(profile="bmcweb", allow_list=DPS_ALLOW_LIST)
        yield h


async def test_etags_are_body_hashes_that_move_with_live_readings(bmcweb: Harness) -> None:
    bmc = bmcweb.fleet.bmcs[0]
    await bmcweb.call("std_metrics", bmc, Empty())
    client = bmcweb.plugin.pool.clients()[0]
    path = PROC_EM.format(id="GPU_0")
    first = await client.get(path, deadline=time.monotonic() + 5)
    await asyncio.sleep(0.01)  # the energy counter moves with time
    second = await client.get(path, deadline=time.monotonic() + 5)
    assert first.etag and second.etag and first.etag != second.etag  # nothing was written
    assert first.body["PowerLimitWatts"]["SetPoint"] == second.body["PowerLimitWatts"]["SetPoint"]


async def test_caps_are_written_and_read_back_on_live_environment_metrics(bmcweb: Harness) -> None:
    bmc = bmcweb.fleet.bmcs[0]
    await bmcweb.call("std_metrics", bmc, Empty())
    bmcweb.reset()
    out = await bmcweb.call(
        "set_policy", bmc, PolicyChange(PolicyAction.SET, node_policy(5000, gpu=2800, cpu=600))
    )
    assert out.result.ok, out.result.error
    assert bmc.state.set_points() == {
        "GPU_0": 700, "GPU_1": 700, "GPU_2": 700, "GPU_3": 700, "CPU_0": 300, "CPU_1": 300,
        "HGX_ProcessorModule_0": 2500, "HGX_ProcessorModule_1": 2500,
    }  # fmt: skip
    assert bmc.stats.responses[412] == 0 and bmc.stats.responses[403] == 0
    # GET (prior), PATCH without If-Match, GET (read-back) per component
    assert bmcweb.calls(bmc) == {
        "GET " + CHASSIS_EM: 4, "GET " + PROC_EM: 12, "PATCH " + CHASSIS_EM: 2, "PATCH " + PROC_EM: 6,
    }  # fmt: skip


async def test_forced_strong_etags_learn_the_body_hash_from_412s(bmcweb: Harness) -> None:
    bmc = bmcweb.fleet.bmcs[0]
    options = {"etag_policy": None}
    await bmcweb.call("std_metrics", bmc, Empty())
    # as a plugin that trusted ETags would: If-Match with the ETag read a moment before
    bmcweb.reset()
    out = await bmcweb.call("update_gpu_policies", bmc, one_gpu(0, 650), options={"etag_policy": "strong"})
    assert out.result.results[0].ok and bmc.state.caps["GPU_0"].set_point == 650
    # 412 (fresh ETag), 412 again with the set point unchanged: a body hash, so no If-Match
    assert bmc.stats.responses[412] == 2
    assert bmcweb.plugin.pool.clients()[0].etag_quirks == {"environment_metrics": "body-hash"}
    bmcweb.reset()
    out = await bmcweb.call("update_gpu_policies", bmc, one_gpu(0, 640), options=options)
    assert out.result.results[0].ok and bmc.stats.responses[412] == 0


async def test_discovery_reads_only_what_the_proxy_allows(bmcweb: Harness) -> None:
    bmc = bmcweb.fleet.bmcs[0]
    out = await bmcweb.call("std_metrics", bmc, Empty())
    assert out.result.ok, out.result.error
    assert bmc.stats.responses[403] == _REFUSED
    assert ("GET", "/redfish/v1/Systems/{id}") not in bmc.stats.calls  # the host's System_0 is never read
    # each chassis the collection links is read for its evidence; the proxy refuses the modules',
    # so their limits are read where DPS documents them, and taken as the BMC serves them
    assert bmc.stats.calls[("GET", "/redfish/v1/Chassis/{id}")] == 4
    evidence = "\n".join(out.state["discovery"]["evidence"])
    assert "chassis refused (the BMC answered 403" in evidence and "HGX_ProcessorModule_0" in evidence
    assert "HGX_ProcessorModule_1/EnvironmentMetrics: read at the path DPS documents" in evidence


async def test_a_failed_task_is_a_failed_write_with_the_bmcs_message(bmcweb: Harness) -> None:
    bmc = bmcweb.fleet.bmcs[0]
    bmc.configure(async_writes=True, task_delay=0.1, task_failure="The GPU rejected the power limit.")
    out = await bmcweb.call("update_gpu_policies", bmc, one_gpu(1, 600))
    gpu = out.result.results[0]
    assert not gpu.ok and bmc.state.caps["GPU_1"].set_point == 1200
    assert "ended Exception (Critical)" in gpu.message and "The GPU rejected the power limit." in gpu.message
    # the Task resource is followed (the DPS proxy does not allow the task monitors)
    assert bmc.stats.calls[("GET", TASK)] >= 1 and ("GET", MONITOR) not in bmc.stats.calls


async def test_tasks_are_polled_within_the_deadline_despite_retry_after_30(bmcweb: Harness) -> None:
    bmc = bmcweb.fleet.bmcs[0]
    bmc.configure(async_writes=True, task_delay=0.2)
    out = await bmcweb.call("update_gpu_policies", bmc, one_gpu(2, 800), timeout=10.0)
    assert out.result.results[0].ok and bmc.state.caps["GPU_2"].set_point == 800
    bmc.configure(task_delay=30.0)
    out = await bmcweb.call("update_gpu_policies", bmc, one_gpu(3, 800), timeout=1.0)
    message = out.result.results[0].message
    assert not out.result.results[0].ok
    assert "had not finished when the request's deadline passed" in message
    assert "the BMC asked for 30 s between polls; polled sooner to fit the deadline" in message


async def test_monitor_without_task_body_answers_204_once_then_404(bmcweb: Harness) -> None:
    bmc = bmcweb.fleet.bmcs[0]
    bmc.configure(allow_list=None, async_writes=True, task_delay=0.05)
    await bmcweb.call("std_metrics", bmc, Empty())
    client = bmcweb.plugin.pool.clients()[0]
    deadline = time.monotonic() + 5
    reply = await client.call(
        "PATCH", PROC_EM.format(id="GPU_0"), {"PowerLimitWatts": {"SetPoint": 900}}, deadline=deadline
    )
    assert reply.status == 202 and reply.getheader("Retry-After") == "30"
    monitor = reply.getheader("Location")
    assert monitor.startswith("/redfish/v1/TaskService/TaskMonitors/")
    await _task_ended(bmc, "1")
    statuses = [
        (await client.call("GET", monitor, deadline=deadline, allow_404=True)).status for _ in range(3)
    ]
    assert statuses == [204, 404, 404]
    assert bmc.state.caps["GPU_0"].set_point == 900


async def test_persistent_caps_option_sets_power_limit_persistency(bmcweb: Harness) -> None:
    bmc = bmcweb.fleet.bmcs[0]
    await bmcweb.call("update_gpu_policies", bmc, one_gpu(0, 700))
    assert bmc.state.caps["GPU_0"].persistent is False
    persistent = {"persistent_caps": True}
    out = await bmcweb.call("update_gpu_policies", bmc, one_gpu(1, 700), options=persistent)
    assert out.result.results[0].ok and bmc.state.caps["GPU_1"].persistent is True
    bmc.state.caps["GPU_1"].persistent = False  # e.g. a firmware update dropped it
    out = await bmcweb.call("update_gpu_policies", bmc, one_gpu(1, 650), options=persistent)
    assert out.result.results[0].ok and bmc.state.caps["GPU_1"].persistent is True


async def test_a_control_with_a_live_sensor_on_bmcweb_learns_the_body_hash_once(
    make_harness: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The simulated reading follows a smooth load curve; at its peaks and troughs it holds still
    # (to three decimals) for a few milliseconds, so two reads that close hash alike and the PATCH
    # is not refused. The sensor here moves a second per read, so every read differs.
    clock = iter(range(1_000_000))
    monkeypatch.setattr("bmcsim._dmtf.now", lambda: 1000.0 + next(clock))
    async with make_harness(n=1, model="dmtf") as h:
        bmc = h.fleet.bmcs[0]
        bmc.configure(profile="bmcweb")
        out = await h.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(node=800)))
        assert out.result.ok, out.result.error
        assert bmc.state.node_cap.set_point == 800 and bmc.stats.responses[412] == 2
        h.reset()
        out = await h.call("set_policy", bmc, PolicyChange(PolicyAction.SET, policy(node=750)))
        assert out.result.ok and bmc.state.node_cap.set_point == 750
        assert bmc.stats.responses[412] == 0  # learned: no If-Match on this BMC's Controls any more


async def _task_ended(bmc: SimulatedBmc, task_id: str) -> None:
    """Wait (bounded) until the simulated BMC's task has ended."""
    for _ in range(1000):  # bounded: 10 s at most
        task = bmc.tasks.get(task_id)
        if task is not None and task.state != "Running":
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"task {task_id} still running after 10 s")


async def test_discovery_never_reads_outside_the_platforms_paths(bmcweb: Harness) -> None:
    bmc = bmcweb.fleet.bmcs[0]
    await bmcweb.call("ping", bmc, Ping())
    client = bmcweb.plugin.pool.clients()[0]
    walker = Walker(client, time.monotonic() + 5, DISCOVERY_PATHS[ENVIRONMENT_METRICS])
    bmcweb.reset()
    with pytest.raises(PlatformUnsupportedError, match="discovery would read /redfish/v1/Systems/System_0"):
        await walker.get("/redfish/v1/Systems/System_0")
    assert (await walker.get("/redfish/v1/Systems/HGX_Baseboard_0")).body["Id"] == "HGX_Baseboard_0"
    assert ("GET", "/redfish/v1/Systems/System_0") not in bmc.stats.calls  # refused before any request
    assert bmc.stats.calls[("GET", "/redfish/v1/Systems/HGX_Baseboard_0")] == 1


async def test_every_request_kind_works_behind_the_dps_proxy(bmcweb: Harness) -> None:
    bmc = bmcweb.fleet.bmcs[0]
    assert (await bmcweb.call("ping", bmc, Ping())).result.ok
    assert (await bmcweb.call("std_metrics", bmc, Empty())).result.ok
    assert (await bmcweb.call("raw_metrics", bmc, Empty())).result.ok
    assert (await bmcweb.call("gpu_metrics", bmc, GpuMetricsQuery(gpu_ids=(0, 3)))).result.ok
    out = await bmcweb.call("set_policy", bmc, PolicyChange(PolicyAction.SET, node_policy(5000, gpu=2800)))
    assert out.result.ok, out.result.error
    out = await bmcweb.call("enable_profiles", bmc, ProfileChange(enable=(5,), verify=False))
    assert out.result.ok, out.result.error
    out = await bmcweb.call("unset_policy", bmc, PolicyChange(PolicyAction.UNSET, None))
    assert out.result.ok, out.result.error
    assert bmc.stats.responses[403] == _REFUSED and bmc.stats.responses[412] == 0
    assert bmc.stats.calls[("GET", "/redfish/v1/SessionService/Sessions")] == _REFUSED_SESSION_LISTINGS
