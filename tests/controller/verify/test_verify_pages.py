"""A verification run larger than any page: StartVerify and GetBmcCheck answer in bounded pages with
the run's progress counted by the database, so `verify --wait` cannot believe a run finished while
part of it still runs, and no reply nears gRPC's 4 MiB message limit. The run here holds 6,000
verifications (past the 5,000 rows the store once cut a run to), each with the result a real GB200
verification records (~2 KB of checks and evidence), written through the store API."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import grpc
import pytest

from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller.api import pages
from controller.store import BmcCheckRow
from tests.controller.terminal import pipe

RUN = 6000
STILL_RUNNING = 5  # the run's last verifications: another controller still runs them
MESSAGE_LIMIT = 4 * 1024 * 1024


def _result(i: int) -> dict[str, Any]:
    evidence = {f"/redfish/v1/Chassis/HGX_GPU_SXM_{n}/Controls/PowerLimit_{n}": 700 for n in range(8)}
    checks = [
        {"name": f"check-{k}", "status": "pass", "detail": f"node{i:05d} read back {k}", "evidence": evidence}
        for k in range(3)
    ]
    return {"verdict": "pass", "checks": checks}


def _rows(batch: str, now: datetime) -> list[BmcCheckRow]:
    return [
        BmcCheckRow(
            check_id=f"{batch}-{i:05d}",
            batch_id=batch,
            device=f"node{i:05d}",
            write_cycle=False,
            status="running" if i >= RUN - STILL_RUNNING else "done",
            verdict="" if i >= RUN - STILL_RUNNING else "pass",
            query={},
            result=None if i >= RUN - STILL_RUNNING else _result(i),
            writes=None,
            error="",
            owner="another-controller",
            created_at=now,
            started_at=now,
            finished_at=None if i >= RUN - STILL_RUNNING else now,
        )
        for i in range(RUN)
    ]


async def _pages(admin: Any, batch: str) -> list[apb.VerifyBatch]:
    out = [await admin.GetBmcCheck(apb.GetBmcCheckRequest(id=batch))]
    while out[-1].next_page_token:
        token = out[-1].next_page_token
        out.append(await admin.GetBmcCheck(apb.GetBmcCheckRequest(id=batch, page_token=token)))
    return out


async def test_a_run_past_5000_is_counted_whole_and_paged_without_a_gap(
    start_controller: Any, tmp_path: Any
) -> None:
    h = await start_controller()
    batch = "feedc0ffee01"
    now = datetime.now(UTC)
    await h.controller.store.add_bmc_checks(_rows(batch, now))

    polled = await h.admin.GetBmcCheck(apb.GetBmcCheckRequest(id=batch, progress_only=True))
    assert not polled.checks and polled.batch_id == batch
    p = polled.progress
    assert (p.total, p.done, p.passed, p.running, p.queued) == (RUN, RUN - STILL_RUNNING, RUN - 5, 5, 0)

    answers = await _pages(h.admin, batch)
    ids = [c.check_id for a in answers for c in a.checks]
    assert ids == [f"{batch}-{i:05d}" for i in range(RUN)]  # each once, in order, none cut
    assert len(answers) > 1 and all(a.ByteSize() < pages.PAGE_BYTES + 4096 for a in answers)
    assert max(a.ByteSize() for a in answers) < MESSAGE_LIMIT
    assert all(a.progress.total == RUN and a.progress.running == STILL_RUNNING for a in answers)

    # the CLI follows the pages: every verification of the run, the running ones too
    shown = await asyncio.to_thread(
        pipe, "verify", "show", batch, "-o", "json", "--server", f"127.0.0.1:{h.controller.port}", timeout=240
    )
    assert shown.err == "", shown.err[-2000:]
    rows = json.loads(shown.out)
    assert [r["check_id"] for r in rows] == ids
    assert sum(r["status"] == "running" for r in rows) == STILL_RUNNING

    # the last ones finish: only now does the run read as finished
    for i in range(RUN - STILL_RUNNING, RUN):
        await h.controller.store.finish_bmc_check(f"{batch}-{i:05d}", "done", verdict="warn", at=now)
    done = (await h.admin.GetBmcCheck(apb.GetBmcCheckRequest(id=batch, progress_only=True))).progress
    assert (done.total, done.done, done.running, done.warned) == (RUN, RUN, 0, STILL_RUNNING)


async def test_a_page_token_of_another_run_or_altered_is_refused_with_one_line(start_controller: Any) -> None:
    h = await start_controller()
    now = datetime.now(UTC)
    for batch in ("aaaaaaaaaaaa", "bbbbbbbbbbbb"):
        await h.controller.store.add_bmc_checks(_rows(batch, now)[:1200])
    first = await h.admin.GetBmcCheck(apb.GetBmcCheckRequest(id="aaaaaaaaaaaa", page_size=10))
    assert len(first.checks) == 10 and first.next_page_token
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await h.admin.GetBmcCheck(apb.GetBmcCheckRequest(id="bbbbbbbbbbbb", page_token=first.next_page_token))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "is not a token of this list" in (refused.value.details() or "")
    # a prefix naming more than one verification, or none, is refused as before
    for name, why in (("aaaa", "more than one verification"), ("cccc", "no verification")):
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await h.admin.GetBmcCheck(apb.GetBmcCheckRequest(id=name))
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND and why in (missing.value.details() or "")
    one = await h.admin.GetBmcCheck(apb.GetBmcCheckRequest(id="aaaaaaaaaaaa-00007"))
    assert [c.check_id for c in one.checks] == ["aaaaaaaaaaaa-00007"] and not one.batch_id
