"""Ping, GPU metrics, standard metrics and raw metrics: values, units and partial failures."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import pynvml
import pytest

from plugins.base import Empty, GpuMetricsQuery, InvalidRequestError, Ping
from plugins.nvml.testing import FakeNode

MakeNode = Callable[..., Awaitable[FakeNode]]


# ---- ping --------------------------------------------------------------------------------------


async def test_ping_ok_records_the_gpus_in_the_state(h100x4: FakeNode) -> None:
    out = await h100x4.do("ping", Ping())
    assert out.result.ok and out.result.error == ""
    assert out.reached_at is not None
    assert set(h100x4.state["gpus"]) == {h100x4.uuid(i) for i in range(4)}
    again = await h100x4.do("ping", Ping())
    assert again.state is None  # nothing new to record
    assert not h100x4.fake.writes()


async def test_ping_reports_a_lost_gpu_with_driver_and_count(h100x4: FakeNode) -> None:
    await h100x4.do("ping", Ping())
    h100x4.fake.lose(h100x4.uuid(2))
    out = await h100x4.do("ping", Ping())
    assert not out.result.ok
    assert f"GPU 2 ({h100x4.uuid(2)}) at 00000000:3A:00.0: GPU is lost" in out.result.error
    assert "driver 590.48.01, 4 GPU(s)" in out.result.error


async def test_ping_reports_a_lost_gpu_never_seen_before(h100x4: FakeNode) -> None:
    h100x4.fake.lose(h100x4.uuid(3))
    out = await h100x4.do("ping", Ping())
    assert not out.result.ok
    assert "NVML device index 3: GPU is lost" in out.result.error


async def test_ping_compares_with_the_device_model(make_node: MakeNode) -> None:
    node = await make_node("h100", "h100", model={"Model": "DGX_H100"})  # the catalogue says 8 GPUs
    out = await node.do("ping", Ping())
    assert not out.result.ok
    assert "NVML sees 2 GPU(s); the device model says 8" in out.result.error


async def test_ping_without_gpus(make_node: MakeNode) -> None:
    node = await make_node()
    out = await node.do("ping", Ping())
    assert not out.result.ok and "NVML sees no GPU" in out.result.error


# ---- GPU metrics -----------------------------------------------------------------------------------


async def test_gpu_metrics_are_watts_by_gpu_id(h100x4: FakeNode) -> None:
    h100x4.fake.gpu(1).demand_mw = 412_345
    out = await h100x4.do("gpu_metrics", GpuMetricsQuery())
    assert out.result.ok
    assert [(m.gpu_id, m.watts) for m in out.result.metrics] == [
        (0, 350.0),
        (1, 412.345),
        (2, 350.0),
        (3, 350.0),
    ]


async def test_gpu_metrics_for_selected_gpus(h100x4: FakeNode) -> None:
    out = await h100x4.do("gpu_metrics", GpuMetricsQuery(gpu_ids=(3, 1)))
    assert [m.gpu_id for m in out.result.metrics] == [3, 1]


async def test_gpu_metrics_for_an_unknown_gpu_are_invalid(h100x4: FakeNode) -> None:
    with pytest.raises(InvalidRequestError, match=r"no GPU 9 on this node \(GPUs: 0\.\.3\)"):
        await h100x4.do("gpu_metrics", GpuMetricsQuery(gpu_ids=(9,)))


async def test_gpu_metrics_report_failing_gpus_and_keep_the_others(h100x4: FakeNode) -> None:
    h100x4.fake.fail("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_NOT_SUPPORTED, uuid=h100x4.uuid(0))
    await h100x4.do("ping", Ping())
    h100x4.fake.lose(h100x4.uuid(2))
    out = await h100x4.do("gpu_metrics", GpuMetricsQuery())
    assert not out.result.ok
    assert [m.gpu_id for m in out.result.metrics] == [1, 3]
    assert "GPU 0" in out.result.error and "power unavailable" in out.result.error
    assert "GPU 2" in out.result.error and "GPU is lost" in out.result.error


# ---- standard and raw metrics ------------------------------------------------------------------------


async def test_std_metrics_units(h100x4: FakeNode) -> None:
    await h100x4.do("ping", Ping())
    h100x4.fake.advance(10.0)  # 10 s at 350 W = 3500 J = 3,500,000 mJ
    h100x4.fake.gpu(0).oob_limit_mw = 600_000
    out = await h100x4.do("std_metrics", Empty())
    metrics = out.result.metrics
    assert out.result.ok and metrics is not None
    assert metrics.name == "gpu-node-1"
    assert metrics.power_watts == 1400.0  # the GPUs' sum
    gpu0 = metrics.gpus[0]
    assert gpu0.id == "0"
    assert gpu0.energy_joules == 3500.0
    assert (gpu0.limit_watts, gpu0.min_watts, gpu0.max_watts) == (600.0, 200.0, 700.0)
    assert gpu0.temperature_celsius == 45.0
    assert metrics.sampled_at is not None


async def test_std_metrics_with_a_lost_gpu(h100x4: FakeNode) -> None:
    await h100x4.do("ping", Ping())
    h100x4.fake.lose(h100x4.uuid(1), vanish=True)  # gone from the device count entirely
    out = await h100x4.do("std_metrics", Empty())
    assert not out.result.ok
    assert out.result.metrics is not None
    assert [g.id for g in out.result.metrics.gpus] == ["0", "2", "3"]
    assert "GPU 1" in out.result.error and "lost or removed" in out.result.error


async def test_raw_metrics_keep_nvml_units_and_profiles(make_node: MakeNode) -> None:
    node = await make_node("h100", "b200")
    node.fake.gpu(0).memory_temperature_c = None  # not reported by this board
    node.fake.gpu(1).demand_mw = 1_200_000  # above its limit: power capped
    out = await node.do("raw_metrics", Empty())
    docs = out.result.documents
    json.dumps(docs)  # a google.protobuf.Struct on the wire
    assert docs["nvml"]["driver_version"] == "590.48.01"
    assert docs["nvml"]["gpu_count"] == 2
    h100, b200 = docs[node.uuid(0)], docs[node.uuid(1)]
    assert h100["power_mw"] == 350_000 and h100["limit_mw"] == 700_000
    assert h100["clocks_mhz"] == {"graphics": 1755, "sm": 1755, "memory": 2619}
    assert (
        h100["memory_temperature_c"] is None and "NOT_SUPPORTED" in h100["unavailable"]["memory_temperature"]
    )
    assert h100["profiles"] is None and "workload_profiles" in h100["unavailable"]
    assert (
        b200["power_mw"] == 1_000_000
        and b200["clocks_event_reasons"] == pynvml.nvmlClocksEventReasonSwPowerCap
    )
    assert b200["profiles"]["supported"][:3] == [0, 1, 2]  # NVML ids, as the document says
    assert b200["persistence_mode"] is True


async def test_a_read_that_times_out_loses_only_that_value(h100x4: FakeNode) -> None:
    h100x4.fake.fail("nvmlDeviceGetUtilizationRates", pynvml.NVML_ERROR_TIMEOUT, uuid=h100x4.uuid(0), times=1)
    out = await h100x4.do("raw_metrics", Empty())
    assert out.result.ok
    doc = out.result.documents[h100x4.uuid(0)]
    assert doc["utilization_gpu_pct"] is None and "TIMEOUT" in doc["unavailable"]["utilization"]
    assert out.result.documents[h100x4.uuid(1)]["utilization_gpu_pct"] == 87


async def test_a_lost_gpu_never_seen_before_is_still_reported(h100x4: FakeNode) -> None:
    h100x4.fake.lose(h100x4.uuid(3))  # lost before devicectl ever recorded it
    out = await h100x4.do("gpu_metrics", GpuMetricsQuery())
    assert not out.result.ok and "NVML device index 3: GPU is lost" in out.result.error
    assert len(out.result.metrics) == 3
    std = await h100x4.do("std_metrics", Empty())
    assert not std.result.ok and "NVML device index 3" in std.result.error


async def test_readings_a_gpu_does_not_support_are_left_out(make_node: MakeNode) -> None:
    node = await make_node("a100")
    node.fake.gpu(0).unsupported = {"nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetTemperatureV"}
    out = await node.do("std_metrics", Empty())
    assert out.result.ok
    assert out.result.metrics is not None
    gpu = out.result.metrics.gpus[0]
    assert (gpu.energy_joules, gpu.temperature_celsius, gpu.max_watts) == (0.0, 0.0, 400.0)
    raw = (await node.do("raw_metrics", Empty())).result.documents[node.uuid(0)]
    assert set(raw["unavailable"]) >= {"energy", "temperature"}
