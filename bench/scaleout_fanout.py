"""The fan-out half of the scale-out benchmark (`bench.scaleout`): one activation per simulated
BMC, sent round robin over the front doors of `k` controller processes on one PostgreSQL database,
first contact then steady state, for each process count in turn against the same simulators."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import grpc

from bench.cluster import ControllerGroup, serving_group
from bench.fanout_plan import EXPECTED_WRITES, PHASES, RETRY_CODES, SEND_ATTEMPTS, Phase, activation
from bench.responses import ResponseTracker
from bench.scaleout_config import ScaleoutConfig
from bench.simulators import SimulatorProcesses
from bench.util import say
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc
from controller.inventory import load_inventory


async def run_fanout(config: ScaleoutConfig, workdir: Path) -> list[dict[str, Any]]:
    sims = SimulatorProcesses(
        workdir / "bmcs", config.bmcs, latency=config.latency, per_process=config.per_sim_process
    )
    say(f"scale-out fan-out: starting {config.bmcs} simulated BMCs ({config.latency:g} s per call)")
    await sims.start()
    if config.pin_simulators:
        pin(sims.pids, set(config.pin_simulators))
    rows: list[dict[str, Any]] = []
    try:
        for k in config.processes:
            await _expire_sessions(sims)  # the previous processes' sessions would fill the BMCs' tables
            rows += await _fanout_k(k, config, workdir / f"k{k}", sims)
    finally:
        await sims.stop()
    return rows


def pin(pids: Sequence[int], cpus: set[int]) -> None:
    """Confine every thread of these processes to `cpus` (`taskset` for running processes)."""
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            os.sched_setaffinity(int(task.name), cpus)


async def _expire_sessions(sims: SimulatorProcesses) -> None:
    async with aiohttp.ClientSession() as http:
        for base in sims.control_urls:
            async with http.post(base + "/sessions/expire") as reply:
                reply.raise_for_status()


async def _fanout_k(
    k: int, config: ScaleoutConfig, workdir: Path, sims: SimulatorProcesses
) -> list[dict[str, Any]]:
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    devices = sorted(load_inventory(sims.inventory))
    tracker = ResponseTracker()
    callback = await tracker.start()
    label = f"scale-out fan-out n={config.bmcs}, {k} process(es)"
    rows = []
    try:
        async with serving_group(
            workdir,
            k,
            label,
            callback=callback,
            inventory=sims.inventory,
            secrets_dir=sims.secrets_dir,
            max_concurrency=max(config.bmcs, 1024),
            lease_ttl=config.lease_ttl,
            name="fanout",
            log_level=config.log_level,
        ) as (group, balance):
            channels = [grpc.aio.insecure_channel(a) for a in group.addresses]
            try:
                await asyncio.gather(*(c.channel_ready() for c in channels))
                stubs = [dgrpc.DeviceControllerStub(c) for c in channels]
                for phase in PHASES:
                    row = await _phase(k, config, group, sims, tracker, stubs, devices, phase, label)
                    rows.append({**row, **balance})
            finally:
                await asyncio.gather(*(c.close() for c in channels))
        for row in rows:
            row["tracebacks"] = group.tracebacks()
            row["peak_rss_mb"] = group.peak_rss_mb()
            row["problems"] = _fanout_problems(row, config)
    finally:
        await tracker.stop()
    return rows


async def _phase(
    k: int,
    config: ScaleoutConfig,
    group: ControllerGroup,
    sims: SimulatorProcesses,
    tracker: ResponseTracker,
    stubs: list[dgrpc.DeviceControllerStub],
    devices: list[str],
    phase: Phase,
    label: str,
) -> dict[str, Any]:
    await sims.reset()
    ids = [f"{phase.group}-k{k}-{device}" for device in devices]
    tracker.expect(ids)
    slots = asyncio.Semaphore(500)

    async def send(index: int, device: str, rid: str) -> None:
        request = activation(device, rid, phase)
        async with slots:
            for attempt in range(SEND_ATTEMPTS):
                try:
                    await stubs[index % k].SendDeviceRequest(request, timeout=120)
                    return
                except grpc.aio.AioRpcError as exc:
                    if exc.code() not in RETRY_CODES or attempt == SEND_ATTEMPTS - 1:
                        raise
                    await asyncio.sleep(min(0.1 * 2**attempt, 2.0))

    cpu_before, sim_before = group.cpu_seconds(), sims.cpu_seconds()
    started = time.monotonic()
    await asyncio.gather(*(send(i, d, r) for i, (d, r) in enumerate(zip(devices, ids, strict=True))))
    last = await tracker.wait(120 + config.bmcs * 0.5, f"{label} {phase.name}")
    cpu = sum(after - before for after, before in zip(group.cpu_seconds(), cpu_before, strict=True))
    bmcs = await sims.stats()
    calls = [int(b["total_calls"]) for b in bmcs]
    writes = [int(b["writes_applied"]) for b in bmcs]
    floor = max(calls, default=0) * config.latency / config.per_bmc
    elapsed = last - started
    row = {
        "processes": k,
        "phase": phase.name,
        "bmcs": config.bmcs,
        "elapsed": elapsed,
        "floor": floor,
        "ratio_to_floor": elapsed / floor if floor else 0.0,
        "calls": sum(calls),
        "calls_per_bmc_max": max(calls, default=0),
        "writes_per_bmc": [min(writes, default=0), max(writes, default=0)],
        "controller_cpu_s": cpu,
        "cpu_ms_per_call": cpu / sum(calls) * 1000 if sum(calls) else 0.0,
        "calls_per_cpu_s": sum(calls) / cpu if cpu else 0.0,
        "simulator_cpu_s": sims.cpu_seconds() - sim_before,
        "max_in_flight_per_bmc": max((int(b["max_in_flight"]) for b in bmcs), default=0),
        "bmcs_two_controllers": sum(1 for b in bmcs if int(b["session_overlaps"]) > 0),
        "responses": len(tracker.arrivals),
        "failures": len(tracker.failures),
        "failure_examples": sorted(set(tracker.failures.values()))[:2],
        "duplicates": tracker.duplicates,
    }
    say(
        f"{label} {phase.name}: {elapsed:.2f} s (floor {floor:.2f} s, x{row['ratio_to_floor']:.1f}), "
        f"{row['calls']} BMC calls, {row['cpu_ms_per_call']:.2f} ms controller CPU/call (all processes)"
    )
    return row


def _fanout_problems(row: dict[str, Any], config: ScaleoutConfig) -> list[str]:
    problems = []
    if row["responses"] != config.bmcs or row["failures"] or row["duplicates"]:
        problems.append(
            f"{row['responses']} of {config.bmcs} responses, {row['failures']} failed "
            f"{row['failure_examples']}, {row['duplicates']} duplicates"
        )
    if row["writes_per_bmc"] != [EXPECTED_WRITES, EXPECTED_WRITES]:
        problems.append(f"cap writes per BMC {row['writes_per_bmc']}, expected {EXPECTED_WRITES}")
    if row["max_in_flight_per_bmc"] > config.per_bmc:
        problems.append(f"{row['max_in_flight_per_bmc']} calls in flight on one BMC (limit {config.per_bmc})")
    if row["bmcs_two_controllers"]:
        problems.append(f"{row['bmcs_two_controllers']} BMCs served by two controllers at once")
    if row["tracebacks"]:
        problems.append(f"{row['tracebacks']} tracebacks in the controllers' logs")
    if row["elapsed"] < row["floor"]:
        problems.append("faster than the floor: the counters or the clock are wrong")
    if row.get("balanced_s") is None:
        problems.append(f"shards not shared out: {row.get('problem', '?')}")
    return problems
