"""Fleet fan-out: one resource-group activation per simulated GB200 BMC, until every response
has reached the topology sink; compared with the floor and with a synchronous-client baseline.

Per fleet size the run goes:

1. start the BMC simulators (own processes, fixed per-call latency) and the controller (own
   process, SQLite, `--max-concurrency` = fleet size, per-BMC concurrency 2: the plugin default);
2. devicectl, "first contact": one activation per BMC on the fresh controller. Each BMC is new to
   it, so the plugin logs in and discovers the service before setting the caps;
3. devicectl, "steady state": a second activation (another resource group, other values). The
   controller now holds a Redfish session and the discovery (in the device state) for each BMC,
   as it does in production after the first request, so only the cap calls remain;
4. the baseline (`bench.baseline`), both ways, after the controller has stopped: first contact
   walks the service like the plugin does; steady state is the operator's script proper, with the
   platform's URIs hard-coded; both log in and out every time, as a script run does.

The activation sets the node policy (split over the tray's two superchip modules), 4 GPU caps and
2 CPU caps: 8 writes per BMC, each one GET, PATCH and read-back GET; in steady state the
controller's own read-back from the first activation stands in for the GET (docs/redfish.md,
"Read-backs as priors"), so 8 PATCH-GET chains.

The floor, per BMC: `calls x latency / concurrency`, with `calls` counted by the simulator for the
phase. The BMCs are independent and served in parallel, so the fleet's floor is the largest
per-BMC floor. It is a lower bound: calls that depend on each other (a read-back after its PATCH,
discovery's walk down the resource tree) cannot overlap, so no client could reach it exactly when
the dependencies are longer than the slots allow; in steady state it is exact (8 independent
PATCH-GET chains on 2 slots take 4 rounds of 2 calls, i.e. 16 x latency / 2).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

import grpc

from bench.baseline import PASSWORD_ENV
from bench.fanout_plan import (
    EXPECTED_WRITES,
    PHASES,
    RETRY_CODES,
    SEND_ATTEMPTS,
    FanoutConfig,
    Phase,
    activation,
)
from bench.processes import ControllerProcess, database, run_json
from bench.procstats import cpu_seconds
from bench.profiling import Profiler
from bench.responses import ResponseTracker
from bench.simulators import PASSWORD, USERNAME, SimulatorProcesses
from bench.util import child_env, jsonable, percentile, say
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc
from controller.inventory import load_inventory


async def run_fanout(config: FanoutConfig, workdir: Path) -> dict[str, Any]:
    """Every fleet size in turn."""
    out: dict[str, Any] = {"config": jsonable(asdict(config)), "sizes": [], "failed_sizes": []}
    for n in config.sizes:
        try:
            out["sizes"].append(await _one_size(n, config, workdir / f"fanout-{n}"))
        except Exception as exc:  # one size failing (e.g. out of file descriptors) must not lose the others
            say(f"fanout n={n}: FAILED: {type(exc).__name__}: {exc}")
            out["failed_sizes"].append({"n": n, "error": f"{type(exc).__name__}: {exc}"[:2000]})
    return out


async def _one_size(n: int, config: FanoutConfig, workdir: Path) -> dict[str, Any]:
    sims = SimulatorProcesses(workdir, n, latency=config.latency, per_process=config.per_process)
    say(f"fanout n={n}: starting {n} simulated BMCs in {sims.processes} process(es)")
    began = time.monotonic()
    await sims.start()
    say(f"fanout n={n}: simulators ready after {time.monotonic() - began:.1f} s")
    result: dict[str, Any] = {"n": n, "simulator_processes": sims.processes}
    try:
        result.update(await _devicectl(n, config, workdir, sims))
        if config.baseline:
            result["baseline"] = [await _baseline(n, config, workdir, sims, phase) for phase in PHASES]
            for ours, theirs in zip(result["phases"], result["baseline"], strict=True):
                ours["speedup"] = theirs["elapsed"] / ours["elapsed"] if ours["elapsed"] > 0 else 0.0
                theirs["differs_from_devicectl"] = _call_diff(ours["calls_per_bmc"], theirs["calls_per_bmc"])
    finally:
        await sims.stop()
    return result


async def _devicectl(n: int, config: FanoutConfig, workdir: Path, sims: SimulatorProcesses) -> dict[str, Any]:
    devices = sorted(load_inventory(sims.inventory))
    if len(devices) != n:
        raise RuntimeError(f"the simulators' inventory lists {len(devices)} devices, expected {n}")
    tracker = ResponseTracker()
    callback = await tracker.start()
    phases = []
    try:
        with database(config.backend, workdir) as url:
            controller = ControllerProcess(
                workdir,
                database_url=url,
                callback=callback,
                inventory=_inventory(sims, config, workdir),
                secrets_dir=sims.secrets_dir,
                max_concurrency=max(n, 1024),
                device_call_timeout=600.0,
                log_level=config.log_level,
                name=f"controller-{n}",
                # the first-contact phase measures the cold path: no warm-up ahead of it
                # (controller/execution/warmup.py; a ref without one ignores the variable)
                env={"DEVICECTL_WARMUP_CONCURRENCY": "0"},
            )
            try:
                await controller.start()
                async with grpc.aio.insecure_channel(controller.address) as channel:
                    await channel.channel_ready()  # connect before any clock starts
                    stub = dgrpc.DeviceControllerStub(channel)
                    for phase in PHASES:
                        phases.append(
                            await _phase(n, config, controller, sims, tracker, stub, devices, phase)
                        )
            finally:
                final = await controller.stop()
    finally:
        await tracker.stop()
    return {
        "max_concurrency": max(n, 1024),
        "phases": phases,
        "peak_rss_mb": final.peak_rss_bytes / 2**20 if final else 0.0,
    }


async def _phase(
    n: int,
    config: FanoutConfig,
    controller: ControllerProcess,
    sims: SimulatorProcesses,
    tracker: ResponseTracker,
    stub: dgrpc.DeviceControllerStub,
    devices: list[str],
    phase: Phase,
) -> dict[str, Any]:
    label = f"fanout n={n} devicectl {phase.name}"
    await sims.reset()
    ids = [f"{phase.group}-{device}" for device in devices]
    requests = [activation(d, rid, phase) for d, rid in zip(devices, ids, strict=True)]
    tracker.expect(ids)
    slots = asyncio.Semaphore(500)
    retries = 0

    ack_ms: list[float] = []

    async def send(request: pb.DeviceControllerRequest) -> None:
        nonlocal retries
        async with slots:
            for attempt in range(SEND_ATTEMPTS):
                try:
                    sent = time.monotonic()
                    await stub.SendDeviceRequest(request, timeout=120)
                    ack_ms.append((time.monotonic() - sent) * 1000)  # while the wave runs
                    return
                except grpc.aio.AioRpcError as exc:
                    # A topology server retries a refusal; the request_id makes a repeat harmless
                    # (a journaled duplicate is acknowledged and not run again).
                    if exc.code() not in RETRY_CODES or attempt == SEND_ATTEMPTS - 1:
                        raise
                    retries += 1
                    await asyncio.sleep(min(0.1 * 2**attempt, 2.0))

    say(f"{label}: sending {n} activations")
    profile = f"fanout-{n}-{phase.group}"
    async with Profiler(config.profile_dir).attach(controller.pid, profile):
        cpu_before, sim_before, own_before, plugin_before = (
            controller.sample().cpu_seconds,
            sims.cpu_seconds(),
            time.process_time(),
            _plugin_cpu(controller.pid),
        )
        started = time.monotonic()
        await asyncio.gather(*(send(r) for r in requests))
        acked = time.monotonic()
        last = await tracker.wait(120 + n * 0.5, label)
    sample = controller.sample()
    plugin_cpu = _plugin_cpu(controller.pid) - plugin_before
    cpu = sample.cpu_seconds - cpu_before + plugin_cpu  # the plugin process works for the controller
    sim_cpu, own_cpu = sims.cpu_seconds() - sim_before, time.process_time() - own_before
    stats = await sims.stats()
    summary = _counters(stats, config)
    elapsed = last - started
    summary.update(
        {
            "phase": phase.name,
            "elapsed": elapsed,
            "acked_after": acked - started,
            "send_retries": retries,
            "ratio_to_floor": elapsed / summary["floor"] if summary["floor"] > 0 else 0.0,
            "responses": len(tracker.arrivals),
            "failures": len(tracker.failures),
            "failure_examples": sorted(set(tracker.failures.values()))[:3],
            "duplicates": tracker.duplicates,
            "unexpected": tracker.unexpected,
            # each acknowledgement's wait (send to ack, the accepted attempt), the wave running
            "ack_p50_ms": percentile(ack_ms, 50),
            "ack_p99_ms": percentile(ack_ms, 99),
            "controller_cpu_s": cpu,
            "plugin_process_cpu_s": plugin_cpu,
            "cpu_ms_per_call": cpu / summary["calls"] * 1000 if summary["calls"] else 0.0,
            "simulator_cpu_s": sim_cpu,
            "bench_cpu_s": own_cpu,
            "rss_mb": sample.rss_bytes / 2**20,
        }
    )
    summary["problems"] = _problems(summary, n, config)
    say(
        f"{label}: {elapsed:.2f} s (floor {summary['floor']:.2f} s, x{summary['ratio_to_floor']:.1f}), "
        f"{summary['calls']} BMC calls, controller {summary['cpu_ms_per_call']:.2f} ms CPU/call, "
        f"RSS {summary['rss_mb']:.0f} MB"
        + (f"; PROBLEMS: {summary['problems']}" if summary["problems"] else "")
    )
    return summary


def _inventory(sims: SimulatorProcesses, config: FanoutConfig, workdir: Path) -> Path:
    """The simulators' inventory; with `plugin_process`, plus a [[plugin]] table serving Redfish."""
    if not config.plugin_process:
        return Path(sims.inventory)
    path = workdir / "inventory-plugin-process.toml"
    command = json.dumps([sys.executable, "-m", "controller", "plugin", "serve", "redfish"])
    path.write_text(
        Path(sims.inventory).read_text() + f'\n[[plugin]]\nname = "redfish"\ncommand = {command}\n'
    )
    return path


