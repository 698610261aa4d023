"""Shard leases on a real PostgreSQL between real controllers: a fair split that follows joins and
leaves, a dead controller's shards and unfinished requests taken over and answered once, and any
replica accepting a request for any device."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from sqlalchemy.engine import URL

from controller.app import Controller
from controller.cluster.shards import (
    LEASE_POLL,
    UNWIND_SECONDS,
    LeftForOwner,
    ShardCountError,
    ShardLeases,
    Shards,
    endpoint_key,
    shard_of,
)
from controller.config import Settings
from controller.inventory import DeviceEntry
from controller.observability.endpoint import StateCollector
from controller.store import Completion, NewRequest, NewVerification, Store
from plugins.base import relinquished, uncancelled
from tests.controller.cluster.cluster import (
    LEASE_TTL,
    SHARDS,
    Cluster,
    cluster,
    cluster_settings,
    fair,
    ping,
    store,
    wait_until,
)
from tests.memory_plugin import MemoryPlugin
from tests.serve_process import ROOT, free_port, start_serving

__all__ = ["cluster", "store"]  # fixtures

postgres = pytest.mark.postgres


def test_devices_behind_one_bmc_share_a_shard() -> None:
    same = {
        endpoint_key(u)
        for u in ("https://BMC-7.example:443/redfish/v1", "bmc-7.example", "https://bmc-7.example")
    }
    assert same == {"bmc-7.example:443"}
    assert endpoint_key("http://10.0.0.5:8000/x") == "10.0.0.5:8000"
    assert shard_of("bmc-7.example:443", 256) == shard_of("BMC-7.EXAMPLE:443", 256)
    spread = {shard_of(f"node{i:03d}", SHARDS) for i in range(64)}
    assert len(spread) > SHARDS // 2, "the hash spreads devices over the shards"


def test_an_in_band_device_takes_the_shard_of_its_node_s_bmc_device() -> None:
    inventory = {}
    for i in range(32):
        bmc = DeviceEntry(
            f"node{i:02d}", "redfish", {"Model": "DGX_GB200"}, url=f"https://node{i:02d}-bmc:443"
        )
        gpus = DeviceEntry(f"node{i:02d}-gpus", "nvml", {"Model": "DGX_GB200"}, bmc=bmc.id)
        inventory.update({bmc.id: bmc, gpus.id: gpus})
    shards = Shards(inventory, SHARDS)
    for i in range(32):
        bmc_shard = shard_of(f"node{i:02d}-bmc:443", SHARDS)
        assert shards.shard_for(f"node{i:02d}") == bmc_shard
        assert shards.shard_for(f"node{i:02d}-gpus", b'{"Model": "DGX_GB200"}') == bmc_shard
        assert shards.shard_for_model(f"node{i:02d}-gpus", None) == bmc_shard, "as the drift check asks"
    apart = [
        i
        for i in range(32)
        if shard_of(f"node{i:02d}-gpus", SHARDS) != shard_of(f"node{i:02d}-bmc:443", SHARDS)
    ]
    assert apart, "without the link most in-band devices would hash elsewhere"
    alone = Shards({"solo": DeviceEntry("solo", "nvml", {"Model": "DGX_GB200"})}, SHARDS)
    assert alone.shard_for("solo") == shard_of("solo", SHARDS), "an unlinked in-band device hashes its id"


@postgres
async def test_responses_and_verifications_are_served_by_their_shard(store: Store) -> None:
    now = datetime.now(UTC)
    for rid, shard in (("r1", 1), ("r2", 2)):
        await store.accept_one(NewRequest(rid, f"dev-{rid}", "ping", b"p", "", now, now, "A", shard))
        check = NewVerification(f"v-{rid}", f"dev-{rid}", rid, "ping", {}, now, 3)
        completion = Completion(rid, f"dev-{rid}", "ok", "", now, b"r", None, False, verification=check)
        assert await store.complete(completion)
    later = now + timedelta(seconds=1)
    assert [(o.request_id, o.shard) for o in await store.due_outbox(later, shards=[1])] == [("r1", 1)]
    assert {o.request_id for o in await store.due_outbox(later)} == {"r1", "r2"}
    assert [v.request_id for v in await store.due_verifications(later, shards=[2])] == ["r2"]
    assert await store.due_verifications(later, shards=[]) == []
    assert len(await store.due_verifications(later)) == 2


@postgres
async def test_controllers_split_the_shards_fairly_and_a_joiner_rebalances(cluster: Cluster) -> None:
    a = await cluster.start("a")
    assert a.held() == set(range(SHARDS)), "alone, a controller holds every shard"
    b = await cluster.start("b")
    await wait_until(lambda: fair([a, b]), "two controllers split the shards")
    c = await cluster.start("c")
    await wait_until(lambda: fair([a, b, c]), "a third controller gets its share")
    assert c.held(), "the joiner got shards the others released"

    # the database agrees with what each process believes it holds, tokens included
    leases = {lease.shard: lease for lease in await a.controller.store.shard_leases()}
    for node in (a, b, c):
        for shard, token in node.leases.held.items():
            assert (leases[shard].owner, leases[shard].token) == (node.name, token)

    for node in (a, b, c):  # operators see the split in each process's metrics
        (held,) = [m for m in StateCollector(node.controller).collect() if m.name == "devicectl_shards_held"]
        assert held.samples[0].value == len(node.leases.runnable()) > 0

    await cluster.stop(c)  # a clean stop hands its shards back at once
    await wait_until(lambda: fair([a, b]), "the two left take the leaver's shards over")


@postgres
async def test_a_controller_lets_go_of_the_devices_of_the_shards_it_hands_on(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the first controller up holds for the devices of the shards it hands to a joiner (a
    Redfish plugin: their BMC sessions, `tests/controller/execution/test_handed_on.py`) is let go:
    its plugin forgets exactly those devices; the joiner forgets none."""
    forgotten: list[tuple[int, str]] = []

    async def forget(self: MemoryPlugin, device_id: str) -> None:
        forgotten.append((id(self), device_id))

    monkeypatch.setattr(MemoryPlugin, "forget", forget)
    monkeypatch.setattr(MemoryPlugin, "warm_up", True, raising=False)  # started (and warm) at the start
    a = await cluster.start("a")
    assert a.held() == set(range(SHARDS))
    assert a.controller.warmup is not None and a.controller.warmup._task is not None
    await a.controller.warmup._task
    b = await cluster.start("b")
    await wait_until(lambda: fair([a, b]), "two controllers split the shards")
    handed = set(cluster.devices_in(set(range(SHARDS)) - a.held()))
    assert handed, "the joiner took some shards over"
    (plugin,) = a.controller.plugins.started().values()
    await wait_until(
        lambda: {d for owner, d in forgotten if owner == id(plugin)} == handed,
        "the first controller to let go of the devices it handed on",
    )
    assert {d for _, d in forgotten} == handed  # nothing of its own shards, nothing by the joiner


