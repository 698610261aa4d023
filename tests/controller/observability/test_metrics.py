"""Prometheus metrics and /healthz, /readyz over real HTTP while a real controller works a batch."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import policy_pb2 as pp
from tests.controller.conftest import memory_inventory

R = pb.DeviceControllerRequest
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def gpu_caps(device: str, request_id: str, caps: dict[int, float]) -> pb.DeviceControllerRequest:
    policies = pp.GPUPolicies(
        policies=[pp.GPUPolicy(gpu_id=g, power_limit=pp.PowerLimit(watts=w)) for g, w in caps.items()]
    )
    return R(
        device=device,
        request_id=request_id,
        trace_id=f"trace-{request_id}",
        gpu_policies_update=R.GPUPoliciesSetRequest(
            resource_group="rg", gpu_policy_action=R.SET_POLICY, gpu_policies=policies
        ),
    )


async def scrape(port: int, path: str = "/metrics") -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}{path}") as reply:
        return reply.status, await reply.text()


async def samples(port: int) -> Samples:
    status, text = await scrape(port)
    assert status == 200
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(data: Samples, name: str, **labels: str) -> float:
    return data.get((name, tuple(sorted(labels.items()))), 0.0)


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not await check():  # noqa: ASYNC110 (polling over HTTP: no event to wait on)
            await asyncio.sleep(0.02)


async def test_counters_and_gauges_move_during_a_batch(start_controller, sink) -> None:
    h = await start_controller(
        memory_inventory(4, delay=0.3), metrics_listen="127.0.0.1:0", metrics_per_device=True
    )
    port = h.controller.metrics_server.port
    before = await samples(port)
    ids = [f"m-{i}" for i in range(12)]
    sends = asyncio.gather(
        *(
            h.stub.SendDeviceRequest(gpu_caps(f"node{i % 4:03d}", rid, {0: 500 + i}))
            for i, rid in enumerate(ids)
        )
    )
    seen: dict[str, float] = {}

    async def busy() -> bool:  # one scrape shows work running and work waiting on lanes
        now = await samples(port)
        seen["in_flight"] = max(seen.get("in_flight", 0), value(now, "devicectl_in_flight"))
        seen["queue"] = max(seen.get("queue", 0), value(now, "devicectl_queue_depth"))
        return seen["in_flight"] >= 1 and seen["queue"] >= 1

    await until(busy)
    await sends
    await sink.wait_for(set(ids), timeout=15)
    await h.stub.SendDeviceRequest(gpu_caps("node003", "m-last", {0: 611}))  # the last cap of node003
    await sink.wait_for({"m-last"}, timeout=15)

    async def settled() -> bool:
        now = await samples(port)
        return value(now, "devicectl_outbox_backlog") == 0 and value(now, "devicectl_in_flight") == 0

    await until(settled)
    after = await samples(port)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    kind = "gpu_policies_update"
    assert delta("devicectl_requests_total", kind=kind, outcome="ok") == 13
    assert delta("devicectl_requests_accepted_total", kind=kind) == 13
    assert delta("devicectl_ack_duration_seconds_count") == 13
    assert delta("devicectl_queue_wait_seconds_count") == 13
    assert delta("devicectl_run_duration_seconds_count", kind=kind) == 13
    assert delta("devicectl_run_duration_seconds_sum", kind=kind) >= 12 * 0.3
    assert delta("devicectl_delivery_attempts_total", result="ok") == 13
    assert delta("devicectl_delivery_duration_seconds_count") == 13
    assert value(after, "devicectl_queue_depth") == 0
    assert value(after, "devicectl_outbox_oldest_age_seconds") == 0
    assert value(after, "devicectl_journal_up") == 1 and value(after, "devicectl_database_up") == 1
    assert value(after, "devicectl_power_limit_enforced_watts", device="node003", component="gpu/0") == 611
    assert value(after, "devicectl_power_limit_requested_watts", device="node003", component="gpu/0") == 611
    assert value(after, "devicectl_table_rows", table="requests") >= 0  # present from the first scrape
    assert ("devicectl_table_rows", (("table", "outbox"),)) in after
    assert (await scrape(port, "/healthz"))[0] == 200
    assert (await scrape(port, "/readyz"))[0] == 200


async def test_the_grafana_dashboard_uses_only_exported_metrics(start_controller) -> None:
    import json
    import re
    from pathlib import Path

    import plugins.redfish._wire.telemetry  # noqa: F401 (the plugin's metrics, as when it is loaded)

    h = await start_controller(memory_inventory(1), metrics_listen="127.0.0.1:0")
    _, text = await scrape(h.controller.metrics_server.port)
    declared = {re.sub(r"_total$", "", name) for name in re.findall(r"^# TYPE (\S+) ", text, re.M)}
    dashboard = json.loads((Path(__file__).parents[3] / "deploy/grafana/devicectl.json").read_text())
    used = {
        re.sub(r"_(bucket|total|count|sum)$", "", name)
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"devicectl_\w+", target["expr"])
    }
    assert used and used <= declared, f"not exported: {sorted(used - declared)}"


async def test_a_second_controller_with_metrics_in_one_process(start_controller, tmp_path) -> None:
    """Live gauges come from the last controller started; starting two does not fail (each on its
    own database: one process serves a SQLite database, docs/reliability.md)."""
    first = await start_controller(memory_inventory(1), metrics_listen="127.0.0.1:0")
    own = f"sqlite:///{tmp_path}/second.db"
    second = await start_controller(memory_inventory(1), metrics_listen="127.0.0.1:0", database_url=own)
    for h in (first, second):
        status, text = await scrape(h.controller.metrics_server.port)
        assert status == 200 and text.count("# TYPE devicectl_queue_depth ") == 1
    await second.controller.stop(grace=1.0)
    status, _ = await scrape(first.controller.metrics_server.port)
    assert status == 200


async def test_a_metrics_port_in_use_fails_the_start_before_grpc_serves(start_controller) -> None:
    import pytest

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError):
            await start_controller(memory_inventory(1), metrics_listen=f"127.0.0.1:{port}")