def _plugin_cpu(pid: int) -> float:
    """CPU seconds of the controller's child processes (its out-of-process plugins)."""
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(fields[1]) == pid:  # field 4 of proc(5): the parent's pid
            kids.append(int(stat.parent.name))
    return cpu_seconds(kids)


def _counters(stats: list[dict[str, Any]], config: FanoutConfig) -> dict[str, Any]:
    """Per-BMC call counts, writes and concurrency from the simulators' counters, and the floor."""
    calls = [int(b["total_calls"]) for b in stats]
    writes = [int(b["writes_applied"]) for b in stats]
    templates: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    for bmc in stats:
        templates.update(bmc["calls"])
        statuses.update(bmc["responses"])
    n = len(stats)
    return {
        "calls": sum(calls),
        "calls_per_bmc_max": max(calls, default=0),
        "calls_per_bmc_min": min(calls, default=0),
        "calls_per_bmc": {k: v / n for k, v in sorted(templates.items())} if n else {},
        "writes_per_bmc_min": min(writes, default=0),
        "writes_per_bmc_max": max(writes, default=0),
        "max_in_flight_per_bmc": max((int(b["max_in_flight"]) for b in stats), default=0),
        "sessions_created": sum(int(b["sessions_created"]) for b in stats),
        "connections_opened": sum(int(b["connections_opened"]) for b in stats),
        # HTTP status codes the BMCs answered with ("0": the connection went away without a reply);
        # calls beyond the expected ones are the client's retries
        "statuses": dict(sorted(statuses.items())),
        "floor": max(calls, default=0) * config.latency / config.concurrency,
    }