@postgres
async def test_rebalancing_mid_wave_runs_each_request_once_and_never_a_device_twice_at_once(
    cluster: Cluster,
) -> None:
    slow = {k: type(v)(v.id, v.plugin, {**v.model, "delay": 1.0}) for k, v in cluster.inventory.items()}
    a = await cluster.start("a", inventory=slow)
    devices = sorted(slow)[:12]
    ids = [f"{d}-{n}" for d in devices for n in range(4)]
    for request_id in ids:
        await a.send(ping(request_id.rsplit("-", 1)[0], request_id))
    await wait_until(lambda: MemoryPlugin.running > 0, "A works through the wave")
    b = await cluster.start("b", inventory=slow)  # joins mid-wave: A hands half its shards over
    await cluster.sink.wait_for(set(ids), timeout=60)
    await wait_until(lambda: fair([a, b]), "the two split the shards")
    runs: dict[str, list[tuple[float, float]]] = {}
    for device, request_id, _, start, end in MemoryPlugin.calls:
        runs.setdefault(device, []).append((start, end))
        assert request_id in ids
    assert sorted(rid for _, rid, *_ in MemoryPlugin.calls) == sorted(ids), "each ran exactly once"
    for device, spans in runs.items():
        spans.sort()
        assert all(prev[1] <= nxt[0] for prev, nxt in itertools.pairwise(spans)), device
    for device in devices:
        order = [r.request_id for r in cluster.sink.responses if r.device == device]
        assert order == [f"{device}-{n}" for n in range(4)], "per-device order holds across the move"
    assert all(cluster.sink.counts[rid] == 1 for rid in ids)


@postgres
async def test_a_controller_with_another_shard_count_is_refused_at_start(cluster: Cluster) -> None:
    await cluster.start("a")
    with pytest.raises(ShardCountError, match="shard_count 8 differs from another controller's"):
        await cluster.start("b", shard_count=8)
    leases = await cluster.nodes[0].controller.store.shard_leases()
    assert {lease.owner for lease in leases} == {"a"}, "the refused process holds nothing"


