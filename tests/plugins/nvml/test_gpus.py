"""`gpu_id` numbering (PCI bus id order, stable slots) and the device state's shape."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from plugins.base import (
    ElementType,
    GpuMetricsQuery,
    GpuPoliciesChange,
    GpuPolicy,
    Ping,
    Policy,
    PolicyAction,
    PolicyLimit,
    PowerLimit,
)
from plugins.nvml._gpus import bus_sort_key, describe_ids, normalise_bus_id
from plugins.nvml._state import NvmlState, policy_from_json, policy_to_json
from plugins.nvml.testing import FakeNode, FakeNvml, make_gpu

MakeNode = Callable[..., Awaitable[FakeNode]]


def test_bus_ids_are_normalised_and_sorted_numerically() -> None:
    assert normalise_bus_id("0000:3b:00.0") == "00000000:3B:00.0"
    assert normalise_bus_id(" 00000000:DB:00.0 ") == "00000000:DB:00.0"
    ids = ["00000000:DB:00.0", "00000001:18:00.0", "00000000:9A:00.0", "00000000:0A:00.0"]
    assert sorted(ids, key=bus_sort_key) == [
        "00000000:0A:00.0",
        "00000000:9A:00.0",
        "00000000:DB:00.0",
        "00000001:18:00.0",
    ]
    assert describe_ids([0, 1, 2, 3]) == "0..3" and describe_ids([0, 2]) == "0, 2"


async def test_gpu_id_follows_pci_bus_order_not_nvml_index_order() -> None:
    # NVML enumerates these in another order than their bus ids
    gpus = [
        make_gpu("h100", 3),  # bus 5D
        make_gpu("h100", 0),  # bus 18
        make_gpu("b200", 2),  # bus 3A
    ]
    async with FakeNode(FakeNvml(gpus)) as node:
        out = await node.do("update_gpu_policies", _one_gpu_policy(gpu_id=0, watts=333))
        assert out.result.results[0].ok
        assert gpus[1].limit_mw == 333_000  # bus 18 is GPU 0
        assert gpus[0].limit_mw == 700_000
        metrics = await node.do("gpu_metrics", GpuMetricsQuery(gpu_ids=(2,)))
        assert metrics.result.metrics[0].gpu_id == 2
        assert node.state["gpus"][gpus[0].uuid]["pci_bus_id"] == "00000000:5D:00.0"
        assert [node.state["gpus"][g.uuid]["name"] for g in gpus] == [
            "NVIDIA H100 80GB HBM3",
            "NVIDIA H100 80GB HBM3",
            "NVIDIA B200",
        ]


async def test_a_vanished_gpu_keeps_its_slot(h100x4: FakeNode) -> None:
    await h100x4.do("ping", Ping())  # records the four GPUs
    h100x4.fake.lose(h100x4.uuid(1), vanish=True)  # the driver dropped it: count is 3
    assert h100x4.fake.visible() == [h100x4.fake.gpu(i) for i in (0, 2, 3)]
    out = await h100x4.do("update_gpu_policies", _one_gpu_policy(gpu_id=3, watts=450))
    assert out.result.results[0].ok
    assert h100x4.limit_w(3) == 450.0  # GPU 3 is still the GPU at bus DB
    lost = await h100x4.do("update_gpu_policies", _one_gpu_policy(gpu_id=1, watts=450))
    assert not lost.result.results[0].ok and "lost or removed" in lost.result.results[0].message


async def test_a_replaced_gpu_takes_over_the_slot(h100x4: FakeNode) -> None:
    await h100x4.do("ping", Ping())
    old = h100x4.uuid(0)
    h100x4.fake.gpu(0).uuid = "GPU-11111111-2222-3333-4444-555555555555"  # new board, same slot
    out = await h100x4.do("ping", Ping())
    assert out.result.ok
    assert old not in h100x4.state["gpus"]
    assert (
        h100x4.state["gpus"]["GPU-11111111-2222-3333-4444-555555555555"]["pci_bus_id"] == "00000000:18:00.0"
    )


def test_state_round_trip_and_unknown_keys_survive() -> None:
    policy = Policy(
        "Node-Low",
        (
            PolicyLimit(ElementType.NODE, PowerLimit(watts=5250)),
            PolicyLimit(ElementType.GPU, PowerLimit(percent=40)),
        ),
        {"origin": "dps"},
    )
    assert policy_from_json(policy_to_json(policy)) == policy
    state = NvmlState({"future_key": {"x": 1}, "policies": "garbage", "limits": []})
    state.set_topology(policy)
    state.record_prior("GPU-a", "gpu", 700_000)
    state.record_prior("GPU-a", "gpu", 500_000)  # a later change never overwrites it
    out = state.to_json()
    assert out["future_key"] == {"x": 1}
    assert out["version"] == 1 and out["plugin"] == "nvml"
    assert out["limits"] == {"GPU-a": {"gpu": {"prior_mw": 700_000}}}
    assert NvmlState(out).effective_policy() == policy


def test_malformed_state_is_tolerated() -> None:
    state = NvmlState(
        {"gpus": {"GPU-x": "nonsense", 5: {}}, "policies": {"gpu": {"limits": {"a": 1, "2": {}}}}}
    )
    assert state.known_gpus() == {}
    assert state.gpu_policies() == ()


def _one_gpu_policy(gpu_id: int, watts: float) -> GpuPoliciesChange:
    return GpuPoliciesChange("rg", PolicyAction.SET, policies=(GpuPolicy(gpu_id, PowerLimit(watts=watts)),))
