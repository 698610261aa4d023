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
4. devicectl, "after restart": the controller is stopped (SIGTERM) and started again on the same
   database with the warm-up at start (its default concurrency); once every process that runs
   requests reports the warm-up finished (`devicectl_warmup_devices`), a third activation (another
   resource group, other values). The warm-up's own time, CPU and BMC calls are reported apart;
5. the baseline (`bench.baseline`), both ways, after the controller has stopped: first contact
   walks the service like the plugin does; steady state is the operator's script proper, with the
   platform's URIs hard-coded; both log in and out every time, as a script run does.

Layouts (`FanoutConfig.workers`): 0 is one `serve` process on `backend` (SQLite by default);
N is `serve --workers N` on PostgreSQL, a front end that acks and N executors, with CPU counted
over the whole process tree. Each layout gets simulators of its own; the baseline runs once.

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
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

import grpc

from bench import prober
from bench.baseline import PASSWORD_ENV
from bench.fanout_plan import (
    AFTER_RESTART,
    EXPECTED_WRITES,
    PHASES,
    RETRY_CODES,
    SEND_ATTEMPTS,
    FanoutConfig,
    Phase,
    activation,
)
from bench.ports import free_port_run
from bench.processes import ControllerProcess, database, run_json
from bench.procstats import cpu_seconds
from bench.profiling import Profiler
from bench.responses import ResponseTracker
from bench.scaleout_ingest import ProcessTree, ack_histogram, server_side
from bench.simulators import PASSWORD, USERNAME, SimulatorProcesses
from bench.util import ROOT, child_env, jsonable, percentile, say
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
    """Each layout of `config.workers` against simulators of its own (every cap at its default
    again); the baseline against the first layout's. The first layout's figures are also the
    size's own (`phases`, `peak_rss_mb`)."""
    result: dict[str, Any] = {"n": n, "layouts": []}
    for index, workers in enumerate(config.workers):
        where = workdir if index == 0 else workdir / f"workers-{workers}"
        sims = SimulatorProcesses(where, n, latency=config.latency, per_process=config.per_process)
        say(f"fanout n={n}: starting {n} simulated BMCs in {sims.processes} process(es)")
        began = time.monotonic()
        await sims.start()
        say(f"fanout n={n}: simulators ready after {time.monotonic() - began:.1f} s")
        result["simulator_processes"] = sims.processes
        try:
            layout = await _devicectl(n, config, where, sims, workers)
            result["layouts"].append(layout)
            if index == 0:
                result.update(phases=layout["phases"], peak_rss_mb=layout["peak_rss_mb"])
                result["max_concurrency"] = layout["max_concurrency"]
            if index == 0 and config.baseline:
                result["baseline"] = [await _baseline(n, config, where, sims, phase) for phase in PHASES]
                for ours, theirs in zip(result["phases"], result["baseline"], strict=False):
                    ours["speedup"] = theirs["elapsed"] / ours["elapsed"] if ours["elapsed"] > 0 else 0.0
                    theirs["differs_from_devicectl"] = _call_diff(
                        ours["calls_per_bmc"], theirs["calls_per_bmc"]
                    )
        finally:
            await sims.stop()
    return result


def layout_name(workers: int) -> str:
    """How reports name a layout: "one process" or "--workers N"."""
    return f"--workers {workers}" if workers else "one process"