@postgres
async def test_any_replica_accepts_a_request_the_owner_runs_once(cluster: Cluster) -> None:
    a = await cluster.start("a")
    b = await cluster.start("b")
    await wait_until(lambda: fair([a, b]), "two controllers split the shards")
    devices = cluster.devices_in(b.held())[:3]
    assert devices
    for i, device in enumerate(devices):
        await a.send(ping(device, f"via-a-{i}"))
    await cluster.sink.wait_for({f"via-a-{i}" for i in range(len(devices))}, timeout=20)
    for i, device in enumerate(devices):
        view = await a.controller.store.get_request(f"via-a-{i}")
        assert view is not None and view.owner == "b" and view.shard == cluster.shard_of(device)
    ran = [(device, rid) for device, rid, *_ in MemoryPlugin.calls]
    assert sorted(ran) == sorted((d, f"via-a-{i}") for i, d in enumerate(devices)), "B ran each once"
    await wait_until(lambda: b.controller.delivery.delivered >= len(devices), "B delivered them")
    assert all(cluster.sink.counts[f"via-a-{i}"] == 1 for i in range(len(devices)))
    assert a.controller.delivery.delivered == 0, "responses leave through their shard's owner"


class ServeProcess:
    """`devicectl serve` in its own process, so it can be killed without a goodbye."""

    def __init__(self, tmp: Path, database_url: str, callback: str, instance_id: str) -> None:
        inventory = tmp / "inventory.toml"
        inventory.write_text(
            "".join(
                f'[[device]]\nid = "node{i:03d}"\nplugin = "tests.memory_plugin:MemoryPlugin"\n'
                'model = { Model = "DGX_GB200", delay = 5.0 }\n'
                for i in range(64)
            )
        )
        self.port = free_port()
        self.args = [
            *(sys.executable, "-m", "controller", "serve", "--listen", f"127.0.0.1:{self.port}"),
            *("--database-url", database_url, "--callback", callback, "--inventory", str(inventory)),
            *("--instance-id", instance_id, "--auto-upgrade"),
        ]
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "DEVICECTL_LEASE_TTL": str(LEASE_TTL),
            "DEVICECTL_SHARD_COUNT": str(SHARDS),
            "DEVICECTL_CLAIM_INTERVAL": "0.05",
        }
        self.log = tmp / f"{instance_id}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        self.proc = await start_serving(self.args, self.env, self.log, self.port, tries=300)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)


@postgres
async def test_a_killed_controller_s_shards_move_and_its_requests_are_answered_once(
    cluster: Cluster, tmp_path: Path
) -> None:
    dead = ServeProcess(tmp_path, cluster.database_url, cluster.sink.address, "doomed")
    await dead.start()
    try:
        survivor = await cluster.start("survivor")
        store = survivor.controller.store

        async def doomed_shards() -> set[int]:
            return {lease.shard for lease in await store.shard_leases() if lease.owner == "doomed"}

        # the survivor joined: the doomed process releases half (its share) once drained
        for _ in range(200):
            if len(survivor.held()) == SHARDS // 2 and len(await doomed_shards()) == SHARDS // 2:
                break
            await asyncio.sleep(0.05)
        theirs = await doomed_shards()
        assert theirs and not theirs & survivor.held()
        devices = cluster.devices_in(theirs)[:4]
        ids = {f"{d}-{n}" for d in devices for n in range(2)}
        async with grpc.aio.insecure_channel(f"127.0.0.1:{dead.port}") as channel:
            from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc

            stub = dgrpc.DeviceControllerStub(channel)
            for request_id in sorted(ids):
                await stub.SendDeviceRequest(ping(request_id.rsplit("-", 1)[0], request_id), timeout=10)
        dead.kill()  # its devices take 5 s a request there: none can have been answered yet
        assert not cluster.sink.responses
    finally:
        dead.kill()
    await wait_until(lambda: len(survivor.held()) == SHARDS, "the survivor took every shard")
    await cluster.sink.wait_for(ids, timeout=30)
    await wait_until(lambda: survivor.controller.delivery.database.failures == 0, "delivery settled")
    for _ in range(100):  # the outbox is empty: no copy of any response is still to come
        if await store.undelivered_count() == 0:
            break
        await asyncio.sleep(0.05)
    assert await store.undelivered_count() == 0
    assert {rid: cluster.sink.counts[rid] for rid in ids} == dict.fromkeys(ids, 1)
    for device in devices:
        order = [r.request_id for r in cluster.sink.responses if r.device == device]
        assert order == [f"{device}-0", f"{device}-1"], "per-device order survives the takeover"


async def test_sqlite_refuses_executor_role(tmp_path: Path) -> None:
    settings = Settings(
        listen="127.0.0.1:0", database_url=f"sqlite:///{tmp_path}/d.db", auto_upgrade=True, role="executor"
    )
    controller = Controller(settings, {})
    with pytest.raises(ValueError, match=r"^SQLite serves one process; use PostgreSQL for several"):
        await controller.start()
    await controller.store.close()


