"""Readiness verifications in the store (``bmc_checks``), on SQLite and PostgreSQL: journaled queued,
claimed once, finished, interrupted by their owner's restart only, and each device's last one."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from controller.store import BmcCheckRow, Store

T0 = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def row(check_id: str, device: str, at: datetime, *, write_cycle: bool = False) -> BmcCheckRow:
    batch = check_id.split("-")[0]
    query = {"skip_writes": not write_cycle}
    return BmcCheckRow(
        check_id, batch, device, write_cycle, "queued", "", query, None, None, "", "", at, None, None
    )


async def test_a_queued_verification_is_claimed_once_even_by_racing_controllers(store: Store) -> None:
    await store.add_bmc_checks([row(f"b1-{i}", f"n{i}", T0) for i in range(6)])
    a, b = await asyncio.gather(
        store.claim_bmc_checks("ctl-a", 4, T0), store.claim_bmc_checks("ctl-b", 4, T0)
    )
    ids = [r.check_id for r in a + b]
    assert sorted(ids) == [f"b1-{i}" for i in range(6)] and len(set(ids)) == 6
    assert all(r.status == "running" and r.started_at == T0 for r in a + b)
    assert await store.claim_bmc_checks("ctl-a", 4, T0) == []


async def test_a_restart_interrupts_only_its_own_running_checks_and_finished_ones_stay(store: Store) -> None:
    await store.add_bmc_checks(
        [row("b2-1", "n1", T0), row("b2-2", "n2", T0, write_cycle=True), row("b2-3", "n3", T0)]
    )
    await store.claim_bmc_checks("ctl-a", 2, T0)
    await store.claim_bmc_checks("ctl-b", 1, T0)
    result = {"verdict": "pass", "checks": []}
    await store.finish_bmc_check("b2-1", "done", verdict="pass", result=result, at=T0 + timedelta(seconds=5))
    assert await store.interrupt_bmc_checks("ctl-a", T0 + timedelta(seconds=9)) == 1
    found = {r.check_id: r for r in await store.list_bmc_checks(batch_id="b2")}
    assert found["b2-1"].status == "done" and found["b2-1"].result == result
    assert found["b2-2"].status == "interrupted" and "during its write cycle" in found["b2-2"].error
    assert found["b2-3"].status == "running"  # another controller's: not ours to judge
    # a late finish of an interrupted check changes nothing (it was already reported)
    await store.finish_bmc_check("b2-2", "done", verdict="pass", at=T0 + timedelta(seconds=10))
    late = await store.bmc_check("b2-2")
    assert late is not None and late.status == "interrupted"


async def test_each_devices_last_finished_verification(store: Store) -> None:
    await store.add_bmc_checks([row("b3-1", "n1", T0), row("b3-2", "n2", T0)])
    await store.add_bmc_checks([row("b4-1", "n1", T0 + timedelta(hours=1))])
    await store.claim_bmc_checks("ctl", 10, T0)
    for check_id, verdict in (("b3-1", "pass"), ("b3-2", "fail"), ("b4-1", "warn")):
        await store.finish_bmc_check(check_id, "done", verdict=verdict, at=T0 + timedelta(hours=2))
    await store.add_bmc_checks([row("b5-1", "n1", T0 + timedelta(hours=3))])  # queued: not finished
    last = await store.last_bmc_checks()
    assert {d: (r.check_id, r.verdict) for d, r in last.items()} == {
        "n1": ("b4-1", "warn"),
        "n2": ("b3-2", "fail"),
    }
    assert set(await store.last_bmc_checks(["n2", "n9"])) == {"n2"}
    listed = await store.list_bmc_checks(device="n1")
    assert [r.check_id for r in listed] == ["b5-1", "b4-1", "b3-1"]  # newest first
    assert [r.check_id for r in await store.list_bmc_checks(status="queued")] == ["b5-1"]
    assert (await store.resolve_bmc_check("b3_"))[0] == ""  # LIKE wildcards are literal
    assert await store.resolve_bmc_check("b3-") == ("", "more than one verification matches 'b3-'")
    assert await store.resolve_bmc_check("b4") == ("batch", "b4")  # a run, before any prefix
    assert await store.resolve_bmc_check("b4-") == ("check", "b4-1")
    # a NUL is in no id; on PostgreSQL it would fail the query rather than match nothing
    assert await store.resolve_bmc_check("b4-\x00") == ("", "no verification matches 'b4-\\x00'")
