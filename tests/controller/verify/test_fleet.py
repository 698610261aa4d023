"""A fleet's verification survives a SIGKILL of the controller: 500 simulated BMCs (one process, one
HTTPS socket each), a real `devicectl serve` killed halfway, then restarted. Every verification ends
`done` or `interrupted` (none lost, none left queued or running), progress moves while it runs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from bmcsim import SimulatorFleet
from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller._proto.devicecontroller.v1 import admin_pb2_grpc as agrpc
from controller.verify.render import counted, progress
from tests.serve_process import ROOT, free_port, start_serving

#: the fleet (DEVICECTL_VERIFY_FLEET overrides it for a quicker local run)
FLEET = int(os.environ.get("DEVICECTL_VERIFY_FLEET", "500"))


async def _batch(admin: agrpc.DeviceControllerAdminStub, batch: str) -> list[apb.BmcCheckRecord]:
    """Every verification of the run, page after page."""
    checks: list[apb.BmcCheckRecord] = []
    token = ""
    while True:
        page = await admin.GetBmcCheck(apb.GetBmcCheckRequest(id=batch, page_token=token), timeout=30)
        checks += page.checks
        token = page.next_page_token
        if not token:
            return checks


@pytest.mark.slow
@pytest.mark.timeout(900)  # 500 BMCs, two controller starts; about 4 minutes on 2 busy cores
async def test_a_fleet_verification_survives_a_sigkill_halfway_and_shows_progress(
    tmp_path: Path, sink: Any
) -> None:
    async with SimulatorFleet(n=FLEET, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        inventory = tmp_path / "inventory.toml"
        secrets = fleet.write_inventory(inventory, tmp_path / "secrets")
        port = free_port()
        args = [
            sys.executable, "-m", "controller", "serve",
            "--listen", f"127.0.0.1:{port}",
            "--database-url", f"sqlite:///{tmp_path}/devicectl.db",
            "--callback", sink.address,
            "--inventory", str(inventory),
            "--secrets-dir", str(secrets),
            "--instance-id", "verify-fleet",
            "--auto-upgrade",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        log = tmp_path / "serve.log"
        proc = await start_serving(args, env, log, port, tries=300)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                admin = agrpc.DeviceControllerAdminStub(channel)
                started = await admin.StartVerify(
                    # NOTE: latency's threshold out of reach: this run checks what a SIGKILL leaves,
                    # and a 500-BMC re-verification on a loaded 2-core host can take a GET past the
                    # default 1 s p95 (a latency warning is the host's, not the restart's)
                    apb.StartVerifyRequest(
                        all=True, latency_samples=2, samples_per_telemetry=1, latency_p95_ms=60_000
                    ),
                    timeout=30,
                )
                batch = started.batch_id
                assert started.progress.total == FLEET and started.progress.queued == FLEET
                seen: list[str] = []
                while True:  # halfway: SIGKILL, whatever runs at that moment
                    checks = await _batch(admin, batch)
                    seen.append(progress(counted(checks)))
                    if sum(c.status == "done" for c in checks) >= FLEET // 2:
                        break
                    await asyncio.sleep(0.2)
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            done_before = {c.check_id for c in checks if c.status == "done"}
            assert len({s.split(" ", 1)[0] for s in seen}) > 1, f"no progress shown: {seen}"

            proc = await start_serving(args, env, log, port, tries=300)
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                admin = agrpc.DeviceControllerAdminStub(channel)
                until = time.monotonic() + 600
                while True:
                    checks = await _batch(admin, batch)
                    if all(c.status not in ("queued", "running") for c in checks):
                        break
                    assert time.monotonic() < until, progress(counted(checks))
                    await asyncio.sleep(0.5)
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
    assert len(checks) == FLEET and len({c.device for c in checks}) == FLEET  # nothing lost
    status = {c.check_id: c.status for c in checks}
    interrupted = [c for c in checks if c.status == "interrupted"]
    assert set(status.values()) <= {"done", "interrupted"}, progress(counted(checks))
    assert done_before <= {i for i, s in status.items() if s == "done"}  # kept as they were
    assert len(interrupted) <= 32 and all("controller restart" in c.error for c in interrupted)
    assert sum(s == "done" for s in status.values()) >= FLEET - 32  # the rest ran after the restart
    warned = [
        (c.device, check["name"], check["detail"])
        for c in checks
        if c.status == "done" and c.verdict != "pass"
        for check in json.loads(c.result_json)["checks"]
        if check["status"] != "pass"
    ]
    assert {c.verdict for c in checks if c.status == "done"} == {"pass"}, (progress(counted(checks)), warned)
