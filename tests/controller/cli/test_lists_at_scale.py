"""A 2,000-node GB200 inventory on a real `devicectl serve` (SQLite): every list in every format
holds every node. Each device row carries a Redfish state the size a real GB200 node's is (about
9 KB: discovery, priors of two scopes, applied caps and readings of 13 components), written through
the store API so the test does not need 2,000 BMCs; at that size one answer of every device would
pass gRPC's 4 MiB message limit, which is what the pages are for. Labels select by rack."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from controller.store import Completion, DeviceUpsert, NewRequest, Store
from tests.controller.terminal import pipe
from tests.serve_process import ROOT, free_port, start_serving

#: each test lists 2,000 nodes in a new CLI process per format, after a serve of its own starts on
#: them: 106 s for the first test in a suite run on a slow 2-core host, past the suite's 120 s
#: default with two busy loops beside it
pytestmark = pytest.mark.timeout(600)

NODES = 2000
PER_RACK = 40
COMPONENTS = ["node", "cpu/0", "cpu/1", "memory", *(f"module/{i}" for i in range(4))]
GPUS = [f"gpu/{i}" for i in range(4)]
PROCESSORS = "/redfish/v1/Systems/HGX_Baseboard_0/Processors"


def node(i: int) -> str:
    return f"node{i:04d}"


def gb200_state(i: int) -> dict[str, Any]:
    """A GB200 node's Redfish state as the plugin leaves it after a resource group and a topology."""
    base = f"https://10.{i // 250}.{i % 250}.1"
    reading = {"capped": True, "mode": "Manual", "min": 200, "max": 1200, "increment": 1}
    readings = {
        **{
            c: {**reading, "watts": 2820, "max": 5640, "uri": f"/redfish/v1/Chassis/{c}/Controls/Power"}
            for c in COMPONENTS
        },
        **{
            g: {**reading, "watts": 700, "uri": f"/redfish/v1/Chassis/HGX_{g}/Controls/PowerLimit"}
            for g in GPUS
        },
    }
    gpus = [
        {
            "key": g,
            "name": f"GPU_{n}",
            "limit_uri": f"/redfish/v1/Chassis/HGX_GPU_SXM_{n}/Controls/PowerLimit_{n}",
            "serial": f"1654923{i:06d}{n}",
            "uuid": f"GPU-{i:08x}-{n:04x}-4a1b-9c2d-0123456789ab",
            "part": "2330-100-A1",
            "firmware": "97.00.83.00.0A",
            "profile_uri": f"{PROCESSORS}/GPU_SXM_{n}/Oem/Nvidia/WorkloadPowerProfile",
            "metrics_uri": f"{PROCESSORS}/GPU_SXM_{n}/EnvironmentMetrics",
            "energy_uri": f"/redfish/v1/Chassis/HGX_GPU_SXM_{n}/Sensors/HGX_GPU_SXM_{n}_Energy_0",
        }
        for n, g in enumerate(GPUS)
    ]
    prior = {"watts": 1200, "capped": False, "mode": "Automatic"}
    return {
        "version": 2,
        "discovery": {
            "platform": "environment_metrics",
            "url": base,
            "firmware": "GB200Nvl-25.06-A",
            "gpus": gpus,
            "controls": {
                c: f"/redfish/v1/Chassis/BMC_0/Controls/{c.replace('/', '_')}_Power" for c in COMPONENTS
            },
            "chassis": [f"/redfish/v1/Chassis/HGX_GPU_SXM_{n}" for n in range(8)]
            + ["/redfish/v1/Chassis/BMC_0"],
        },
        "priors": {
            "topology": {c: dict(prior) for c in [*COMPONENTS, *GPUS]},
            "rg:job-prod-42": {c: {**prior, "watts": 2820} for c in [*COMPONENTS, *GPUS]},
        },
        "applied": {
            c: {
                "watts": readings[c]["watts"],
                "requested": readings[c]["watts"],
                "scope": "rg:job-prod-42",
                "at": "2026-12-05T10:00:00Z",
            }
            for c in [*COMPONENTS, *GPUS]
        },
        "profiles": {
            "priors": {"rg:job-prod-42": {g: "0x00000000000000000000000000000000" for g in GPUS}},
            "gpus": {
                g: {"requested": [5, 7], "enforced": [5, 7], "at": "2026-12-05T10:00:01Z"} for g in GPUS
            },
        },
        "policies": {"topology": "Node-High", "rg:job-prod-42": "Node-Low"},
        "sessions": {base: [f"/redfish/v1/SessionService/Sessions/{i:032x}"]},
        "readings": readings,
    }


def inventory_text() -> str:
    parts = []
    for i in range(NODES):
        parts.append(
            f'[[device]]\nid = "{node(i)}"\nplugin = "redfish"\nmodel = "DGX_GB200"\n'
            f'labels = {{ rack = "r{i // PER_RACK:02d}", row = "{"ab"[i % 2]}", pdu = "pdu-{i // 20}" }}\n'
            f'[device.redfish]\nurl = "https://10.{i // 250}.{i % 250}.1"\n'
        )
    return "\n".join(parts)


