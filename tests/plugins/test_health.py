"""`uncancelled`: the work a write cycle shields (its restore) outlives a cancel, except the one that
hands the device on (`RELINQUISHED`)."""

from __future__ import annotations

import asyncio

import pytest

from plugins.base import RELINQUISHED, relinquish, relinquished, uncancelled


async def test_a_cancel_waits_for_the_shielded_work_and_is_raised_after_it() -> None:
    events: list[str] = []

    async def restore() -> None:
        await asyncio.sleep(0.2)
        events.append("restored")

    async def cycle() -> None:
        await uncancelled(restore())
        events.append("went on")  # never: the cancel is raised once the restore is done

    task = asyncio.ensure_future(cycle())
    await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.sleep(0.05)
    task.cancel()  # a second cancel (a stop after a deadline) waits too
    with pytest.raises(asyncio.CancelledError):
        await task
    assert events == ["restored"]


async def _restore(seen: list[tuple[object, ...]], restoring: asyncio.Event | None = None) -> None:
    """A long restore that notes the arguments of the cancel that reaches it."""
    if restoring is not None:
        restoring.set()
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError as exc:
        seen.append(exc.args)
        raise


async def test_the_cancel_that_hands_the_device_on_cuts_the_shielded_work() -> None:
    seen: list[tuple[object, ...]] = []
    task = asyncio.ensure_future(uncancelled(_restore(seen)))
    await asyncio.sleep(0.05)
    task.cancel()  # a deadline: the restore goes on
    await asyncio.sleep(0.05)
    assert not task.done() and seen == []
    task.cancel(RELINQUISHED)
    with pytest.raises(asyncio.CancelledError) as raised:
        await asyncio.wait_for(task, 5)
    assert seen == [(RELINQUISHED,)]  # cut, and told why
    assert relinquished(raised.value)
    assert not relinquished(asyncio.CancelledError()) and not relinquished(ValueError(RELINQUISHED))


async def test_a_relinquish_in_the_turn_of_a_plain_cancel_still_cuts_the_shielded_work() -> None:
    """A deadline's plain cancel and the hand-on in one loop turn: `asyncio.Task.cancel` keeps the
    first cancel's error, so the task is woken with the plain one; `relinquish`'s mark still cuts
    the restore (with `task.cancel(RELINQUISHED)` alone it ran on, past the hand-on)."""
    seen: list[tuple[object, ...]] = []
    restoring = asyncio.Event()
    task = asyncio.ensure_future(uncancelled(_restore(seen, restoring)))
    await restoring.wait()
    await asyncio.sleep(0)  # the task is waiting on its shield
    task.cancel()  # the deadline's, not yet delivered when
    relinquish(task)  # the hand-on comes in the same turn
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert seen == [(RELINQUISHED,)]  # cut, and told why


async def test_a_plain_cancel_reads_as_the_hand_on_only_in_a_relinquished_task() -> None:
    reads: dict[str, tuple[bool, tuple[object, ...]]] = {}

    async def waiting(name: str) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError as exc:
            reads[name] = (relinquished(exc), exc.args)
            raise

    plain = asyncio.ensure_future(waiting("plain"))
    marked = asyncio.ensure_future(waiting("marked"))
    await asyncio.sleep(0)
    marked.cancel()  # first: its error is the one that reaches the task
    relinquish(marked)
    plain.cancel()
    await asyncio.wait((plain, marked))
    assert reads == {"plain": (False, ()), "marked": (True, ())}
