"""Every completed request is an access to its device (`devicectl devices health`), recorded with
its completion: reached (any answer, a refusal included), not reached (unreachable), or nothing
where the request cannot tell. A real controller on a real port and SQLite file; drift sweeps off."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY

from controller.execution.runner import access_after, access_of
from controller.inventory import DeviceEntry
from controller.store import BmcAccess, Store
from plugins.base import (
    DeviceRejectedError,
    DeviceTimeoutError,
    DeviceUnreachableError,
    InvalidRequestError,
    Outcome,
    PingResult,
    TransientError,
    UnsupportedError,
)
from plugins.redfish import TlsError
from tests.controller.api.test_service import ping
from tests.controller.conftest import MEMORY
from tests.controller.desired.test_drift import eventually


def gauge(name: str, device: str) -> float | None:
    return REGISTRY.get_sample_value(name, {"device": device})


def inventory(**fails: str) -> dict[str, DeviceEntry]:
    return {
        d: DeviceEntry(d, MEMORY, {"Model": "DGX_GB200", **({"fail": f} if f else {})})
        for d, f in fails.items()
    }


async def test_each_request_records_whether_it_reached_its_device(start_controller: Any, sink: Any) -> None:
    devices = inventory(hq000="", hq001="unreachable", hq002="rejected", hq003="crash")
    h = await start_controller(devices, drift_interval=0.0)
    ids = {f"rh-{d}": d for d in devices}
    for rid, device in ids.items():
        await h.stub.SendDeviceRequest(ping(device, rid))
    await sink.wait_for(set(ids), timeout=15)
    store = h.controller.store

    async def recorded() -> dict[str, Any] | None:
        rows = {r.device: r for r in await store.bmc_health()}
        return rows if {"hq000", "hq001", "hq002"} <= set(rows) else None

    rows = await eventually(recorded, "the accesses recorded")
    ok, down, refused = rows["hq000"], rows["hq001"], rows["hq002"]
    assert ok.last_success_at is not None and ok.inaccessible_since is None and not ok.last_error
    assert down.last_success_at is None and down.inaccessible_since is not None
    assert "connection refused" in down.last_error and down.last_error_at == down.inaccessible_since
    # the device answered with a refusal: it was reached
    assert refused.last_success_at is not None and refused.inaccessible_since is None
    # the plugin's own failure says nothing of the device
    assert "hq003" not in rows
    assert gauge("devicectl_bmc_up", "hq000") == 1 and gauge("devicectl_bmc_up", "hq002") == 1
    assert gauge("devicectl_bmc_up", "hq001") == 0
    assert gauge("devicectl_bmc_up", "hq003") is None

    # a second failure keeps the start of the run of failures
    await h.stub.SendDeviceRequest(ping("hq001", "rh-again"))
    await sink.wait_for({"rh-again"}, timeout=15)

    async def second() -> Any:
        (row,) = await store.bmc_health(["hq001"])
        return row if row.last_error_at > down.last_error_at else None

    again = await eventually(second, "the second failure recorded")
    assert again.inaccessible_since == down.inaccessible_since


async def test_a_failed_health_write_never_fails_the_request(
    start_controller: Any, sink: Any, tmp_path: Path
) -> None:
    h = await start_controller(inventory(hq010=""), drift_interval=0.0)
    with sqlite3.connect(tmp_path / "devicectl.db") as db:  # every health write now fails
        db.execute("DROP TABLE bmc_health")
    await h.stub.SendDeviceRequest(ping("hq010", "rh-broken"))
    await sink.wait_for({"rh-broken"}, timeout=15)
    response = sink.unique()["rh-broken"]
    assert response.ping.success, response
    view = await h.controller.store.get_request("rh-broken")
    assert view is not None and view.status == "completed" and view.outcome == "ok", view
    assert gauge("devicectl_bmc_up", "hq010") == 1  # the gauge does not depend on the row


async def test_a_request_leaves_a_running_check_marked_as_running(store: Store) -> None:
    """A drift check marks its device as syncing until its own access ends it; a request's access
    in between records its outcome and leaves the mark. Accesses recorded together (several per
    device, new devices among them) leave each row as if recorded one by one."""
    now = datetime.now(UTC)
    await store.record_bmc_access([BmcAccess("hq020", now, syncing=True)])
    await store.record_bmc_access([BmcAccess("hq020", now, error="refused", by_request=True)])
    (row,) = await store.bmc_health(["hq020"])
    assert row.sync_in_progress and row.inaccessible_since == now and row.last_error == "refused"
    await store.record_bmc_access([BmcAccess("hq020", now + timedelta(seconds=1))])  # the check's own
    (row,) = await store.bmc_health(["hq020"])
    assert not row.sync_in_progress and row.inaccessible_since is None

    at = [now + timedelta(seconds=i) for i in range(2, 8)]
    await store.record_bmc_access(
        [
            BmcAccess("hq020", at[0], error="e1", by_request=True),
            BmcAccess("hq021", at[0], error="e2", by_request=True),  # new, failing
            BmcAccess("hq020", at[1], error="e3", by_request=True),  # the run began at at[0]
            BmcAccess("hq022", at[1], by_request=True),  # new, reached
            BmcAccess("hq021", at[2], by_request=True),
            BmcAccess("hq021", at[3], error="e4", by_request=True),  # a new run
        ]
    )
    rows = {r.device: r for r in await store.bmc_health(["hq020", "hq021", "hq022"])}
    assert (rows["hq020"].inaccessible_since, rows["hq020"].last_error) == (at[0], "e3")
    assert rows["hq020"].last_error_at == at[1] and rows["hq020"].last_success_at == now + timedelta(
        seconds=1
    )
    assert (rows["hq021"].inaccessible_since, rows["hq021"].last_error) == (at[3], "e4")
    assert rows["hq021"].last_success_at == at[2] and rows["hq021"].updated_at == at[3]
    assert rows["hq022"].last_success_at == at[1] and rows["hq022"].inaccessible_since is None
    assert not any(r.sync_in_progress for r in rows.values())


def test_what_a_plugins_answer_says_of_its_device() -> None:
    """Reached: any answer (`reached_at`), a refusal included; not reached: the plugin's
    `reach_error`, an unreachable device (a TLS failure among them) or a timeout; else nothing."""
    now = datetime.now(UTC)
    tls = TlsError("https://bmc:443: certificate verify failed")
    for exc in (DeviceUnreachableError("refused"), DeviceTimeoutError("no answer in 5 s"), tls):
        access = access_after("d", exc)
        assert access is not None and access.error == str(exc) and access.by_request
    refused = access_after("d", DeviceRejectedError("400 PropertyValueNotInList"))
    assert refused is not None and not refused.error
    for unknown in (
        TransientError("plugin memory is not reachable"),
        InvalidRequestError("bad"),
        UnsupportedError("no"),
    ):
        assert access_after("d", unknown) is None

    down = access_of("d", Outcome(PingResult(False, "x"), reached_at=now, reach_error="connect refused"))
    assert down is not None and down.error == "connect refused"
    up = access_of("d", Outcome(PingResult(False, "404"), reached_at=now))
    assert up is not None and not up.error and up.at == now
    assert access_of("d", Outcome(PingResult(True))) is None  # answered without calling the device
