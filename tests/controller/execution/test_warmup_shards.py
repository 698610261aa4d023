"""The warm-up reads a device only while this process still runs its shard, and counts the read as
running work of the shard (controller/execution/warmup.py): with several controllers, a shard that
moved to another process during the warm-up is never read by two at once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.controller.conftest import memory_inventory
from tests.memory_plugin import MemoryPlugin


async def test_the_warm_up_reads_no_device_whose_shard_is_no_longer_run_here(
    start_controller: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(MemoryPlugin, "warm_up", True, raising=False)  # a plugin that warms up
    h = await start_controller(memory_inventory(2, delay=0.3))
    warmup, runner = h.controller.warmup, h.controller.runner
    assert warmup is not None and warmup._task is not None
    await warmup._task  # the start's own warm-up
    assert warmup.progress.finished and warmup.progress.done == 2
    MemoryPlugin.reset()

    # run here: read, and counted as running work of its shard (not handed on) while it reads
    shard = runner.shards.shard_for_model("node000", None)
    read = asyncio.create_task(warmup._read("node000"))
    while not runner.running_shards.get(shard):
        assert not read.done(), "the read ended without counting as work of its shard"
        await asyncio.sleep(0.01)
    assert await read is True
    assert [(c[0], c[2]) for c in MemoryPlugin.calls] == [("node000", "std_metrics")]
    assert not runner.running_shards

    # no longer run here (a front end runs no shard): not read at all
    runner.shards.executes = False
    assert await warmup._read("node001") is None
    assert [(c[0], c[2]) for c in MemoryPlugin.calls] == [("node000", "std_metrics")]


async def test_the_devices_of_a_shard_gained_after_the_start_are_warmed_then(
    start_controller: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(MemoryPlugin, "warm_up", True, raising=False)
    h = await start_controller(memory_inventory(4, delay=0.05))
    warmup, runner = h.controller.warmup, h.controller.runner
    assert warmup is not None and warmup._task is not None
    await warmup._task
    assert warmup.progress.finished and (warmup.progress.total, warmup.progress.done) == (4, 4)
    MemoryPlugin.reset()

    # a shard leased here later (as a lease round reports it): its devices, and only those, are read
    shard = runner.shards.shard_for_model("node002", None)
    wanted = sorted(d for d in h.controller.inventory if runner.shards.shard_for_model(d, None) == shard)
    warmup.gained(frozenset({shard}))
    assert not warmup.progress.finished and len(warmup._later) == 1  # at work until they are read
    await asyncio.gather(*warmup._later)
    assert sorted(c[0] for c in MemoryPlugin.calls if c[2] == "std_metrics") == wanted
    p = warmup.progress
    assert p.finished and (p.total, p.done, p.failed) == (4 + len(wanted), 4 + len(wanted), 0)

    # a shard not run here (a front end runs none): nothing read, the warm-up stays finished
    MemoryPlugin.reset()
    runner.shards.executes = False
    warmup.gained(frozenset({shard}))
    assert not warmup._later and not MemoryPlugin.calls and warmup.progress.finished