@postgres
async def test_a_stop_hands_on_every_lease_but_those_of_shards_whose_work_still_runs(
    store: Store, pg_database: URL
) -> None:
    """A stop hands its leases back so peers take the shards at once, except a shard whose work
    still runs here (a restore a BMC holds): its lease expires on its own, so no peer writes the
    device beside that work."""
    url = pg_database.render_as_string(hide_password=False)

    async def gained(shards: frozenset[int]) -> None:
        return None

    running = {3}
    stopping = ShardLeases(
        store, cluster_settings(url, "", "stopping"), {}, on_gained=gained, busy=lambda s: s in running
    )
    await stopping.round()
    assert set(stopping.held) == set(range(SHARDS))
    await stopping.release_all(timeout=0.2)
    peer = ShardLeases(store, cluster_settings(url, "", "peer"), {}, on_gained=gained, busy=lambda s: False)
    await peer.round()
    assert set(peer.held) == set(range(SHARDS)) - running, "the busy shard's lease was handed on"
    await asyncio.sleep(LEASE_TTL + 0.5)  # expired: the peer takes it
    await peer.round()
    assert set(peer.held) == set(range(SHARDS))


@postgres
async def test_a_shard_drained_past_its_limit_cuts_its_work_before_it_is_handed_on(
    store: Store, pg_database: URL
) -> None:
    """A rebalancing hands a busy shard on once its work outlived every bound (`_drain_limit`: a long
    write cycle). That work is cut first, with the cancel that hands the device on (a shielded
    restore included), and the lease goes to the database only a round later: a peer never takes
    the shard while our calls may still write its devices."""
    url = pg_database.render_as_string(hide_password=False)
    running: set[int] = set()
    seen: list[bool] = []

    async def gained(shards: frozenset[int]) -> None:
        return None

    leases = ShardLeases(
        store, cluster_settings(url, "", "a"), {}, on_gained=gained, busy=lambda s: s in running
    )
    await leases.round()

    async def cycle() -> None:  # a write cycle of shard 3 that outlives the drain limit
        running.add(3)
        try:
            await asyncio.sleep(120)
        except asyncio.CancelledError as exc:
            seen.append(relinquished(exc))
            raise
        finally:
            running.discard(3)

    async def owned() -> set[int]:
        return {lease.shard for lease in await store.shard_leases() if lease.owner == "a"}

    call = asyncio.create_task(leases.call_under_lease(cycle(), 300, 3))
    await wait_until(lambda: 3 in running, "the cycle runs")
    leases._releasing[3] = time.monotonic() - leases._drain_limit - 1  # draining, past its limit
    await leases.round()
    assert 3 in await owned(), "handed on while its work may still write"
    assert not leases.runs(3) and leases.valid_for(3) <= 0
    with pytest.raises(LeftForOwner):
        await asyncio.wait_for(call, 10)
    assert seen == [True]  # cut with the cancel that hands the device on
    await asyncio.sleep(2 * LEASE_POLL)
    await leases.round()
    assert 3 not in await owned()


async def test_a_cut_reaches_a_call_still_unwinding_its_shielded_work() -> None:
    """A call past its deadline still unwinds (a write cycle's restore, shielded from that cancel):
    cutting its shard cuts that work at once, not at the call's next look at its lease."""
    shards = Shards({}, SHARDS)
    seen: list[bool] = []
    restoring = asyncio.Event()

    async def restore() -> None:
        try:
            restoring.set()
            await asyncio.sleep(30)
        except asyncio.CancelledError as exc:
            seen.append(relinquished(exc))
            raise

    async def cycle() -> None:
        await uncancelled(restore())

    call = asyncio.create_task(shards.call_under_lease(cycle(), 0.2, 3))
    # the restore under way (a stall of this process can bring the deadline before its first step)
    await restoring.wait()
    await asyncio.sleep(0.5)  # past its deadline: cancelled, its restore going on
    assert not call.done() and seen == []
    assert shards.cut(3) == 1
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(call, 5)
    assert seen == [True]
    assert shards.cut(3) == 0  # nothing left under the shard's lease


def test_a_rebalancing_waits_out_what_a_cancelled_call_may_still_write() -> None:
    """A busy shard is handed on by a rebalancing only past its requests' deadlines and both
    restores a cancelled write cycle may still run (the plugin's, then the journal's)."""
    from controller.execution.write_cycle import RESTORE_SECONDS as JOURNAL_RESTORE
    from plugins.redfish._verify.verify_writes import RESTORE_SECONDS as PLUGIN_RESTORE

    assert UNWIND_SECONDS >= PLUGIN_RESTORE + JOURNAL_RESTORE + 5
