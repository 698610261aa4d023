"""`devicectl verify --all` on a 2,000-node inventory through a real `devicectl serve` (SQLite): the
command waits until every verification of the run has finished (the server counts the run in SQL;
the command never reads a truncated list as "all done"), then shows all 2,000 by following pages,
and no reply of StartVerify or GetBmcCheck nears gRPC's 4 MiB message limit. Every BMC address is a
closed loopback port (each node its own address), so each verification fails fast and for real."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller._proto.devicecontroller.v1 import admin_pb2_grpc
from controller.api import pages
from tests.controller.cli.test_lists_at_scale import NODES, PER_RACK, node, serving
from tests.controller.terminal import pipe

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

MESSAGE_LIMIT = 4 * 1024 * 1024
FAST = ("--latency-samples", "1", "--samples-per-telemetry", "1", "--telemetry-interval-ms", "10")


def _inventory() -> str:
    return "\n".join(
        f'[[device]]\nid = "{node(i)}"\nplugin = "redfish"\nmodel = "DGX_GB200"\n'
        f'labels = {{ rack = "r{i // PER_RACK:02d}" }}\n'
        f'[device.redfish]\nurl = "https://127.{i // 250}.{i % 250}.1:9"\n'
        for i in range(NODES)
    )


@pytest.fixture
async def unreachable_fleet(tmp_path: Path) -> AsyncIterator[str]:
    (tmp_path / "inventory.toml").write_text(_inventory())
    url = f"sqlite:///{tmp_path / 'devicectl.db'}"
    async with serving(tmp_path, url, "verify-scale", "--auto-upgrade") as server:
        yield server


async def test_verify_all_waits_for_every_one_of_2000_and_shows_them_all(unreachable_fleet: str) -> None:
    done = await asyncio.to_thread(
        pipe, "verify", "--all", *FAST, "-o", "json", "--server", unreachable_fleet, timeout=600
    )
    assert done.code == 1, done.err[-2000:]  # every BMC refused: the run failed, and says so
    assert "Traceback" not in done.err
    rows: list[dict[str, Any]] = json.loads(done.out)
    assert sorted(r["device"] for r in rows) == [node(i) for i in range(NODES)]
    assert len({r["check_id"] for r in rows}) == NODES and len({r["batch_id"] for r in rows}) == 1
    assert not [r for r in rows if r["status"] in ("queued", "running")]  # it waited for all of them


async def test_start_verify_and_its_pages_stay_far_under_the_message_limit(unreachable_fleet: str) -> None:
    async with grpc.aio.insecure_channel(unreachable_fleet) as channel:
        admin = admin_pb2_grpc.DeviceControllerAdminStub(channel)
        started = await admin.StartVerify(
            apb.StartVerifyRequest(all=True, latency_samples=1, samples_per_telemetry=1), timeout=120
        )
        assert started.progress.total == NODES and started.progress.queued == NODES
        assert 0 < len(started.checks) < NODES and started.next_page_token
        answers = [started]
        while answers[-1].next_page_token:
            token = answers[-1].next_page_token
            answers.append(
                await admin.GetBmcCheck(apb.GetBmcCheckRequest(id=started.batch_id, page_token=token))
            )
        assert sorted(c.device for a in answers for c in a.checks) == [node(i) for i in range(NODES)]
        assert max(a.ByteSize() for a in answers) < pages.PAGE_BYTES + 4096 < MESSAGE_LIMIT
        polled = await admin.GetBmcCheck(apb.GetBmcCheckRequest(id=started.batch_id, progress_only=True))
        assert polled.progress.total == NODES and not polled.checks
