"""A BMC's connection slots (`plugins.redfish._wire.slots`): asyncio.Semaphore's contract (at most
`limit` holders, waiters in arrival order, a cancelled waiter never loses a slot), a free slot
taken without waiting, and a wait that gives up at its timeout."""

from __future__ import annotations

import asyncio

import pytest

from plugins.redfish._wire.slots import Slots


async def test_at_most_limit_holders_and_waiters_in_arrival_order() -> None:
    slots = Slots(2)
    assert slots.try_take() and slots.try_take()
    assert not slots.try_take()
    order: list[int] = []

    async def wait(n: int) -> None:
        await slots.take(None)
        order.append(n)

    waiting = [asyncio.create_task(wait(n)) for n in range(3)]
    await asyncio.sleep(0)
    assert order == []
    slots.release()
    await asyncio.sleep(0)
    assert order == [0]
    slots.release()
    slots.release()
    await asyncio.gather(*waiting)
    assert order == [0, 1, 2]
    assert not slots.try_take(), "the three waiters and nobody else hold the two slots and one more"


async def test_a_newcomer_does_not_jump_the_queue() -> None:
    slots = Slots(1)
    assert slots.try_take()
    waiter = asyncio.create_task(slots.take(None))
    await asyncio.sleep(0)
    slots.release()  # handed to the waiter, not freed
    assert not slots.try_take()
    await waiter


async def test_a_wait_times_out_and_leaves_the_queue() -> None:
    slots = Slots(1)
    assert slots.try_take()
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        await slots.take(0.05)
    assert loop.time() - started >= 0.05
    slots.release()
    assert slots.try_take(), "the timed-out waiter holds nothing and blocks nobody"


async def test_a_waiter_cancelled_after_being_handed_a_slot_passes_it_on() -> None:
    slots = Slots(1)
    assert slots.try_take()
    first = asyncio.create_task(slots.take(None))
    second = asyncio.create_task(slots.take(None))
    await asyncio.sleep(0)
    slots.release()  # handed to `first`, which is cancelled before it runs again
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, 1)  # the slot went on to `second`
    assert not slots.try_take()
    slots.release()
    assert slots.try_take()


async def test_a_cancelled_waiter_loses_its_place_not_a_slot() -> None:
    slots = Slots(1)
    assert slots.try_take()
    gone = asyncio.create_task(slots.take(None))
    await asyncio.sleep(0)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    slots.release()
    assert slots.try_take(), "freed, not handed to the cancelled waiter"


async def test_each_wait_gives_up_at_its_own_deadline_whatever_the_order_they_came_in() -> None:
    slots = Slots(1)
    assert slots.try_take()
    gave_up: list[str] = []

    async def wait(name: str, timeout: float | None) -> None:
        try:
            await slots.take(timeout)
        except TimeoutError:
            gave_up.append(name)
            raise
        gave_up.append(f"{name} served")

    late = asyncio.create_task(wait("late", 0.2))
    early = asyncio.create_task(wait("early", 0.05))  # came second, its deadline comes first
    patient = asyncio.create_task(wait("patient", None))
    with pytest.raises(TimeoutError):
        await early
    assert gave_up == ["early"] and not late.done()
    with pytest.raises(TimeoutError):
        await late
    assert gave_up == ["early", "late"]
    slots.release()  # to the one still waiting
    await patient
    assert gave_up == ["early", "late", "patient served"]
    assert not slots.try_take()
    slots.release()
    assert slots.try_take()


async def test_a_waiter_served_before_its_deadline_does_not_time_out_the_others() -> None:
    slots = Slots(1)
    assert slots.try_take()
    first = asyncio.create_task(slots.take(0.05))
    second = asyncio.create_task(slots.take(10.0))
    await asyncio.sleep(0)
    slots.release()  # `first` is served well before its deadline
    await first
    await asyncio.sleep(0.1)  # past `first`'s deadline: `second` waits on
    assert not second.done()
    slots.release()
    await second
    slots.release()
    assert slots.try_take() and not slots.try_take()


async def test_waits_that_time_out_together_all_give_up_and_leave_the_slots_free() -> None:
    slots = Slots(2)
    assert slots.try_take() and slots.try_take()
    waits = [asyncio.create_task(slots.take(0.05)) for _ in range(5)]
    results = await asyncio.gather(*waits, return_exceptions=True)
    assert all(isinstance(r, TimeoutError) for r in results)
    slots.release()
    slots.release()
    assert slots.try_take() and slots.try_take() and not slots.try_take()


async def test_a_queue_that_empties_and_fills_again_keeps_its_one_timer_and_every_deadline() -> None:
    slots = Slots(1)
    assert slots.try_take()
    served = asyncio.create_task(slots.take(0.2))
    await asyncio.sleep(0)
    timer = slots._timer
    assert timer is not None
    slots.release()  # the queue is empty now
    await served
    later = asyncio.create_task(slots.take(0.3))  # a deadline after the kept timer's
    await asyncio.sleep(0)
    assert slots._timer is timer, "the emptied queue's timer serves the next waiter"
    with pytest.raises(TimeoutError):
        await later  # woken at the kept timer's time, it waits on to its own deadline
    earlier = asyncio.create_task(slots.take(0.05))
    with pytest.raises(TimeoutError):
        await earlier
    slots.release()
    assert slots.try_take() and not slots.try_take()