def _problems(summary: dict[str, Any], n: int, config: FanoutConfig) -> list[str]:
    """What makes this measurement untrustworthy (empty when it measured the intended work)."""
    problems = []
    if summary["responses"] != n:
        problems.append(f"{summary['responses']} of {n} responses")
    if summary["failures"]:
        problems.append(f"{summary['failures']} failed responses: {summary['failure_examples']}")
    if summary["duplicates"] or summary["unexpected"]:
        problems.append(f"{summary['duplicates']} duplicate and {summary['unexpected']} unexpected responses")
    if summary["writes_per_bmc_min"] != EXPECTED_WRITES or summary["writes_per_bmc_max"] != EXPECTED_WRITES:
        problems.append(
            f"cap writes per BMC {summary['writes_per_bmc_min']}..{summary['writes_per_bmc_max']}, "
            f"expected {EXPECTED_WRITES}"
        )
    if summary["max_in_flight_per_bmc"] > config.concurrency:
        problems.append(
            f"{summary['max_in_flight_per_bmc']} calls in flight on one BMC (limit {config.concurrency})"
        )
    if summary["elapsed"] < summary["floor"]:
        problems.append("faster than the floor: the counters or the clock are wrong")
    return problems


async def _baseline(
    n: int, config: FanoutConfig, workdir: Path, sims: SimulatorProcesses, phase: Phase
) -> dict[str, Any]:
    label = f"fanout n={n} baseline {phase.name}"
    await sims.reset()
    plan = workdir / "baseline-plan.json"
    plan.write_text(
        json.dumps(
            {
                "urls": sims.urls,
                "ca_bundle": str(sims.ca_bundle),
                "username": USERNAME,
                "workers": min(config.baseline_workers, n),
                "discover": phase is PHASES[0],
                "watts": phase.per_component,
            }
        )
    )
    say(f"{label}: {n} BMCs, {min(config.baseline_workers, n)} threads")
    sim_before = sims.cpu_seconds()
    result = await run_json(
        [sys.executable, "-m", "bench.baseline", "--plan", str(plan)],
        label=label,
        timeout=600 + n * 2.0,
        progress=lambda: "running",
        env=child_env(**{PASSWORD_ENV: os.environ.get(PASSWORD_ENV, PASSWORD)}),
        every=10.0,
    )
    sim_cpu = sims.cpu_seconds() - sim_before
    stats = await sims.stats()
    summary = _counters(stats, config)
    summary.update(
        {
            "phase": phase.name,
            "elapsed": float(result["elapsed"]),
            "workers": result["workers"],
            "client_cpu_s": float(result["cpu_seconds"]),
            "client_cpu_ms_per_call": float(result["cpu_seconds"]) / summary["calls"] * 1000
            if summary["calls"]
            else 0.0,
            "simulator_cpu_s": sim_cpu,
            "failed": int(result["failed"]),
            "errors": result["errors"],
        }
    )
    problems = []
    if summary["failed"]:
        problems.append(f"{summary['failed']} BMCs failed: {summary['errors']}")
    if summary["writes_per_bmc_min"] != EXPECTED_WRITES or summary["writes_per_bmc_max"] != EXPECTED_WRITES:
        problems.append(
            f"cap writes per BMC {summary['writes_per_bmc_min']}..{summary['writes_per_bmc_max']}, "
            f"expected {EXPECTED_WRITES}"
        )
    summary["problems"] = problems
    say(
        f"{label}: {summary['elapsed']:.2f} s, {summary['calls']} BMC calls"
        + (f"; PROBLEMS: {problems}" if problems else "")
    )
    return summary


def _call_diff(ours: dict[str, float], theirs: dict[str, float]) -> dict[str, list[float]]:
    """Per-BMC call counts that differ between devicectl and the baseline: {call: [ours, theirs]}."""
    keys = sorted(set(ours) | set(theirs))
    return {k: [ours.get(k, 0.0), theirs.get(k, 0.0)] for k in keys if ours.get(k, 0.0) != theirs.get(k, 0.0)}
