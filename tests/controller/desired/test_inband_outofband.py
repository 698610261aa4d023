"""A node served both ways: its GPUs in-band (the real pynvml module, the NVML fake beneath it) and
its BMC out-of-band (the real HTTPS simulator), linked in the inventory by `bmc`. The drift check
reads both paths: each path off the desired value is a finding, and so is the two paths disagreeing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from bmcsim import SimulatorFleet
from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller.delivery.sink import TopologySink
from controller.desired.limits import INTERNAL_PREFIX
from controller.inventory import load_inventory
from controller.store import AuditView, DesiredLimit, Store
from plugins.nvml.testing import FakeNode
from tests.controller.api.test_service import gpu_caps
from tests.controller.desired.test_drift import _all, _finished_internal, devicectl, eventually

BMC, GPUS = "node001", "node001-gpus"


@dataclass
class Node:
    h: Any
    store: Store
    fleet: SimulatorFleet
    #: when both paths were last seen agreeing with the desired values (findings after it are news)
    clean_at: datetime


@pytest.fixture
async def both_ways(
    tmp_path: Path, h100x4: FakeNode, sink: TopologySink, start_controller: Any
) -> AsyncIterator[Any]:
    """`await both_ways(revert_after=None, **settings)`: one node, caps of 500 W on GPUs 0 and 1
    set through both devices, each path checked once with nothing off."""
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:

        async def start(revert_after: float | None = None, **settings: Any) -> Node:
            inventory = tmp_path / "inventory.toml"
            secrets = fleet.write_inventory(inventory, tmp_path / "secrets")
            with inventory.open("a") as fh:
                fh.write(f'\n[[device]]\nid = "{GPUS}"\nplugin = "nvml"\nbmc = "{BMC}"\n')
            for gpu in h100x4.fake.gpus:
                gpu.persistence = False  # so a driver reload drops the limits
            h = await start_controller(
                load_inventory(inventory), secrets_dir=str(secrets), drift_interval=0.1, **settings
            )
            await h.stub.SendDeviceRequest(gpu_caps(GPUS, "inb-1", {0: 500, 1: 500}))
            await sink.wait_for({"inb-1"}, timeout=30)
            store = h.controller.store
            if revert_after is None:  # both paths agree with their desired values first
                await h.stub.SendDeviceRequest(gpu_caps(BMC, "oob-1", {0: 500, 1: 500}))
                await sink.wait_for({"oob-1"}, timeout=30)
                # (a check between the two requests saw the BMC still at its default: drift then)
                clean_after = datetime.now(UTC)
                for device in (BMC, GPUS):
                    await eventually(_clean_since(store, device, clean_after), f"a clean check of {device}")
            else:
                fleet.bmcs[0].faults.revert_after = revert_after  # firmware dropping its set points
                await h.stub.SendDeviceRequest(gpu_caps(BMC, "oob-1", {0: 500, 1: 500}))
                await sink.wait_for({"oob-1"}, timeout=30)
            return Node(h, store, fleet, datetime.now(UTC))

        yield start


def _clean_since(store: Store, device: str, after: datetime) -> Callable[[], Awaitable[Any]]:
    """A probe: every component of the device checked after `after`, the last check finding nothing."""

    def clean(r: DesiredLimit) -> bool:
        return r.checked_at is not None and r.checked_at > after and (r.drift_at or after) < r.checked_at

    return lambda: _all(store, device, clean)


async def drift_audits(store: Store, device: str, after: datetime | None = None) -> list[AuditView]:
    audit = (
        a for a in await store.list_audit(device) if a.kind == "drift" and (after is None or a.at > after)
    )
    return sorted(audit, key=lambda a: a.at)


def drift_count(path: str, action: str) -> float:
    labels = {"component": "gpu", "path": path, "action": action}
    return REGISTRY.get_sample_value("devicectl_drift_total", labels) or 0.0


def disagreements() -> float:
    return REGISTRY.get_sample_value("devicectl_drift_paths_disagree_total", {"component": "gpu"}) or 0.0


async def test_silent_revert_is_out_of_band_drift_reapplied_through_the_bmc(
    both_ways: Any, h100x4: FakeNode, sink: TopologySink
) -> None:
    before = drift_count("outofband", "reapply"), disagreements()
    node = await both_ways(revert_after=0.3, drift_reapply="node001*", drift_max_reapply_per_hour=1)
    store = node.store

    async def capped() -> list[AuditView] | None:
        audit = await drift_audits(store, BMC)
        return (
            audit if any("re-applications in the last hour" in a.summary["action"] for a in audit) else None
        )

    audit = await eventually(capped, "re-applied once, then only reported", timeout=60)
    first = audit[0]
    both = {f"gpu/{i}": ["outofband", "disagree"] for i in (0, 1)}
    # the firmware drops each set point 0.3 s after its own write, so on a loaded machine the first
    # check may come between GPU 0's revert and GPU 1's: it sees GPU 0 alone, a later one both
    assert "gpu/0" in first.summary["findings"], first.summary
    assert all(both[k] == v for k, v in first.summary["findings"].items()), first.summary
    assert any(a.summary["findings"] == both for a in audit), [a.summary for a in audit]
    assert first.summary["paths"]["gpu/0"] == {"inband": 500.0, "outofband": 1200.0}
    assert first.summary["drift"]["gpu/0"] == (
        "out-of-band: desired 500 W (set by oob-1), enforced 1200 W; "
        "in-band 500 W, out-of-band 1200 W (the paths disagree)"
    )
    reapplied = [a for a in audit if a.summary["action"].startswith("reapply: ")]
    assert len(reapplied) == 1 and reapplied[0].request_id.startswith(INTERNAL_PREFIX)
    internal = await eventually(lambda: _finished_internal(node.h, BMC), "the re-application journaled")
    assert [(r.request_id, r.outcome, len(r.writes)) for r in internal] == [
        (reapplied[0].request_id, "ok", 2)
    ]
    assert drift_count("outofband", "reapply") > before[0] and disagreements() > before[1]

    # the in-band device saw the same drift through the BMC, and does not re-send its NVML request:
    # that would write the in-band path, which holds its desired value
    # as above: on a loaded machine its first check may come between GPU 0's revert and GPU 1's
    async def both_seen() -> list[AuditView] | None:
        audit = await drift_audits(store, GPUS)
        return audit if any("gpu/1" in a.summary["findings"] for a in audit) else None

    gpus_audit = await eventually(both_seen, "the in-band device's finding of both GPUs", timeout=60)
    assert all(a.summary["action"] == f"report: only out-of-band drifted (through {BMC})" for a in gpus_audit)
    assert all(
        a.summary["findings"].get(f"gpu/{i}", both[f"gpu/{i}"]) == both[f"gpu/{i}"]
        for a in gpus_audit
        for i in (0, 1)
    ), [a.summary for a in gpus_audit]
    assert h100x4.limit_w(0) == 500.0
    listed = await node.h.admin.ListRequests(apb.ListRequestsRequest(device=GPUS))
    assert [r.request_id for r in listed.requests] == ["inb-1"]

    # admin API and `devicectl devices show`: which path saw what
    record = await node.h.admin.GetDevice(apb.GetDeviceRequest(id=BMC))
    gpu0 = next(d for d in record.desired if d.component == "gpu/0")
    assert "in-band 500 W, out-of-band 1200 W (the paths disagree)" in gpu0.drift_detail
    out = await devicectl("--server", f"127.0.0.1:{node.h.controller.port}", "devices", "show", BMC)
    assert "desired vs enforced" in out and "out-of-band" in out and "disagree" in out
    assert set(sink.unique()) == {"inb-1", "oob-1"}


async def test_driver_reload_is_in_band_drift_and_the_paths_disagree(
    both_ways: Any, h100x4: FakeNode
) -> None:
    before = drift_count("inband", "report"), disagreements()
    node = await both_ways()
    h100x4.fake.unload_driver()  # in-band limits fall back to the default 700 W; the BMC keeps 500 W
    audit = await eventually(lambda: drift_audits(node.store, GPUS, node.clean_at), "in-band drift")
    assert audit[0].summary["findings"] == {f"gpu/{i}": ["inband", "disagree"] for i in (0, 1)}
    assert audit[0].summary["paths"]["gpu/1"] == {"inband": 700.0, "outofband": 500.0}
    assert audit[0].summary["action"] == "report"
    rows = {r.component: r for r in await node.store.desired_for(GPUS)}
    assert rows["gpu/0"].enforced_watts == 700.0  # the device's own path
    assert rows["gpu/0"].drift_detail == (
        "in-band: desired 500 W (set by inb-1), enforced 700 W; "
        "in-band 700 W, out-of-band 500 W (the paths disagree)"
    )
    # the BMC device's check sees the same through the node: in-band off, its own path fine
    bmc_audit = await eventually(
        lambda: drift_audits(node.store, BMC, node.clean_at), "seen from the BMC device"
    )
    assert bmc_audit[0].summary["findings"]["gpu/0"] == ["inband", "disagree"]
    assert drift_count("inband", "report") > before[0] and disagreements() > before[1]
    assert h100x4.limit_w(0) == 700.0  # report mode: nothing written


async def test_both_paths_off_and_off_each_other(
    both_ways: Any, h100x4: FakeNode, sink: TopologySink
) -> None:
    node = await both_ways()
    # a second tool sets the BMC's cap of GPU 0 to 600 W, and a driver reload drops the in-band one
    await node.h.stub.SendDeviceRequest(gpu_caps(BMC, "oob-2", {0: 600}))
    await sink.wait_for({"oob-2"}, timeout=30)
    h100x4.fake.unload_driver()

    async def both_off() -> list[AuditView] | None:
        audit = await drift_audits(node.store, GPUS, node.clean_at)
        hits = [a for a in audit if a.summary["findings"].get("gpu/0") == ["inband", "outofband", "disagree"]]
        return hits or None

    hit = (await eventually(both_off, "both paths off, and off each other"))[-1]
    assert hit.summary["paths"]["gpu/0"] == {"inband": 700.0, "outofband": 600.0}
    assert hit.summary["drift"]["gpu/0"] == (
        "in-band: desired 500 W (set by inb-1), enforced 700 W; "
        "out-of-band: desired 500 W (set by inb-1), enforced 600 W; "
        "in-band 700 W, out-of-band 600 W (the paths disagree)"
    )
    assert hit.summary["findings"]["gpu/1"] == ["inband", "disagree"]  # out-of-band still 500 W
