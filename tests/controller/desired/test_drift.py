"""Desired state and drift against real faults: the NVML fake's driver reload and the simulator's
silent revert, through a running controller (real gRPC, real journal, real sink)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from bmcsim import SimulatorFleet
from controller import translate
from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller.api.validate import validate_request
from controller.delivery.sink import TopologySink
from controller.desired.limits import INTERNAL_PREFIX
from controller.inventory import DeviceEntry, load_inventory
from controller.store import DesiredLimit
from plugins.base import InvalidRequestError, RequestKind
from plugins.nvml.testing import FakeNode
from tests.controller.api.test_service import gpu_caps
from tests.controller.desired.test_receipts import gpu_policy

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[3]


async def devicectl(*args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "controller", *args,
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "250"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out = (await asyncio.wait_for(proc.communicate(), 60))[0].decode()
    assert proc.returncode == 0, out
    return out


async def eventually(probe: Callable[[], Awaitable[T | None]], what: str, timeout: float = 30.0) -> T:
    """Poll until `probe` returns something truthy (a bounded wait for an event, not a timing)."""
    async with asyncio.timeout(timeout):
        while True:
            found = await probe()
            if found:
                return found
            await asyncio.sleep(0.05)
    raise AssertionError(what)  # pragma: no cover (the timeout raises first)


def by_component(rows: list[DesiredLimit]) -> dict[str, DesiredLimit]:
    return {r.component: r for r in rows}


async def _nvml_controller(
    node: FakeNode, sink: TopologySink, start_controller: Any, **settings: Any
) -> tuple[Any, str]:
    device = "gpu-node-1"
    for gpu in node.fake.gpus:
        gpu.persistence = False  # so a driver reload drops the limits (nvml.md §2.3)
    h = await start_controller({device: DeviceEntry(device, "nvml", {})}, drift_interval=0.1, **settings)
    msg = translate.request_to_proto(
        RequestKind.TOPOLOGY_ACTIVATE, gpu_policy(1600), device=device, request_id="set-1"
    )
    await h.stub.SendDeviceRequest(msg)
    await sink.wait_for({"set-1"}, timeout=30)
    assert [node.limit_w(i) for i in range(4)] == [400.0] * 4
    return h, device


@pytest.mark.parametrize("mode", ["report", "reapply"])
async def test_nvml_driver_reload_is_detected_and_reapplied_only_under_reapply(
    mode: str, h100x4: FakeNode, sink: TopologySink, start_controller: Any
) -> None:
    h, device = await _nvml_controller(
        h100x4, sink, start_controller, drift_reapply=device_glob() if mode == "reapply" else ""
    )
    store = h.controller.store
    desired = by_component(await store.desired_for(device))
    assert {c: (d.watts, d.request_id) for c, d in desired.items()} == {
        f"gpu/{i}": (400.0, "set-1") for i in range(4)
    }
    # a check finds everything in force
    await eventually(
        lambda: _all(store, device, lambda d: d.checked_at is not None and d.drift_at is None), "first check"
    )
    h100x4.fake.unload_driver()  # every limit falls back to the default 700 W
    rows = await eventually(lambda: _all(store, device, lambda d: d.drift_at is not None), "drift found")
    assert all("desired 400 W (set by set-1), enforced 700 W" == d.drift_detail for d in rows)
    audit = [a for a in await store.list_audit(device) if a.kind == "drift"]
    assert audit and set(audit[-1].summary["drift"]) == {f"gpu/{i}" for i in range(4)}
    if mode == "reapply":
        await eventually(lambda: _limits_are(h100x4, 400.0), "re-applied")
        internal = await eventually(lambda: _finished_internal(h, device), "the re-application journaled")
        assert len(internal) == 1 and internal[0].outcome == "ok" and internal[0].kind == "topology_activate"
        assert len(internal[0].writes) == 4  # its receipts: the four setter calls
        assert audit[-1].summary["action"] == f"reapply: {internal[0].request_id}"
        assert internal[0].request_id not in sink.unique()  # answered to no one
    else:
        # two more full checks: still only reported, never written
        seen = len(h100x4.fake.writes())
        first = audit[-1].at
        await eventually(lambda: _drift_audits_after(store, device, first, 2), "more checks")
        assert len(h100x4.fake.writes()) == seen and h100x4.limit_w(0) == 700.0
        listed = await h.admin.ListRequests(apb.ListRequestsRequest(device=device))
        assert [r.request_id for r in listed.requests] == ["set-1"]
        # devices show: desired vs enforced per component, with the last drift
        record = await h.admin.GetDevice(apb.GetDeviceRequest(id=device))
        assert [(d.component, d.desired_watts, d.enforced_watts, d.request_id) for d in record.desired] == [
            (f"gpu/{i}", 400.0, 700.0, "set-1") for i in range(4)
        ]
        assert all(d.HasField("drift_at") and "enforced 700 W" in d.drift_detail for d in record.desired)
        out = await devicectl("--server", f"127.0.0.1:{h.controller.port}", "devices", "show", device)
        assert "desired vs enforced" in out and "gpu/3" in out and "700 W" in out and "set-1" in out
    assert set(sink.unique()) == {"set-1"}


async def _finished_internal(h: Any, device: str) -> list[Any] | None:
    """The device's internal requests once all of them are finished (the writes come before that)."""
    listed = await h.admin.ListRequests(apb.ListRequestsRequest(device=device))
    internal = [r for r in listed.requests if r.request_id.startswith(INTERNAL_PREFIX)]
    return internal if internal and all(r.outcome for r in internal) else None


