"""Scale-out drill: three controller processes on one PostgreSQL; one is SIGKILLed mid-wave.

Three `devicectl serve` processes (their own `--instance-id` and port, one database, one inventory)
share a simulated fleet through shard leases. A wave of GPU cap requests goes out spread over the
three front doors, each device's next request after the previous one was acknowledged (a sender
whose door is gone tries the next one, as a topology service with several replicas would). Once
part of the wave is answered, one process is SIGKILLed. Checks:

- every acknowledged request answered (nothing lost or stuck) and completed once (at most one audit
  row per request), per-device order, the caps on the BMCs. The wire is at-least-once: the killed
  process may have sent a response and died before recording it, so the new owner sends it again;
  a duplicate is accepted only for a device of the killed process's shards, one per device at most;
- the killed process's shards owned by the survivors within the lease timeout (`shard_leases`);
- per BMC, the simulator never saw more requests in flight than the Redfish plugin's per-BMC
  limit, nor two Redfish sessions (two controllers) with requests in flight at once;
- no traceback in any controller's log.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc

from bench.cluster import count_tracebacks, live_shards, query, settings_toml, wait_balanced
from bench.processes import ControllerProcess
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc
from drills.common import per_backend, problems_of
from drills.load import CHANNEL_OPTIONS, Sent, cap_request, send_until_acked, watts_for
from drills.stack import Stack
from drills.verdict import verdict


@dataclass(frozen=True)
class ScaleoutConfig:
    backends: tuple[str, ...] = ("postgres",)  # several processes need PostgreSQL
    processes: int = 3
    bmcs: int = 60
    #: requests per BMC in the wave
    per_device: int = 4
    #: seconds the simulated BMCs add to every call
    latency: float = 0.05
    lease_ttl: float = 3.0
    #: one process is killed once this share of the wave has been answered
    kill_at: float = 0.3
    #: the Redfish plugin's per-BMC concurrency (its default)
    per_bmc_limit: int = 2
    balance_limit: float = 60.0
    drain_limit: float = 180.0


REDUCED = ScaleoutConfig()
FULL = ScaleoutConfig(bmcs=200, per_device=8, lease_ttl=5.0, drain_limit=600.0)


async def run(config: ScaleoutConfig, workdir: Path) -> dict[str, Any]:
    async def one(backend: str, url: str, where: Path) -> list[dict[str, Any]]:
        return [await run_backend(config, backend, url, where)]

    rows = await per_backend("scaleout", config.backends, workdir, one)
    return {"drill": "scaleout", "config": asdict(config), "rows": rows}


class Cluster:
    """BMC simulators, the sink and `processes` controllers on one database (a `Stack` plus peers)."""

    def __init__(self, config: ScaleoutConfig, url: str, workdir: Path) -> None:
        self.config = config
        self.url = url
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.settings_file = workdir / "scaleout.toml"
        self.stack = Stack(
            workdir,
            bmcs=config.bmcs,
            database_url=url,
            name="scaleout-0",
            extra_args=("--config", str(self.settings_file)),
            latency=config.latency,
        )
        self.controllers: list[ControllerProcess] = []

    @property
    def instances(self) -> list[str]:
        return [f"drill-scaleout-{i}" for i in range(self.config.processes)]

    async def start(self) -> None:
        self.settings_file.write_text(settings_toml(self.config.lease_ttl))
        await self.stack.start()  # the first process (it also upgrades the schema)
        self.controllers = [self.stack.ctl]
        for i in range(1, self.config.processes):
            peer = ControllerProcess(
                self.workdir,
                database_url=self.url,
                callback=self.stack.sink.address,
                inventory=self.workdir / "inventory.toml",
                secrets_dir=self.stack.sims.secrets_dir,
                instance_id=self.instances[i],
                name=f"scaleout-{i}",
                extra_args=("--config", str(self.settings_file)),
            )
            self.controllers.append(peer)
        await asyncio.gather(*(c.start() for c in self.controllers[1:]))

    async def close(self) -> None:
        await asyncio.gather(*(c.stop() for c in self.controllers[1:]))
        await self.stack.close()

    def tracebacks(self) -> int:
        return count_tracebacks(self.controllers)


@dataclass
class Wave:
    """One sender per device, its requests spread over the front doors."""

    doors: list[str]
    devices: list[str]
    per_device: int
    prefix: str
    timeout_seconds: int = 120
    #: time one request may take to be acknowledged, retries over every door included
    ack_limit: float = 90.0
    acked: list[Sent] = field(default_factory=list)
    unacked: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    retries: Counter[str] = field(default_factory=Counter)
    #: acknowledgements per front door
    by_door: Counter[int] = field(default_factory=Counter)

    async def run(self) -> None:
        channels = [grpc.aio.insecure_channel(d, options=CHANNEL_OPTIONS) for d in self.doors]
        stubs = [dgrpc.DeviceControllerStub(c) for c in channels]
        try:
            await asyncio.gather(*(self._sender(stubs, i, d) for i, d in enumerate(self.devices)))
        finally:
            await asyncio.gather(*(c.close() for c in channels))

    async def _sender(self, stubs: list[dgrpc.DeviceControllerStub], index: int, device: str) -> None:
        for k in range(self.per_device):
            rid = f"{self.prefix}-{device}-{k:04d}"
            watts = watts_for(index, k)
            request = cap_request(device, rid, watts, self.timeout_seconds)
            door = await send_until_acked(self, stubs, (index + k) % len(stubs), request, rid)
            if door is None:
                return  # not acknowledged: the next request would overtake it
            self.by_door[door] += 1
            self.acked.append(Sent(rid, device, watts, time.monotonic()))


# ---- the database's view ------------------------------------------------------------------


async def wait_moved(url: str, dead: str, shards: set[int], limit: float) -> float | None:
    """Seconds until every one of `shards` is leased, unexpired, to a process other than `dead`."""
    began = time.monotonic()
    while time.monotonic() - began < limit:
        owners = await asyncio.to_thread(live_shards, url) or {}
        if all(owners.get(s, dead) != dead for s in shards):
            return time.monotonic() - began
        await asyncio.sleep(0.1)
    return None


def second_completions(url: str, prefix: str) -> int | None:
    """Requests with more than one audit row: completed (and their state changed) twice."""
    rows = query(
        url,
        "SELECT request_id FROM state_audit WHERE request_id LIKE :p GROUP BY request_id HAVING count(*) > 1",
        p=f"{prefix}-%",
    )
    return None if rows is None else len(rows)


def unexplained_duplicates(url: str, counts: Counter[str], killed_shards: set[int]) -> int:
    """Extra copies the kill cannot explain: of a device outside the killed process's shards, or
    more than one extra copy per device (each device has one delivery in flight at a time)."""
    repeated = {rid: n - 1 for rid, n in counts.items() if n > 1}
    if not repeated:
        return 0
    rows = query(
        url,
        "SELECT request_id, device, shard FROM requests WHERE request_id IN :ids",
        ids=sorted(repeated),
    )
    where = {str(r[0]): (str(r[1]), int(r[2])) for r in rows or []}
    per_device: Counter[str] = Counter()
    unexplained = 0
    for rid, extra in repeated.items():
        device, shard = where.get(rid, ("?", -1))
        if shard not in killed_shards:
            unexplained += extra
        else:
            per_device[device] += extra
    return unexplained + sum(n - 1 for n in per_device.values() if n > 1)


def unfinished_by_owner(url: str) -> dict[str, int]:
    """Unfinished requests per shard owner (live leases)."""
    rows = query(
        url,
        "SELECT l.owner, count(*) FROM requests r JOIN shard_leases l ON l.shard = r.shard "
        "WHERE r.status <> 'completed' AND l.expires_at > now() GROUP BY l.owner",
    )
    return {str(owner): int(n) for owner, n in rows or []}


def unfinished_in(url: str, shards: list[int]) -> int | None:
    """Journaled, not completed requests of `shards` (what the killed process left behind)."""
    if not shards:
        return 0
    rows = query(
        url, "SELECT count(*) FROM requests WHERE status <> 'completed' AND shard IN :shards", shards=shards
    )
    return None if rows is None else int(rows[0][0])


# ---- the drill ----------------------------------------------------------------------------


async def run_backend(config: ScaleoutConfig, backend: str, url: str, workdir: Path) -> dict[str, Any]:
    cluster = Cluster(config, url, workdir)
    problems: list[str] = []
    row: dict[str, Any] = {"backend": backend, "processes": config.processes, "bmcs": config.bmcs}
    try:
        await cluster.start()
        balance = await wait_balanced(url, cluster.instances, config.balance_limit)
        problems += [balance.pop("problem")] if "problem" in balance else []
        row.update(balance)
        await cluster.stack.sims.reset()  # count only the wave
        stack = cluster.stack
        wave = Wave([c.address for c in cluster.controllers], stack.devices, config.per_device, "scaleout")
        sending = asyncio.create_task(wave.run())
        row.update(await _kill_mid_wave(cluster, wave, sending, problems))
        await sending
        row.update(await verdict(stack, wave.acked, database_url=url, drain_limit=config.drain_limit))
        row.update(await _per_bmc(cluster, config, problems))
        row["tracebacks"] = cluster.tracebacks()
        row["second_completions"] = await asyncio.to_thread(second_completions, url, "scaleout")
        row["duplicates_unexplained"] = await asyncio.to_thread(
            unexplained_duplicates, url, stack.sink.counts, set(row["killed_shards"])
        )
        row.update(
            unacked=len(wave.unacked),
            refused=len(wave.refused),
            acks_by_door=[wave.by_door[i] for i in range(config.processes)],
            client_retries=dict(wave.retries),
        )
    finally:
        await cluster.close()
    problems = problems_of(row) + problems
    if row["duplicates_unexplained"]:
        problems.append(f"{row['duplicates_unexplained']} duplicates not explained by the kill")
    if row["second_completions"]:
        problems.append(f"{row['second_completions']} requests completed twice (two audit rows)")
    if row["tracebacks"]:
        problems.append(f"{row['tracebacks']} tracebacks in the controllers' logs")
    if row["unacked"] or row["refused"]:
        problems.append(f"{row['unacked']} unacknowledged, {row['refused']} refused requests")
    row["problems"] = problems
    return row


async def _kill_mid_wave(
    cluster: Cluster, wave: Wave, sending: asyncio.Task[None], problems: list[str]
) -> dict[str, Any]:
    """SIGKILL one process once `kill_at` of the wave is answered; measure its shards' move."""
    config, url = cluster.config, cluster.url
    sink = cluster.stack.sink
    while len(sink.first()) < config.kill_at * config.bmcs * config.per_device:
        if sending.done() and wave.acked and {s.request_id for s in wave.acked} <= set(sink.first()):
            problems.append("the wave was answered before the kill: nothing was in flight")
            break
        sink.poll()
        await asyncio.sleep(0.02)
    # the victim: the process with the most unfinished work in its shards (so the kill hits work)
    busiest = await asyncio.to_thread(unfinished_by_owner, url)
    victim = max(range(config.processes), key=lambda i: busiest.get(cluster.instances[i], 0))
    dead = cluster.instances[victim]
    owners = await asyncio.to_thread(live_shards, url) or {}
    held = sorted(s for s, owner in owners.items() if owner == dead)
    cluster.controllers[victim].kill()
    answered_at_kill = len(sink.first())
    left_behind = await asyncio.to_thread(unfinished_in, url, held)
    # lease expiry, one renewal round of a survivor, and slack for a loaded machine
    limit = config.lease_ttl * 4 / 3 + 2.0
    moved = await wait_moved(url, dead, set(held), limit + 30.0) if held else None
    if not held:
        problems.append(f"the killed process {dead} held no shard")
    elif moved is None:
        problems.append(f"the shards of {dead} were not taken over within {limit + 30:.0f} s")
    elif moved > limit:
        problems.append(f"the shards of {dead} moved after {moved:.1f} s (lease timeout {limit:.1f} s)")
    if not left_behind:
        problems.append(f"the killed process {dead} left no unfinished request: the kill hit no work")
    return {
        "killed": dead,
        "killed_shards": held,
        "answered_at_kill": answered_at_kill,
        "shards_moved": len(held),
        "unfinished_at_kill": left_behind,
        "moved_s": None if moved is None else round(moved, 2),
        "moved_limit_s": round(limit, 2),
    }


async def _per_bmc(cluster: Cluster, config: ScaleoutConfig, problems: list[str]) -> dict[str, Any]:
    """What the simulated BMCs saw: requests and controllers (Redfish sessions) in flight at once."""
    bmcs = await cluster.stack.sims.stats()
    over = [b["index"] for b in bmcs if int(b["max_in_flight"]) > config.per_bmc_limit]
    overlapped = [b["index"] for b in bmcs if int(b["session_overlaps"]) > 0]
    if over:
        problems.append(f"{len(over)} BMCs saw more than {config.per_bmc_limit} requests at once: {over[:5]}")
    if overlapped:
        problems.append(f"{len(overlapped)} BMCs served by two controllers at once: {overlapped[:5]}")
    return {
        "max_in_flight_per_bmc": max((int(b["max_in_flight"]) for b in bmcs), default=0),
        "max_sessions_in_flight_per_bmc": max((int(b["max_sessions_in_flight"]) for b in bmcs), default=0),
        "bmcs_over_limit": len(over),
        "bmcs_two_controllers": len(overlapped),
        "bmc_calls": sum(int(b["total_calls"]) for b in bmcs),
        "sessions_created": sum(int(b["sessions_created"]) for b in bmcs),
    }
