"""Nomad-shaped streams: fingerprint, stats and reserve."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import pytest

from plugins.base import (
    DEVICE_TYPE_GPU,
    DeviceLostError,
    HostEnvironmentError,
    InvalidRequestError,
)
from plugins.nvml.testing import FakeNode

MakeNode = Callable[..., Awaitable[FakeNode]]
T = TypeVar("T")


async def next_of(stream: AsyncIterator[T], timeout: float = 2.0) -> T:
    return await asyncio.wait_for(anext(stream), timeout)


async def test_fingerprint_groups_gpus_by_model_with_attributes(make_node: MakeNode) -> None:
    node = await make_node("h100", "b200", "h100")
    stream = node.plugin.fingerprint([])
    first = await next_of(stream)
    assert first.error is None
    groups = {g.name: g for g in first.groups}
    assert set(groups) == {"NVIDIA H100 80GB HBM3", "NVIDIA B200"}
    h100 = groups["NVIDIA H100 80GB HBM3"]
    assert (h100.vendor, h100.type) == ("nvidia", DEVICE_TYPE_GPU)
    assert [d.id for d in h100.devices] == [node.uuid(0), node.uuid(2)]
    assert all(d.healthy for d in h100.devices)
    assert h100.devices[0].locality is not None and h100.devices[0].locality.pci_bus_id == "00000000:18:00.0"
    attrs = h100.attributes
    assert (attrs["memory"].value, attrs["memory"].unit) == (81920, "MiB")
    assert (attrs["power_limit_max"].value, attrs["power_limit_max"].unit) == (700.0, "W")
    assert attrs["power_limit_min"].value == 200.0 and attrs["power_limit_default"].value == 700.0
    assert attrs["architecture"].value == "hopper"
    assert attrs["driver_version"].value == "590.48.01"
    assert attrs["workload_power_profiles"].value is False
    assert groups["NVIDIA B200"].attributes["workload_power_profiles"].value is True
    assert groups["NVIDIA B200"].attributes["architecture"].value == "blackwell"
    await stream.aclose()
    assert not node.fake.writes()


async def test_fingerprint_sends_again_only_on_change_and_marks_lost_gpus_unhealthy(
    h100x4: FakeNode,
) -> None:
    stream = h100x4.plugin.fingerprint([])
    await next_of(stream)
    polls = h100x4.fake.called("nvmlDeviceGetCount")
    pending = asyncio.ensure_future(next_of(stream))
    await asyncio.sleep(0.05)  # several polls of an unchanged node: nothing is sent
    assert h100x4.fake.called("nvmlDeviceGetCount") > polls + 1
    assert not pending.done()
    h100x4.fake.lose(h100x4.uuid(1))
    changed = await pending
    devices = {d.id: d for d in changed.groups[0].devices}
    assert len(devices) == 4  # the lost GPU stays listed
    lost = devices[h100x4.uuid(1)]
    assert not lost.healthy and "GPU is lost" in lost.health_description
    assert all(devices[h100x4.uuid(i)].healthy for i in (0, 2, 3))
    await stream.aclose()


async def test_fingerprint_reports_errors_as_data_and_recovers(make_node: MakeNode) -> None:
    node = await make_node("h100", driver_loaded=False)
    stream = node.plugin.fingerprint([])
    first = await next_of(stream)
    assert isinstance(first.error, HostEnvironmentError) and not first.groups
    node.fake.driver_loaded = True
    second = await next_of(stream)
    assert second.error is None and second.groups[0].devices[0].id == node.uuid(0)
    await stream.aclose()


async def test_stats_carry_units_and_the_power_cap_throttle(make_node: MakeNode) -> None:
    node = await make_node("h100", "h100")
    node.fake.gpu(1).demand_mw = 800_000  # wants more than its 700 W limit
    node.fake.advance(2.0)
    stream = node.plugin.stats([], 0.01)
    response = await next_of(stream)
    assert response.error is None
    group = response.groups[0]
    assert group.name == "NVIDIA H100 80GB HBM3"
    gpu0 = group.instance_stats[node.uuid(0)]
    a = gpu0.stats.attributes
    assert (a["power"].float_numerator, a["power"].unit) == (350.0, "W")
    assert (a["energy"].float_numerator, a["energy"].unit) == (700.0, "J")
    assert (a["temperature"].int_numerator, a["temperature"].unit) == (45, "C")
    assert (a["memory_temperature"].int_numerator, a["memory_temperature"].unit) == (50, "C")
    assert (a["sm_clock"].int_numerator, a["sm_clock"].unit) == (1755, "MHz")
    assert (a["utilization"].int_numerator, a["utilization"].unit) == (87, "%")
    assert a["power_limit"].float_numerator == 700.0 and a["enforced_power_limit"].float_numerator == 700.0
    assert a["power_capped"].boolean is False
    assert (gpu0.summary.float_numerator, gpu0.summary.float_denominator) == (350.0, 700.0)
    capped = group.instance_stats[node.uuid(1)].stats.attributes
    assert capped["power_capped"].boolean is True and capped["power"].float_numerator == 700.0
    second = await next_of(stream)
    assert second.groups[0].instance_stats[node.uuid(0)].timestamp >= gpu0.timestamp
    await stream.aclose()
    assert not node.fake.writes()


async def test_stats_show_a_lost_gpu_as_an_error_value(h100x4: FakeNode) -> None:
    stream = h100x4.plugin.stats([], 0.01)
    await next_of(stream)
    h100x4.fake.lose(h100x4.uuid(0))
    response = await next_of(stream)
    lost = response.groups[0].instance_stats[h100x4.uuid(0)]
    assert lost.summary.string is not None and "GPU is lost" in lost.summary.string
    assert "power" in response.groups[0].instance_stats[h100x4.uuid(1)].stats.attributes
    await stream.aclose()


async def test_reserve_exposes_the_gpus_by_uuid_with_their_device_nodes(h100x4: FakeNode) -> None:
    wanted = [h100x4.uuid(2), h100x4.uuid(0)]
    reservation = await h100x4.plugin.reserve(wanted)
    assert reservation.envs == {"NVIDIA_VISIBLE_DEVICES": f"{wanted[0]},{wanted[1]}"}
    paths = [d.host_path for d in reservation.devices]
    assert paths[:2] == ["/dev/nvidia2", "/dev/nvidia0"]
    assert {"/dev/nvidiactl", "/dev/nvidia-uvm"} <= set(paths)
    assert all(d.task_path == d.host_path and d.cgroup_perms == "rw" for d in reservation.devices)
    assert not h100x4.fake.writes()


async def test_reserve_refuses_unknown_and_lost_gpus(h100x4: FakeNode) -> None:
    with pytest.raises(InvalidRequestError, match="unknown GPU UUID"):
        await h100x4.plugin.reserve(["GPU-00000000-0000-0000-0000-000000000000"])
    h100x4.fake.lose(h100x4.uuid(0))
    with pytest.raises((InvalidRequestError, DeviceLostError)):
        await h100x4.plugin.reserve([h100x4.uuid(0)])
