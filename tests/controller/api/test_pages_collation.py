"""Pages do not depend on the database's collation. A PostgreSQL database created with the ICU
en-US collation (as a cluster initialised with en_US.UTF-8 orders text) sorts `node_B` before
`node-a`; Python, the selectors and the page tokens sort by code point. Lists page by code point in
SQL too (COLLATE "C"), so following the tokens yields every device once, in one order, with a
selector or without, at any page size."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller.inventory import DeviceEntry
from controller.store import BmcAccess
from tests.conftest import _admin_engine, _require_postgres, pg_admin_url
from tests.controller.conftest import MEMORY

pytestmark = pytest.mark.postgres

#: ids whose order differs between code point order and en-US ('-' 0x2D < '_' 0x5F < 'a')
IDS = ["node-a", "node_B", "node-b", "node_a", "node.c", "nodeA", "node-B", "node_c", "node a", "nodeb"]


@pytest.fixture
def db_url() -> Iterator[str]:
    """A fresh PostgreSQL database whose default collation is ICU en-US, dropped afterwards."""
    _require_postgres()
    name = f"devicectl_test_{uuid.uuid4().hex[:16]}"
    engine = _admin_engine()
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(
                f"CREATE DATABASE \"{name}\" TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' "
                "LOCALE 'C.UTF-8'"
            )
        yield pg_admin_url().set(database=name).render_as_string(hide_password=False)
    finally:
        with engine.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        engine.dispose()


def _inventory() -> dict[str, DeviceEntry]:
    return {
        d: DeviceEntry(d, MEMORY, {"Model": "DGX_GB200"}, labels={"rack": "r1" if i % 3 else "r2"})
        for i, d in enumerate(IDS)
    }


async def _follow(call: Any, request: Any, field: str) -> list[str]:
    ids: list[str] = []
    token = ""
    while True:
        request.page_token = token
        answer = await call(request)
        ids += [getattr(r, "id", "") or getattr(r, "device", "") for r in getattr(answer, field)]
        token = answer.next_page_token
        if not token:
            return ids


async def test_pages_follow_code_point_order_on_an_en_us_database(db_url: str, start_controller: Any) -> None:
    h = await start_controller(_inventory())
    engine = sa.create_engine(db_url)
    with engine.connect() as conn:  # the database's own order differs: the test means something
        database_order = list(conn.exec_driver_sql("SELECT id FROM devices ORDER BY id").scalars())
    engine.dispose()
    assert sorted(database_order) == sorted(IDS) and database_order != sorted(IDS), database_order

    now = datetime.now(UTC)
    await h.controller.store.record_bmc_access(
        [BmcAccess(d, now, error="refused" if i % 2 else "") for i, d in enumerate(IDS)]
    )
    rack2 = sorted(d for i, d in enumerate(IDS) if i % 3 == 0)
    unreachable = sorted(d for i, d in enumerate(IDS) if i % 2)
    for size in (1, 2, 3):
        got = await _follow(h.admin.ListDevices, apb.ListDevicesRequest(page_size=size), "devices")
        assert got == sorted(IDS), (size, got)
        got = await _follow(
            h.admin.ListDevices, apb.ListDevicesRequest(page_size=size, selector="rack=r2"), "devices"
        )
        assert got == rack2, (size, got)
        got = await _follow(h.admin.ListBmcHealth, apb.ListBmcHealthRequest(page_size=size), "devices")
        assert got == sorted(IDS), (size, got)
        got = await _follow(
            h.admin.ListBmcHealth, apb.ListBmcHealthRequest(page_size=size, selector="rack=r2"), "devices"
        )
        assert got == rack2, (size, got)
        got = await _follow(
            h.admin.ListBmcHealth, apb.ListBmcHealthRequest(page_size=size, unreachable=True), "devices"
        )
        assert got == unreachable, (size, got)