async def _devicectl(
    n: int, config: FanoutConfig, workdir: Path, sims: SimulatorProcesses, workers: int
) -> dict[str, Any]:
    devices = sorted(load_inventory(sims.inventory))
    if len(devices) != n:
        raise RuntimeError(f"the simulators' inventory lists {len(devices)} devices, expected {n}")
    backend = "postgres" if workers else config.backend
    tracker = ResponseTracker()
    callback = await tracker.start()
    phases = []
    warmup: dict[str, Any] = {}
    peak_rss = 0.0
    try:
        with database(backend, workdir) as url:
            launch = _Launch(n, config, workdir, sims, url, callback, workers)
            # the first-contact phase measures the cold path: no warm-up ahead of it
            # (controller/execution/warmup.py; a ref without one ignores the variable)
            controller = launch.controller("", {"DEVICECTL_WARMUP_CONCURRENCY": "0"})
            metrics = launch.metrics
            try:
                cold_start = await launch.ready(controller)
                async with grpc.aio.insecure_channel(controller.address) as channel:
                    await channel.channel_ready()  # connect before any clock starts
                    stub = dgrpc.DeviceControllerStub(channel)
                    if config.probes:
                        await _seed_probes(stub, tracker)
                    for phase in PHASES:
                        phases.append(
                            await _phase(
                                n,
                                config,
                                controller,
                                sims,
                                tracker,
                                stub,
                                devices,
                                phase,
                                metrics,
                                launch.executing_ports(),
                            )
                        )
            finally:
                final = await controller.stop()
                peak_rss = final.peak_rss_bytes / 2**20 if final else 0.0
            if config.after_restart:
                restarted = launch.controller("-restart", {})
                port = launch.metrics
                try:
                    warmup = await launch.warm_start(restarted, cold_start)
                    async with grpc.aio.insecure_channel(restarted.address) as channel:
                        await channel.channel_ready()
                        stub = dgrpc.DeviceControllerStub(channel)
                        phases.append(
                            await _phase(
                                n,
                                config,
                                restarted,
                                sims,
                                tracker,
                                stub,
                                devices,
                                AFTER_RESTART,
                                port,
                                launch.executing_ports(),
                            )
                        )
                finally:
                    final = await restarted.stop()
                    peak_rss = max(peak_rss, final.peak_rss_bytes / 2**20 if final else 0.0)
    finally:
        await tracker.stop()
    return {
        "workers": workers,
        "layout": layout_name(workers),
        "backend": backend,
        "executor_niceness": config.executor_niceness if workers else None,
        "max_concurrency": config.concurrency_for(n),
        "phases": phases,
        "warmup": warmup,
        "peak_rss_mb": peak_rss,
    }


class _Launch:
    """Starts the controller of one layout (one process or `serve --workers N`) on one database."""

    def __init__(
        self,
        n: int,
        config: FanoutConfig,
        workdir: Path,
        sims: SimulatorProcesses,
        url: str,
        callback: str,
        workers: int,
    ) -> None:
        self.n, self.config, self.workdir, self.sims = n, config, workdir, sims
        self.url, self.callback, self.workers = url, callback, workers

    def controller(self, suffix: str, env: dict[str, str]) -> ControllerProcess:
        """A controller process (not started yet) with metrics on a port of its own (its executors'
        on the ports above it)."""
        self.metrics = free_port_run(self.workers + 1)
        extra: tuple[str, ...] = ("--metrics-listen", f"127.0.0.1:{self.metrics}")
        env = dict(env)
        if self.workers:
            extra += ("--workers", str(self.workers))
            if self.config.executor_niceness is not None:
                env["DEVICECTL_EXECUTOR_NICENESS"] = str(self.config.executor_niceness)
        kind = ProcessTree if self.workers else ControllerProcess  # CPU over the whole process tree
        return kind(
            self.workdir,
            database_url=self.url,
            callback=self.callback,
            inventory=_inventory(self.sims, self.config, self.workdir),
            secrets_dir=self.sims.secrets_dir,
            max_concurrency=self.config.concurrency_for(self.n),
            device_call_timeout=600.0,
            log_level=self.config.log_level,
            name=f"controller-{self.n}{f'-w{self.workers}' if self.workers else ''}{suffix}",
            extra_args=extra,
            env=env,
        )

    def executing_ports(self) -> list[int]:
        """The metrics ports of the processes that execute (the executors, or the one process)."""
        return [self.metrics + i for i in range(1, self.workers + 1)] if self.workers else [self.metrics]

    async def ready(self, controller: ControllerProcess) -> dict[str, float]:
        """Start `controller` and wait until it serves and its executors share the shards evenly;
        its wall time and CPU seconds until then."""
        began = time.monotonic()
        controller.spawn()
        await controller.wait_serving()
        if self.workers:
            assert isinstance(controller, ProcessTree)
            await controller.wait_executors(self.url, self.workers)
        return {"seconds": time.monotonic() - began, "cpu_s": controller.sample().cpu_seconds}

    async def warm_start(self, controller: ControllerProcess, cold_start: dict[str, float]) -> dict[str, Any]:
        """Start `controller` with the warm-up at start and wait until every executing process has
        finished it: how long that took, its CPU beyond a start without warm-up (`cold_start`), and
        the BMC calls it made."""
        label = f"fanout n={self.n} {layout_name(self.workers)}"
        await self.sims.reset()
        sim_before = self.sims.cpu_seconds()
        began = time.monotonic()
        start = await self.ready(controller)
        say(f"{label}: restarted with the warm-up at start, serving after {start['seconds']:.1f} s")
        devices = await _warmup_finished(self.executing_ports(), 300 + self.n * 0.5, label)
        warm_at = time.monotonic()
        cpu = controller.sample().cpu_seconds
        stats = await self.sims.stats()
        summary = _counters(stats, self.config)
        out = {
            "start_s": start["seconds"],
            "ready_s": warm_at - began,  # start to the end of the warm-up
            "warmup_s": warm_at - began - start["seconds"],  # beyond serving
            "cpu_s": cpu,  # start and warm-up
            "cold_start_cpu_s": cold_start["cpu_s"],  # the first start's, no warm-up
            "warmup_cpu_s": cpu - cold_start["cpu_s"],
            "devices": devices,
            "calls": summary["calls"],
            "calls_per_bmc": summary["calls_per_bmc"],
            "sessions_created": summary["sessions_created"],
            "connections_opened": summary["connections_opened"],
            "simulator_cpu_s": self.sims.cpu_seconds() - sim_before,
        }
        say(
            f"{label}: warm-up finished {out['ready_s']:.1f} s after the start ({devices}), "
            f"{out['warmup_cpu_s']:.1f} CPU-s beyond a cold start, {summary['calls']} BMC calls"
        )
        return out


