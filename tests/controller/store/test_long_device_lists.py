"""A filter naming more devices than a statement may carry bound parameters (SQLite 32,766, psycopg
65,535), on SQLite and PostgreSQL: every store read or claim that takes a device list answers as it
does for a short one. A selector over a large inventory, or the shards one process holds, can name
that many."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from controller.store import BmcAccess, BmcCheckRow, DeviceUpsert, NewRequest, Store, WriteCycleRow

T0 = datetime(2026, 12, 6, 1, 0, tzinfo=UTC)
#: more ids than either backend takes as bound parameters of one statement
MANY = 70_000
PRIORS = {"gpu/0": {"watts": None, "capped": False, "mode": "Automatic", "resource": "/gpu0"}}


def _long_list(*named: str) -> list[str]:
    """`named` among MANY ids of devices that do not exist."""
    return [f"absent{i:05d}" for i in range(MANY - len(named))] + list(named)


def _check(check_id: str, device: str, at: datetime) -> BmcCheckRow:
    return BmcCheckRow(check_id, "b", device, False, "queued", "", {}, None, None, "", "", at, None, None)


async def test_every_device_filter_takes_a_list_longer_than_a_statements_parameters(store: Store) -> None:
    nodes = [f"n{i}" for i in range(4)]
    await store.sync_inventory([DeviceUpsert(d, "redfish") for d in nodes])
    await store.accept(
        [
            NewRequest(
                request_id=f"r{i}",
                device=nodes[i % 4],
                kind="ping",
                payload=b"",
                trace_id="",
                accepted_at=T0 + timedelta(seconds=i),
                deadline_at=T0 + timedelta(hours=1),
                owner="test",
            )
            for i in range(8)
        ]
    )
    await store.add_bmc_checks([_check(f"c{i}", nodes[i], T0 + timedelta(seconds=i)) for i in range(4)])
    for i in (1, 2):
        await store.open_write_cycle(
            WriteCycleRow(f"w{i}", nodes[i], "verify b", PRIORS, "open", None, "ctl-a", T0, None)
        )
    chosen = _long_list("n1", "n2")
    # ids a JSON array and SQL text must carry as they are: quotes, a backslash, a `]`, non-ASCII
    hostile = ["n'1", 'n"1', "n\\1", "n]1", "nœ1", "n 1"]
    chosen[: len(hostile)] = hostile

    assert [d.id for d in await store.list_devices(limit=10, ids=chosen)] == ["n1", "n2"]
    assert [d.id for d in await store.list_devices(limit=10, after="n1", ids=chosen)] == ["n2"]
    requests = await store.list_requests(limit=10, devices=chosen)
    assert [r.request_id for r in requests] == ["r6", "r5", "r2", "r1"]
    assert [r.check_id for r in await store.list_bmc_checks(limit=10, devices=chosen)] == ["c2", "c1"]
    assert [r.cycle_id for r in await store.open_write_cycles(chosen)] == ["w1", "w2"]
    assert await store.list_verifications(limit=10, devices=chosen) == []

    claimed = await store.claim_bmc_checks("ctl-a", 10, T0, devices=chosen)
    assert [r.check_id for r in claimed] == ["c1", "c2"]
    for r in claimed:
        await store.finish_bmc_check(r.check_id, "done", verdict="pass", result={}, at=T0)
    assert sorted(await store.last_bmc_checks(chosen)) == ["n1", "n2"]
    await store.record_bmc_access([BmcAccess("n1", T0), BmcAccess("n3", T0), BmcAccess("n'1", T0)])
    health = await store.bmc_health(chosen, limit=2)
    assert [r.device for r in health] == ["n'1", "n1"]  # code point order, the page's limit
    assert [r.device for r in await store.bmc_health(chosen, after="n'1")] == ["n1"]
    # a list of exactly one statement's worth still works, and a short one is unchanged
    assert [d.id for d in await store.list_devices(limit=10, ids=["n3", "nX"])] == ["n3"]
