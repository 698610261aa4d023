"""The store reads behind the admin API's pages, on SQLite and PostgreSQL: devices after an id (of
some ids), requests before a seq (of some devices), and verifications from an offset."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from controller.store import BmcCheckRow, DeviceUpsert, NewRequest, Store

NOW = datetime.now(UTC)


async def test_pages_of_devices_and_requests_cover_every_row_once(store: Store) -> None:
    ids = [f"node{i:03d}" for i in range(25)]
    await store.sync_inventory([DeviceUpsert(d, "redfish") for d in ids])
    await store.accept(
        [
            NewRequest(
                request_id=f"r{i:03d}",
                device=ids[i % 25],
                kind="ping",
                payload=b"",
                trace_id="",
                accepted_at=NOW + timedelta(seconds=i),
                deadline_at=NOW + timedelta(hours=1),
                owner="test",
            )
            for i in range(60)
        ]
    )
    seen, after = [], ""
    while page := await store.list_devices(limit=7, after=after):
        seen += [d.id for d in page]
        after = page[-1].id
    assert seen == ids
    some = await store.list_devices(limit=3, after="node004", ids=["node002", "node005", "node020", "nodeX"])
    assert [d.id for d in some] == ["node005", "node020"]

    requests, before = [], None
    while listed := await store.list_requests(limit=11, before_seq=before):
        requests += [r.request_id for r in listed]
        before = listed[-1].seq
    assert requests == [f"r{i:03d}" for i in reversed(range(60))]  # newest first, each once
    mine = await store.list_requests(limit=100, devices=["node001", "node002"])
    assert sorted(r.request_id for r in mine) == ["r001", "r002", "r026", "r027", "r051", "r052"]
    assert await store.list_requests(limit=100, devices=[]) == []


async def test_pages_of_verifications_run_from_an_offset(store: Store) -> None:
    rows = [
        BmcCheckRow(
            check_id=f"b-{i:03d}",
            batch_id="b",
            device=f"node{i % 3}",
            write_cycle=False,
            status="done",
            verdict="pass",
            query={},
            result=None,
            writes=None,
            error="",
            owner="",
            created_at=NOW + timedelta(seconds=i),
            started_at=None,
            finished_at=NOW + timedelta(seconds=i),
        )
        for i in range(20)
    ]
    await store.add_bmc_checks(rows)
    seen: list[str] = []
    after = None
    while page := await store.list_bmc_checks(limit=6, after=after):
        seen += [r.check_id for r in page]
        after = (page[-1].created_at, page[-1].check_id)
        if len(seen) == 6:  # a newer verification lands between two pages: no later page shifts
            newest = dataclasses.replace(rows[-1], check_id="b-new", created_at=NOW + timedelta(seconds=99))
            await store.add_bmc_checks([newest])
    assert seen == [f"b-{i:03d}" for i in reversed(range(20))]
    node1 = await store.list_bmc_checks(limit=100, devices=["node1"])
    assert [r.check_id for r in node1] == ["b-new"] + [
        f"b-{i:03d}" for i in reversed(range(20)) if i % 3 == 1
    ]