async def _warmup_finished(ports: list[int], timeout: float, label: str) -> dict[str, int]:
    """Wait until the warm-up of every process on `ports` (metrics) has had nothing pending for a
    second (shards gained late add devices to it); the devices done, failed and skipped, summed
    over them."""
    deadline = time.monotonic() + timeout
    last: list[dict[str, int] | None] = []
    idle_since: float | None = None
    while time.monotonic() < deadline:
        last = await asyncio.gather(*(asyncio.to_thread(_warmup_gauge, port) for port in ports))
        if all(g is not None and g.get("pending", 1) == 0 for g in last):
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since >= 1.0:
                return {state: sum(g[state] for g in last if g) for state in ("done", "failed", "skipped")}
        else:
            idle_since = None
        await asyncio.sleep(0.25)
    raise TimeoutError(f"{label}: the warm-up did not finish within {timeout:.0f} s ({last})")


def _warmup_gauge(port: int) -> dict[str, int] | None:
    """`devicectl_warmup_devices` by state from one process's /metrics (None: not there yet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
    except OSError:
        return None  # not serving metrics yet
    out = {}
    for line in text.splitlines():
        if line.startswith('devicectl_warmup_devices{state="'):
            state = line.split('"', 2)[1]
            out[state] = int(float(line.rsplit(" ", 1)[1]))
    return out or None


async def _phase(
    n: int,
    config: FanoutConfig,
    controller: ControllerProcess,
    sims: SimulatorProcesses,
    tracker: ResponseTracker,
    stub: dgrpc.DeviceControllerStub,
    devices: list[str],
    phase: Phase,
    metrics: int | None = None,
    executing: list[int] | None = None,
) -> dict[str, Any]:
    """One wave; `metrics`: the acking process's metrics port, for its own ack histogram;
    `executing`: the executing processes' metrics ports, for their garbage collector's CPU."""
    label = f"fanout n={n} devicectl {phase.name}"
    await sims.reset()
    ids = [f"{phase.group}-{device}" for device in devices]
    requests = [activation(d, rid, phase) for d, rid in zip(devices, ids, strict=True)]
    tracker.expect(ids)
    slots = asyncio.Semaphore(500)
    retries = 0

    ack_ms: list[float] = []
    probe_ms: list[float] = []

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
            # a --workers front end's children are its executors, already in its sample
            None if isinstance(controller, ProcessTree) else _plugin_cpu(controller.pid),
        )
        inside_before = await asyncio.to_thread(ack_histogram, metrics) if metrics else {}
        gc_before = await asyncio.to_thread(gc_seconds, executing or [])
        started = time.monotonic()
        await asyncio.gather(*(send(r) for r in requests))
        acked = time.monotonic()
        if config.probes:
            probes = await _start_prober(controller.address, PROBES)
            try:
                last = await tracker.wait(120 + n * 0.5, label)
            finally:
                probe_ms, probe_failures = await _stop_prober(*probes)
        else:
            last, probe_failures = await tracker.wait(120 + n * 0.5, label), 0
    sample = controller.sample()
    inside = server_side(inside_before, await asyncio.to_thread(ack_histogram, metrics)) if metrics else {}
    gc_cpu = await asyncio.to_thread(gc_seconds, executing or [])
    plugin_cpu = _plugin_cpu(controller.pid) - plugin_before if plugin_before is not None else 0.0
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
            # the same inside the acking process (receipt to journal commit): the histogram bucket
            # bounds holding its p50 and p99, and the share within 25 ms
            "ack_in_server": inside,
            # acks of single requests sent one at a time while the wave executes (after its own
            # acks): does execution starve the ack path?
            "probe_acks": len(probe_ms),
            "probe_ack_p50_ms": percentile(probe_ms, 50),
            "probe_ack_p99_ms": percentile(probe_ms, 99),
            "probe_ack_max_ms": max(probe_ms, default=0.0),
            "probe_failures": probe_failures,
            "controller_cpu_s": cpu,
            # the cyclic garbage collector's share of it (None: a ref that does not count it)
            "gc_cpu_s": None if gc_cpu is None or gc_before is None else gc_cpu - gc_before,
            "plugin_process_cpu_s": plugin_cpu,
            "cpu_ms_per_call": cpu / summary["calls"] * 1000 if summary["calls"] else 0.0,
            "cpu_ms_per_activation": cpu / n * 1000 if n else 0.0,
            "calls_per_activation": summary["calls"] / n if n else 0.0,
            "simulator_cpu_s": sim_cpu,
            "bench_cpu_s": own_cpu,
            "rss_mb": sample.rss_bytes / 2**20,
        }
    )
    summary["problems"] = _problems(summary, n, config)
    say(
        f"{label}: {elapsed:.2f} s (floor {summary['floor']:.2f} s, x{summary['ratio_to_floor']:.1f}), "
        f"{summary['calls']} BMC calls, controller {summary['cpu_ms_per_call']:.2f} ms CPU/call, "
        f"{summary['cpu_ms_per_activation']:.2f} ms CPU/activation"
        + (f" (garbage collector {summary['gc_cpu_s']:.2f} s)" if summary["gc_cpu_s"] is not None else "")
        + ", "
        f"ack p50 {summary['ack_p50_ms']:.0f} ms p99 {summary['ack_p99_ms']:.0f} ms, "
        f"{summary['probe_acks']} probe acks while executing p50 {summary['probe_ack_p50_ms']:.0f} ms "
        f"p99 {summary['probe_ack_p99_ms']:.0f} ms, "
        f"RSS {summary['rss_mb']:.0f} MB"
        + (f"; PROBLEMS: {summary['problems']}" if summary["problems"] else "")
    )
    return summary


PING = pb.DeviceControllerRequest.PingRequest()
#: the probes: pings for devices in no inventory, journaled and answered (an error, without a BMC
#: call) before the first wave, then sent again while each wave runs. A repeat takes the whole ack
#: path (validation, the journal's insert, found journaled, one read) and is never run twice; a
#: request of the wave itself would not do: on PostgreSQL a repeat's insert waits for the
#: transaction of the executor that is updating that request's row (a lock, not the ack path)
PROBES = [
    pb.DeviceControllerRequest(device=f"bench-probe-{i}", request_id=f"bench-probe-{i}", ping=PING)
    for i in range(16)
]


async def _seed_probes(stub: dgrpc.DeviceControllerStub, tracker: ResponseTracker) -> None:
    """Journal the probes once and wait for their answers, before any clock starts."""
    tracker.expect(r.request_id for r in PROBES)
    await asyncio.gather(*(stub.SendDeviceRequest(r, timeout=60) for r in PROBES))
    await tracker.wait(60, "probe seeds")


async def _start_prober(
    address: str, requests: list[pb.DeviceControllerRequest]
) -> tuple[asyncio.subprocess.Process, Path]:
    """Start sending single requests of the wave again, one at a time, from a process of their
    own (`bench.prober`: this process's loop is busy with the sink's responses meanwhile)."""
    fd, name = tempfile.mkstemp(prefix="probe-requests-", suffix=".bin")
    os.close(fd)
    path = Path(name)
    prober.write_requests(path, requests)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.prober",
        address,
        str(path),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env=child_env(),
    )
    return process, path


async def _stop_prober(process: asyncio.subprocess.Process, path: Path) -> tuple[list[float], int]:
    """Stop the prober; its acks' waits in ms and how many probes failed."""
    assert process.stdin is not None
    process.stdin.close()  # it stops after the probe in flight
    try:
        out, _ = await asyncio.wait_for(process.communicate(), 90)
    except TimeoutError:
        process.kill()
        out, _ = await process.communicate()
    finally:
        await asyncio.to_thread(path.unlink, missing_ok=True)
    return prober.parse_lines(out.decode().splitlines())


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


def gc_seconds(ports: list[int]) -> float | None:
    """`devicectl_gc_cpu_seconds_total` over all generations, summed over the processes on `ports`
    (metrics); None where a process does not export it."""
    total = 0.0
    for port in ports:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
                text = reply.read().decode()
        except OSError:
            return None
        values = [
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("devicectl_gc_cpu_seconds_total{")
        ]
        if not values:
            return None
        total += sum(values)
    return total


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
