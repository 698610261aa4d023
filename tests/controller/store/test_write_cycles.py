"""The write cycle's journal in the store (``write_cycles``), on SQLite and PostgreSQL: a cycle is
open from before its first write until every cap is proven back; a failed restore keeps it open;
a restore after a restart is reported on its verification, with the restore's receipts appended."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from controller.store import BmcCheckRow, Store, WriteCycleRow

T0 = datetime(2026, 12, 6, 1, 0, tzinfo=UTC)
PRIORS = {"gpu/0": {"watts": None, "capped": False, "mode": "Automatic", "resource": "/gpu0"}}


def cycle(cycle_id: str, device: str, origin: str) -> WriteCycleRow:
    return WriteCycleRow(cycle_id, device, origin, PRIORS, "open", None, "ctl-a", T0, None)


async def test_a_cycle_stays_open_until_every_cap_is_proven_back(store: Store) -> None:
    await store.open_write_cycle(cycle("c1", "n1", "verify b-1"))
    await store.open_write_cycle(cycle("c2", "n2", "bmc_health r-2"))
    assert [r.cycle_id for r in await store.open_write_cycles()] == ["c1", "c2"]
    assert [r.priors for r in await store.open_write_cycles(["n1"])] == [PRIORS]

    failed = {"not_restored": PRIORS}
    held = {"owner": "ctl-a", "epoch": 0}
    assert await store.close_write_cycle("c1", failed, T0 + timedelta(seconds=1), restored=False, **held)
    still = await store.open_write_cycles(["n1"])
    assert [(r.status, r.report, r.closed_at) for r in still] == [("open", failed, None)]

    assert await store.close_write_cycle("c1", {"restored": PRIORS}, T0 + timedelta(seconds=2), **held)
    assert [r.cycle_id for r in await store.open_write_cycles()] == ["c2"]
    (done,) = await store.write_cycles_of("verify b-1")
    assert done.status == "closed" and done.closed_at == T0 + timedelta(seconds=2)


async def test_a_journal_is_taken_over_by_compare_and_set_and_the_old_holder_closes_nothing(
    store: Store,
) -> None:
    """A process that gains a node takes its journal over (epoch + 1); the holder it was taken from
    (still restoring) no longer holds it: its close writes nothing, and a second taker that read
    the same epoch loses."""
    first = cycle("c1", "n1", "verify b-1")
    await store.open_write_cycle(first)
    assert await store.holds_write_cycle(first)
    (seen,) = await store.open_write_cycles(["n1"])
    assert seen.epoch == 0
    taken = await store.take_write_cycle(seen, "ctl-b")
    assert taken is not None and (taken.owner, taken.epoch) == ("ctl-b", 1)
    assert await store.take_write_cycle(seen, "ctl-c") is None  # the same epoch: taken already
    assert not await store.holds_write_cycle(first) and await store.holds_write_cycle(taken)

    late = {"restored": PRIORS, "by": "ctl-a"}
    assert not await store.close_write_cycle("c1", late, T0, owner="ctl-a", epoch=0)
    (still,) = await store.open_write_cycles(["n1"])
    assert (still.status, still.report, still.owner, still.epoch) == ("open", None, "ctl-b", 1)

    assert await store.close_write_cycle("c1", {"by": "ctl-b"}, T0, owner="ctl-b", epoch=1)
    assert await store.open_write_cycles() == []
    assert await store.take_write_cycle(taken, "ctl-c") is None  # closed: nothing to take
    assert not await store.close_write_cycle("c1", late, T0, owner="ctl-b", epoch=1)  # closed once
    (done,) = await store.write_cycles_of("verify b-1")
    assert done.report == {"by": "ctl-b"}


async def test_a_restore_after_a_restart_is_reported_on_its_verification(store: Store) -> None:
    row = BmcCheckRow(
        "b-1", "b", "n1", True, "queued", "", {"skip_writes": False}, None, None, "", "", T0, None, None
    )
    await store.add_bmc_checks([row])
    await store.claim_bmc_checks("ctl-a", 1, T0)
    receipt = {"target": "/gpu0", "method": "POST", "status": "200"}
    await store.note_bmc_check("b-1", "interrupted during its write cycle; restored", [receipt], T0)
    noted = await store.bmc_check("b-1")
    assert noted is not None
    assert (noted.status, noted.error, noted.writes) == (
        "interrupted",
        "interrupted during its write cycle; restored",
        [receipt],
    )
    # the restart's own sweep leaves it as reported
    assert await store.interrupt_bmc_checks("ctl-a", T0) == 0
    kept = await store.bmc_check("b-1")
    assert kept is not None
    assert kept.error == "interrupted during its write cycle; restored"


async def test_a_claim_takes_only_the_devices_named(store: Store) -> None:
    rows = [
        BmcCheckRow(f"b-{d}", "b", d, True, "queued", "", {}, None, None, "", "", T0, None, None)
        for d in ("n1", "n2", "n3")
    ]
    await store.add_bmc_checks(rows)
    got = await store.claim_bmc_checks("ctl-a", 10, T0, ["n2"])
    assert [r.device for r in got] == ["n2"]
    assert {r.device for r in await store.claim_bmc_checks("ctl-b", 10, T0)} == {"n1", "n3"}


async def test_shadow_mode_sends_no_restore_and_leaves_the_journal_open(store: Store) -> None:
    """A controller started in shadow mode finds an unfinished write cycle: it writes nothing (the
    resolver, which any restore needs first, is never called) and the journal waits for a live one."""
    from controller.execution.write_cycle import WriteCycles

    await store.open_write_cycle(cycle("c1", "n1", "verify b-1"))

    async def resolve(device: str) -> Any:
        raise AssertionError(f"shadow mode resolved {device} to restore it")

    cycles = WriteCycles(store, resolve, "ctl-b", shadow=True)
    assert await cycles.recover(lambda device: True) == 0
    from plugins.base import WriteLog

    assert await cycles.restore_open("n1", WriteLog()) == []
    assert [r.cycle_id for r in await store.open_write_cycles()] == ["c1"]


def test_a_prior_capped_without_a_value_is_still_reported() -> None:
    """A journal's prior may say capped with no value shown (LimitReading.capped is its own fact):
    the report text never raises, which would leave the journal unclosed and hide the real error."""
    from controller.execution.write_cycle import prior_text

    assert prior_text({"capped": True, "watts": None, "mode": "Manual"}) == "a cap of no value shown (Manual)"
    assert prior_text({"capped": True, "watts": 900.0, "mode": None}) == "900 W"