async def populate(url: str) -> None:
    """The devices, each with one finished request that left its state (through the store API)."""
    store = Store.from_url(url)
    store.upgrade()
    await store.start()
    try:
        await store.sync_inventory(
            [DeviceUpsert(node(i), "redfish", {"Model": "DGX_GB200"}) for i in range(NODES)]
        )
        now = datetime.now(UTC)
        await store.accept(
            [
                NewRequest(
                    request_id=f"rq-{node(i)}",
                    device=node(i),
                    kind="gpu_policies_update",
                    payload=b"",
                    trace_id="",
                    accepted_at=now + timedelta(microseconds=i),
                    deadline_at=now + timedelta(seconds=600),
                    owner="populate",
                )
                for i in range(NODES)
            ]
        )

        async def complete(i: int) -> None:
            await store.complete(
                Completion(
                    request_id=f"rq-{node(i)}",
                    device=node(i),
                    outcome="ok",
                    error="",
                    finished_at=now + timedelta(seconds=1, microseconds=i),
                    response=b"",
                    new_state=gb200_state(i),
                    touch_device=True,
                    plugin="redfish",
                    kind="gpu_policies_update",
                    desired={g: 700.0 for g in GPUS},
                )
            )

        for start in range(0, NODES, 200):
            await asyncio.gather(*(complete(i) for i in range(start, min(start + 200, NODES))))
    finally:
        await store.close()


@pytest.fixture
async def fleet(tmp_path: Path) -> AsyncIterator[str]:
    url = f"sqlite:///{tmp_path / 'devicectl.db'}"
    assert len(json.dumps(gb200_state(0))) > 8500  # the size that broke one-message lists
    (tmp_path / "inventory.toml").write_text(inventory_text())
    await populate(url)
    async with serving(tmp_path, url, "scale") as server:
        yield server


@asynccontextmanager
async def serving(tmp_path: Path, url: str, instance_id: str, *extra: str) -> AsyncIterator[str]:
    """A real `devicectl serve` on `url` with `tmp_path`'s inventory.toml: its address, stopped after."""
    port = free_port()
    args = [
        sys.executable,
        "-m",
        "controller",
        "serve",
        "--listen",
        f"127.0.0.1:{port}",
        "--database-url",
        url,
        "--inventory",
        str(tmp_path / "inventory.toml"),
        "--callback",
        "127.0.0.1:9",
        "--instance-id",
        instance_id,
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await start_serving(args, env, tmp_path / "serve.log", port, tries=1200)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def _cli(server: str, *args: str) -> Any:
    return await asyncio.to_thread(pipe, *args, "--server", server, timeout=240)


ALL_NODES = {node(i) for i in range(NODES)}


async def test_every_list_holds_all_2000_nodes_in_every_format(fleet: str) -> None:
    for command in (("devices", "list"), ("devices", "limits")):
        for output in ("table", "wide", "csv", "json", "name"):
            done = await _cli(fleet, *command, "-o", output)
            assert done.code == 0 and done.err == "", (command, output, done.err[-2000:])
            if output == "json":
                rows = json.loads(done.out)
                assert {r["id"] for r in rows} == ALL_NODES and len(rows) == NODES
                assert all(r["state_json"] is None for r in rows)  # lists do not ship the state
                gpu0 = next(c for c in rows[7]["in_force"]["components"] if c["component"] == "gpu/0")
                assert gpu0["requested"] == 700 and gpu0["enforced"] == 700
            elif output == "name":
                assert set(done.out.splitlines()) == {f"device/{n}" for n in ALL_NODES}
            elif output == "csv":
                ids = [r[0] for r in csv.reader(io.StringIO(done.out))][1:]
                assert set(ids) == ALL_NODES
                if command[1] == "limits":  # every component of every node
                    assert len(ids) == NODES * (len(COMPONENTS) + len(GPUS))
            else:
                found = {line.split()[0] for line in done.out.splitlines()[1:] if line.strip()}
                assert ALL_NODES <= found, sorted(ALL_NODES - found)[:5]
    requests = await _cli(fleet, "requests", "list", "--all", "-o", "json")
    assert requests.code == 0, requests.err[-2000:]
    assert {r["device"] for r in json.loads(requests.out)} == ALL_NODES
    names = await _cli(fleet, "requests", "list", "--all", "-o", "name")
    assert len(set(names.out.splitlines())) == NODES
    cut = await _cli(fleet, "requests", "list", "--limit", "1500", "-o", "name")
    assert len(cut.out.splitlines()) == 1500
    assert cut.err.strip() == "showing the first 1500 requests; more match: raise --limit or give --all"


async def test_a_label_selector_picks_one_rack_on_every_list(fleet: str) -> None:
    rack = {node(i) for i in range(7 * PER_RACK, 8 * PER_RACK)}
    devices = await _cli(fleet, "devices", "list", "-l", "rack=r07", "-o", "name")
    assert set(devices.out.splitlines()) == {f"device/{n}" for n in rack}, devices.err
    limits = await _cli(fleet, "devices", "limits", "-l", "rack=r07,row=a", "-o", "csv", "--no-headers")
    assert {r[0] for r in csv.reader(io.StringIO(limits.out))} == {n for n in rack if int(n[4:]) % 2 == 0}
    requests = await _cli(fleet, "requests", "list", "--all", "--selector", "rack=r07", "-o", "json")
    assert {r["device"] for r in json.loads(requests.out)} == rack
    by_model = await _cli(fleet, "devices", "list", "-l", "model=DGX_GB200,rack!=r07", "-o", "name")
    assert len(by_model.out.splitlines()) == NODES - PER_RACK
    shown = await _cli(fleet, "devices", "list", "-l", "pdu=pdu-3", "-o", "json")
    assert [d["labels"]["pdu"] for d in json.loads(shown.out)] == ["pdu-3"] * 20
    bad = await _cli(fleet, "devices", "list", "-l", "rack")
    assert bad.code == 2 and bad.err.count("\n") == 1 and "'rack' is not key=value" in bad.err, bad.err
