"""Fingerprint and stats streams: inventory, health and power readings; failures travel as data."""

from __future__ import annotations

from typing import Any

from bmcsim import BmcConfig
from plugins.base import Credentials, DeviceTarget, Endpoint
from tests.plugins.redfish.harness import FAST, Harness, model_json


def targets(h: Harness) -> list[DeviceTarget]:
    return [
        DeviceTarget(
            device_id=f"node{b.index}",
            model=model_json(b),
            endpoint=Endpoint(
                b.url, Credentials(b.username, b.password), ca_bundle=str(h.fleet.ca_bundle), options=FAST
            ),
        )
        for b in h.fleet.bmcs
    ]


async def test_fingerprint_lists_gpus_with_health_and_marks_a_dead_bmc(mixed: Harness) -> None:
    dead = mixed.fleet.bmcs[2]
    await dead.stop()
    stream = mixed.plugin.fingerprint(targets(mixed))
    first = await anext(stream)
    await stream.aclose()
    assert first.error is None
    groups = {(g.type, g.name): g for g in first.groups}
    nodes = {d.id: d for d in groups[("node", "bmc")].devices}
    assert nodes["node0"].healthy and nodes["node1"].healthy and nodes["node3"].healthy
    assert not nodes["node2"].healthy and "cannot connect" in nodes["node2"].health_description
    gb200 = groups[("gpu", "GB200")]
    assert gb200.vendor == "nvidia" and [d.id for d in gb200.devices] == [f"node0/gpu/{i}" for i in range(4)]
    assert all(d.healthy for d in gb200.devices)
    assert len(groups[("gpu", "NVIDIA H100 80GB HBM3")].devices) == 8


async def test_stats_report_power_energy_limit_and_temperature(mixed: Harness) -> None:
    stream = mixed.plugin.stats(targets(mixed), interval=0.01)
    first = await anext(stream)
    second = await anext(stream)
    await stream.aclose()
    nodes, gpus = first.groups
    assert set(nodes.instance_stats) == {"node0", "node1", "node2", "node3"}
    assert all(s.summary.float_numerator > 0 for s in nodes.instance_stats.values())
    gpu = gpus.instance_stats["node0/gpu/1"]
    attrs = gpu.stats.attributes
    assert attrs["limit"].float_numerator == 1200 and attrs["limit_max"].float_numerator == 1200
    assert attrs["power"].float_numerator > 0 and attrs["energy"].unit == "J"
    assert attrs["temperature"].float_numerator > 20
    assert "node3/gpu/7" in gpus.instance_stats
    assert second.groups[0].instance_stats["node0"].timestamp >= nodes.instance_stats["node0"].timestamp
    # one session per BMC, shared with everything else
    assert [b.stats.sessions_created for b in mixed.fleet.bmcs] == [1, 1, 1, 1]


async def test_stats_leave_out_readings_the_bmc_does_not_report(make_harness: Any) -> None:
    async with make_harness(configs=[BmcConfig(model="gb200", layout=frozenset({"absent-readings"}))]) as h:
        stream = h.plugin.stats(targets(h), interval=0.01)
        first = await anext(stream)
        await stream.aclose()
        nodes, gpus = first.groups
        assert nodes.instance_stats == {} and gpus.instance_stats == {}  # no 0 W statistics
