"""The resolver's write-through copy of a device's stored state (`controller.execution.resolve`):
a completion that keeps the stored state (its plugin returned none) never stands for "no state"
when the copy was dropped while it ran (shards gained: `forget_all`)."""

from __future__ import annotations

import asyncio

from controller.config import Settings
from controller.execution.resolve import DeviceResolver
from controller.execution.state_text import encode
from controller.store import Store
from tests.controller.store.test_completion import finish, req

STORED = {"discovery": {"platform": "nvidia-hgx"}, "priors": {"gpu/0": 1000}}


def _resolver(store: Store) -> DeviceResolver:
    return DeviceResolver(store, None, Settings(), {}, None)  # type: ignore[arg-type]


async def test_a_stateless_completion_after_the_copy_was_dropped_keeps_the_stored_state(store: Store) -> None:
    await store.accept([req("r0")])
    assert await store.complete(finish("r0", state=STORED, state_text=encode(STORED).text))
    resolver = _resolver(store)
    assert (await resolver._known("dev1")).state == STORED
    resolver.forget_all()  # shards gained while a request of the device ran
    resolver.remember("dev1", {"Model": "GB200"}, None)  # its completion kept the stored state
    assert (await resolver._known("dev1")).state == STORED  # read again, not taken as none


async def test_a_device_without_a_stored_state_is_known_as_such(store: Store) -> None:
    """No row: the copy says no state; a stateless completion of it leaves that so (read again)."""
    resolver = _resolver(store)
    known = await resolver._known("dev2")
    assert known.state is None and known.text is None
    resolver.remember("dev2", {}, None)
    assert (await resolver._known("dev2")).state is None


async def test_a_waves_first_resolves_share_the_stores_queries_and_each_gets_its_own_copy(
    store: Store,
) -> None:
    """A wave's first requests each need their device's row (no copy yet): read together, one
    query per round (`controller/store/_coalesce.py`), each device still with its own state."""
    devices = [f"node{i:03d}" for i in range(300)]
    for i, device in enumerate(devices[:100]):  # a third with a stored state, the rest without
        await store.accept([req(f"r{i}", device=device)])
        state = {"discovery": {"serial": device}}
        assert await store.complete(finish(f"r{i}", device=device, state=state))
    resolver = _resolver(store)
    before = store._device_reads.rounds
    known = await asyncio.gather(*(resolver._known(d) for d in devices))
    assert [k.state for k in known[:100]] == [{"discovery": {"serial": d}} for d in devices[:100]]
    assert all(k.state is None for k in known[100:])
    assert store._device_reads.rounds - before == 1
    # the copies are kept: the next resolve of a stored device reads nothing
    await resolver._known(devices[0])
    assert store._device_reads.rounds - before == 1
