"""Probes that do not cascade: liveness (HTTP /healthz, gRPC `liveness`) says the process works
whatever its database or topology service do; readiness (/readyz, the DeviceController health
service) says it can accept: it fails while the journal cannot commit, never for a delivery backlog.
"""

from __future__ import annotations

import sqlite3

from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.ports import free_port as _closed_port  # nothing listens there
from controller.observability.health import LIVENESS
from tests.controller.conftest import Harness, memory_inventory
from tests.controller.observability.test_metrics import gpu_caps, samples, scrape, until, value
from tests.faults import DatabaseOutage

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def grpc_health(h: Harness, service: str) -> int:
    reply = await health_pb2_grpc.HealthStub(h.channel).Check(
        health_pb2.HealthCheckRequest(service=service), timeout=5
    )
    return int(reply.status)


async def test_a_topology_outage_keeps_the_pod_ready_and_alive(start_controller) -> None:
    h = await start_controller(
        memory_inventory(2),
        metrics_listen="127.0.0.1:0",
        callback=f"127.0.0.1:{_closed_port()}",  # nobody listens: responses wait in the outbox
        ready_max_backlog_age=0.5,
    )
    port = h.controller.metrics_server.port
    await h.stub.SendDeviceRequest(gpu_caps("node000", "b-1", {0: 400}))
    await h.stub.SendDeviceRequest(gpu_caps("node001", "b-2", {0: 400}))

    async def old_backlog() -> bool:
        now = await samples(port)
        return (
            value(now, "devicectl_outbox_backlog") == 2
            and value(now, "devicectl_outbox_oldest_age_seconds") > 1.0
        )

    await until(old_backlog)
    now = await samples(port)
    assert value(now, "devicectl_delivery_receiver_up") == 0  # the alert's signal, not the probe's
    assert await scrape(port, "/readyz") == (200, "ok\n")
    assert await scrape(port, "/healthz") == (200, "ok\n")
    assert await grpc_health(h, "devicecontroller.v1.DeviceController") == SERVING


async def test_a_database_outage_makes_the_pod_unready_not_dead(start_controller, db_url) -> None:
    h = await start_controller(
        memory_inventory(1), metrics_listen="127.0.0.1:0", health_interval=0.2, lease_ttl=1.5
    )
    port = h.controller.metrics_server.port
    assert await scrape(port, "/readyz") == (200, "ok\n")
    assert await grpc_health(h, LIVENESS) == SERVING
    outage = DatabaseOutage(db_url)
    outage.start()
    try:

        async def unready() -> bool:
            status, text = await scrape(port, "/readyz")
            return status == 503 and ("database unreachable" in text or "journal cannot commit" in text)

        await until(unready, timeout=40)

        async def journal_down() -> bool:
            return await grpc_health(h, "devicecontroller.v1.DeviceController") == NOT_SERVING

        await until(journal_down, timeout=40)
        # alive throughout: a restart would not bring the database back
        assert await scrape(port, "/healthz") == (200, "ok\n")
        assert await grpc_health(h, LIVENESS) == SERVING
    finally:
        outage.end()

    async def ready() -> bool:
        return (await scrape(port, "/readyz"))[0] == 200

    await until(ready, timeout=40)
    assert await grpc_health(h, LIVENESS) == SERVING


async def test_a_failure_without_a_stall_makes_the_process_unready_before_its_probe_returns(
    start_controller, tmp_path
) -> None:
    """The journal's first failure comes without a stall before it (here `journal_stall_seconds` is
    far off; in a real outage a write can fail at once, as one did between `DatabaseOutage`'s table
    renames and its lock), while a lock held elsewhere makes every write wait SQLite's busy timeout
    (10 s), the health's probe among them. NOT_SERVING is said when the failure is seen: it used to
    wait for the probe, queued behind the failing writes, so a CI run saw SERVING for 40 s into the
    outage."""
    h = await start_controller(
        memory_inventory(1), health_interval=0.2, lease_ttl=1.5, journal_stall_seconds=600.0
    )
    service = "devicecontroller.v1.DeviceController"
    assert await grpc_health(h, service) == SERVING
    lock = sqlite3.connect(str(tmp_path / "devicectl.db"), isolation_level=None, timeout=30)
    lock.execute("BEGIN EXCLUSIVE")  # every commit of the controller waits, then fails "locked"
    try:
        store = h.controller.store

        async def failed() -> bool:
            return store.write_failure is not None

        await until(failed, timeout=60)  # the lease renewals' batch, after the busy timeout
        failure = store.write_failure
        assert failure is not None and not failure.stalled

        async def unready() -> bool:
            return await grpc_health(h, service) == NOT_SERVING

        # well within the busy timeout any probe behind the lock would wait first
        await until(unready, timeout=5)
        assert store.write_failure is not None  # still down: the lock is held
    finally:
        lock.execute("COMMIT")
        lock.close()

    async def ready() -> bool:
        return await grpc_health(h, service) == SERVING

    await until(ready, timeout=60)