def device_glob() -> str:
    return "gpu-node-*"


async def _all(store: Any, device: str, test: Callable[[DesiredLimit], bool]) -> list[DesiredLimit] | None:
    rows = await store.desired_for(device)
    return rows if rows and all(test(r) for r in rows) else None


async def _limits_are(node: FakeNode, watts: float) -> bool:
    return all(node.limit_w(i) == watts for i in range(4))


async def _drift_audits_after(store: Any, device: str, after: Any, n: int) -> bool:
    return sum(1 for a in await store.list_audit(device) if a.kind == "drift" and a.at > after) >= n


async def test_redfish_silent_revert_is_fought_only_up_to_the_hourly_limit(
    tmp_path: Path, sink: TopologySink, start_controller: Any
) -> None:
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        secrets = fleet.write_inventory(tmp_path / "inventory.toml", tmp_path / "secrets")
        h = await start_controller(
            load_inventory(tmp_path / "inventory.toml"),
            secrets_dir=str(secrets),
            drift_interval=0.1,
            drift_reapply="node*",
            drift_max_reapply_per_hour=2,
        )
        bmc = fleet.bmcs[0]
        bmc.faults.revert_after = 0.3  # firmware that silently drops every out-of-band set point
        await h.stub.SendDeviceRequest(gpu_caps("node001", "caps-1", {0: 500, 1: 450}))
        await sink.wait_for({"caps-1"}, timeout=30)
        store = h.controller.store
        desired = by_component(await store.desired_for("node001"))
        assert {c: d.watts for c, d in desired.items()} == {"gpu/0": 500.0, "gpu/1": 450.0}

        async def fought_then_reported() -> list[Any] | None:
            audit = [a for a in await store.list_audit("node001") if a.kind == "drift"]
            actions = [a.summary["action"] for a in sorted(audit, key=lambda a: a.at)]
            reported = [a for a in actions if "re-applications in the last hour" in a]
            return actions if reported else None

        actions = await eventually(fought_then_reported, "the re-application limit", timeout=60)
        assert sum(1 for a in actions if a.startswith("reapply: ")) == 2
        internal = await eventually(lambda: _finished_internal(h, "node001"), "re-applications journaled")
        assert len(internal) == 2 and all(r.outcome == "ok" and len(r.writes) == 2 for r in internal)
        rows = by_component(await store.desired_for("node001"))
        assert rows["gpu/0"].drift_detail.endswith("enforced 1200 W")
        assert set(sink.unique()) == {"caps-1"}
        await h.controller.stop()


def test_callers_cannot_use_the_internal_request_prefix() -> None:
    msg = gpu_caps("node001", INTERNAL_PREFIX + "x", {0: 500})
    with pytest.raises(InvalidRequestError, match="reserved"):
        validate_request(msg)
