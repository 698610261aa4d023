"""Shards: which controller process runs (and delivers) each device's requests.

A device maps to one of `shard_count` shards by a stable hash of its BMC endpoint ("host:port",
so every device behind one BMC lands together) or, without one (NVML, filedevices), of its id.
On SQLite one process owns every shard (`Shards`). On PostgreSQL each executor (role `all` or
`executor`) holds leases on a fair share of the shards (`ShardLeases`, rows in `shard_leases`):
it renews them every `lease_ttl / 3`, acquires free or expired ones up to
ceil(shard_count / live executors), releases those above its share once their work drained
(rebalancing when a process joins), and treats a lease as lost when its local deadline (by the
monotonic clock) passes, even if the database cannot be reached: a paused process stops on its
own. Each acquisition draws a new fencing token; a completion commits only while its token is
current (`controller/store/_shards.py`), so a process that lost a lease writes nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from controller.config import Settings
from controller.inventory import DeviceEntry, parse_model_json
from controller.process import workers
from controller.process.supervise import Outage
from controller.store import LeaseFence, LeaseRound, Store
from plugins.base import SystemSpec, relinquish

log = logging.getLogger(__name__)

_DEFAULT_PORTS = {"https": 443, "http": 80}


def endpoint_key(url: str) -> str:
    """ "host:port" of a BMC URL, lowercased (the scheme's default port when none is given)."""
    parts = urlsplit(url if "//" in url else f"//{url}")
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = _DEFAULT_PORTS.get(parts.scheme.lower(), 443)
    return f"{host}:{port}" if host else url.strip().lower()


def shard_of(endpoint_key: str, shard_count: int) -> int:
    """The shard of a BMC endpoint ("host:port") or device id: stable across processes and runs."""
    digest = hashlib.blake2b(endpoint_key.lower().encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shard_count


def device_key(device: str, entry: DeviceEntry | None, model: Mapping[str, Any] | None) -> str:
    """What a device's shard is hashed from: its inventory entry's BMC URL, else the model's
    `Redfish.URL` (the request's model over the entry's, as the runner merges them), else its id."""
    if entry is not None and entry.url:
        return endpoint_key(entry.url)
    merged = {**(entry.model if entry is not None else {}), **(model or {})}
    if merged:
        try:
            url = SystemSpec.from_model(merged).redfish_url
        except (TypeError, ValueError, AttributeError):
            url = ""
        if url:
            return endpoint_key(url)
    return device


#: how long a call may go on writing a device after its deadline or cancel, at most: a write
#: cycle's restores, each under its own deadline: the plugin's of the cap it was cycling (the
#: Redfish plugin's 60 s), then the controller's from the journal (90 s, and 5 s to unwind)
UNWIND_SECONDS = 190.0
#: the longest a cancelled device call unwinds before it looks at its lease again; a shard whose work
#: is cut (a rebalancing past its drain limit) is handed on twice this later
LEASE_POLL = 1.0


class LeftForOwner(Exception):
    """The shard's lease lapsed here before or during a device call (the call, if one ran, was
    cancelled): the work is left for the shard's next holder."""


class ShardCountError(ValueError):
    """Controllers on one database disagree about `shard_count` (refused at start, one line)."""


class Shards:
    """One process owns every shard (SQLite, or a single controller): nothing is leased.

    `executes=False` is a front end: it journals and acks, and runs no shard."""

    leased = False

    def __init__(
        self, inventory: Mapping[str, DeviceEntry], shard_count: int, *, executes: bool = True
    ) -> None:
        self._inventory = inventory
        self.shard_count = max(1, shard_count)
        self.executes = executes
        #: inventory devices' shards (fixed while the process runs): the ack path hashes once
        self._inventory_shards: dict[str, int] = {}
        #: shard -> its device calls running under `call_under_lease` (`cut` cancels them)
        self._under_lease: dict[int, set[asyncio.Future[Any]]] = {}

    def shard_for(self, device: str, model_json: bytes = b"") -> int:
        """The device's shard, from its inventory entry, else the request's model JSON, else its id."""
        if device in self._inventory:
            shard = self._inventory_shards.get(device)
            if shard is None:
                shard = self._inventory_shards[device] = self.shard_for_model(device, None)
            return shard
        model: Mapping[str, Any] | None = None
        if model_json:
            try:
                model = parse_model_json(model_json)
            except Exception:  # validated at the edge; an odd model only means hashing the id
                model = None
        return self.shard_for_model(device, model)

    def shard_for_model(self, device: str, model: Mapping[str, Any] | None) -> int:
        """The device's shard given its model JSON object (used only if it is not in the inventory).

        An in-band device linked to its node's BMC device (`bmc = "<id>"` in the inventory) takes
        its partner's shard: the node's drift check, which reads both, runs in one process, and
        the two devices' requests are never run by two controllers at once."""
        entry = self._inventory.get(device)
        partner = self._inventory.get(entry.bmc) if entry is not None and entry.bmc else None
        if partner is not None:
            return shard_of(device_key(partner.id, partner, None), self.shard_count)
        return shard_of(device_key(device, entry, model), self.shard_count)

    def runs(self, shard: int) -> bool:
        """Whether this process may start work of `shard` now."""
        return self.executes

    def valid_for(self, shard: int) -> float:
        """Seconds this process surely still holds `shard` (a device call in flight past it is
        cancelled, so that no BMC ever has calls of two controllers at once)."""
        return math.inf if self.executes else 0.0

    async def call_under_lease(self, operation: Awaitable[Any], timeout: float, shard: int) -> Any:
        """Await a device call for at most `timeout` seconds (then TimeoutError), and no longer
        than this process surely holds the shard's lease (`valid_for`): past that the call is
        cancelled and LeftForOwner raised, the work left for the next holder. A holder takes a
        lapsed lease only after its expiry in the database, which comes later than our local
        deadline, so a BMC never has calls of two controllers in flight at once (fencing still
        guards a process paused mid-call)."""
        task = asyncio.ensure_future(operation)
        deadline = time.monotonic() + timeout
        calls = self._under_lease.setdefault(shard, set())
        calls.add(task)
        try:
            while True:
                left = deadline - time.monotonic()
                lease_left = self.valid_for(shard)
                if lease_left <= 0:
                    log.warning("shard %d lease lapsed here: device call cancelled", shard)
                    raise LeftForOwner
                if left <= 0:
                    raise TimeoutError
                done, _ = await asyncio.wait((task,), timeout=min(left, lease_left))
                if done:
                    if task.cancelled() and self.valid_for(shard) <= 0:
                        raise LeftForOwner  # cut: the shard was given up here (`cut`)
                    return task.result()
        finally:
            try:
                if not task.done():
                    await self._unwind(task, shard)  # still cut at once by `cut` meanwhile
            finally:
                calls.discard(task)
                if not calls:
                    self._under_lease.pop(shard, None)
            if not task.cancelled():
                # NOTE: a call that ended as the deadline passed (the plugin's own deadline fires
                # then too) or while it unwound: its result or error came too late and is dropped,
                # not left for the loop to log as "Task exception was never retrieved"
                task.exception()

    def cut(self, shard: int) -> int:
        """Cancel the shard's device calls with `RELINQUISHED` (a shielded restore included): the
        shard is being given up here. How many were running."""
        calls = list(self._under_lease.get(shard, ()))
        for task in calls:
            relinquish(task)  # it holds where a deadline's plain cancel reaches the call in this turn
        return len(calls)

    async def _unwind(self, task: asyncio.Future[Any], shard: int) -> None:
        """Cancel a device call and wait for it to unwind (close its connection, finish a restore
        it shields: `uncancelled`), no longer than this process surely holds the shard's lease:
        then, or where it has lapsed already, the cancel is `RELINQUISHED`, which cuts the
        shielded work too, so no write of ours starts beside the shard's next holder's."""
        if self.valid_for(shard) <= 0:
            relinquish(task)
        else:
            task.cancel()
        while not task.done():
            lease_left = self.valid_for(shard)
            if lease_left <= 0:
                log.warning("shard %d lease lapsed here while a device call unwound: it is cut", shard)
                relinquish(task)
                await asyncio.wait((task,))
                return
            await asyncio.wait((task,), timeout=min(lease_left, LEASE_POLL))

    def fence(self, shard: int) -> LeaseFence | None:
        """The lease a completion of `shard` must still hold (None: no check)."""
        return None

    def serving(self) -> list[int] | None:
        """The shards whose responses and verifications this process handles now (None: all)."""
        return None if self.executes else []

    def runnable(self) -> list[int]:
        """The shards whose requests this process claims and runs now."""
        return list(range(self.shard_count)) if self.executes else []


class ShardLeases(Shards):
    """This executor's shard leases in PostgreSQL (see the module docstring); `run()` renews them."""

    leased = True

    def __init__(
        self,
        store: Store,
        settings: Settings,
        inventory: Mapping[str, DeviceEntry],
        *,
        on_gained: Callable[[frozenset[int]], Awaitable[None]],
        busy: Callable[[int], bool],
        on_handed_on: Callable[[frozenset[int]], None] | None = None,
    ) -> None:
        super().__init__(inventory, settings.shard_count)
        self._store = store
        self.owner = settings.instance_id
        self._role = workers.process_role(settings)
        self.ttl = settings.lease_ttl
        #: local deadlines end this long before the database's expiry (clock rates differ a little)
        self._margin = self.ttl / 10
        #: a rebalancing release waits this long for the shard's running work: its requests'
        #: deadlines, then what a cancelled call may still write (restores); past it the shard is
        #: given up anyway (work that outlived every bound: it is cut first, `_cut_at`, and fencing
        #: keeps its completion out)
        self._drain_limit = max(self.ttl, settings.device_call_timeout) + UNWIND_SECONDS
        self._on_gained = on_gained
        #: told of the shards a round gave up to the fair share (drained here; another process
        #: takes them), never of those a stop gives up
        self._on_handed_on = on_handed_on
        self._busy = busy
        # each process prefers different shards, so processes acquiring at once rarely collide
        self._preference = sorted(
            range(self.shard_count),
            key=lambda s: hashlib.blake2b(f"{self.owner}/{s}".encode(), digest_size=8).digest(),
        )
        #: shard -> fencing token of each lease held (as of the last round)
        self.held: dict[int, int] = {}
        #: shard -> time.monotonic() until which the lease is surely still ours
        self._valid_until: dict[int, float] = {}
        #: shard -> time.monotonic() its release began (above the fair share: draining first)
        self._releasing: dict[int, float] = {}
        #: releasing shard -> time.monotonic() its work was cut: it drained past `_drain_limit`, so
        #: it is no longer valid here (its calls are cut, `LEASE_POLL`) and handed on a round later
        self._cut_at: dict[int, float] = {}
        self.executors = 0
        self.share = 0
        self._rounds = 0
        #: gained shards whose requests are not claimed yet (the claim failed: retried next round)
        self._unclaimed: set[int] = set()
        self._outage = Outage("shard lease renewal", log)

    def runs(self, shard: int) -> bool:
        until = self._valid_until.get(shard)
        return until is not None and shard not in self._releasing and time.monotonic() < until

    def valid_for(self, shard: int) -> float:
        # a shard being released (drained) still runs its calls until its lease lapses
        return self._valid_until.get(shard, 0.0) - time.monotonic()

    def fence(self, shard: int) -> LeaseFence:
        # token 0 is never issued: a shard never held here cannot be completed here
        return LeaseFence(shard, self.owner, self.held.get(shard, 0))

    def serving(self) -> list[int]:
        return self.runnable()

    def runnable(self) -> list[int]:
        now = time.monotonic()
        return sorted(s for s, until in self._valid_until.items() if now < until and s not in self._releasing)

    async def run(self) -> None:
        """Renew, acquire and release every `lease_ttl / 3` (the first round is `start`'s)."""
        interval = max(self.ttl / 3, 0.05)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.round()
                self._outage.ok()
            except Exception as exc:  # leases lapse locally on their own while this fails
                await asyncio.sleep(min(self._outage.failed(exc), interval))

    async def round(self) -> frozenset[int]:
        """One round: renew, acquire up to the fair share, begin and finish releases. Returns the
        shards gained (acquired, or renewed after their local deadline had passed)."""
        started = time.monotonic()
        result = await self._store.lease_round(
            LeaseRound(
                self.owner, self._role, self.ttl, self.shard_count, self._preference, held=dict(self.held)
            )
        )
        self._rounds += 1
        if result.foreign:
            mismatch = (
                f"shard_count {self.shard_count} differs from another controller's on this database "
                f"({result.foreign} live leases of higher shards): every controller must use the same"
            )
            if self._rounds == 1:
                await self._store.release_shards(self.owner, result.held)
                await self._store.forget_controller(self.owner)
                raise ShardCountError(mismatch)
            log.error("%s", mismatch)
        lapsed = {s for s, until in self._valid_until.items() if until <= started}
        lost = {s for s, token in self.held.items() if result.held.get(s) != token}
        # new to this process, or lapsed here (its requests were left for an owner: ours again)
        gained = frozenset(s for s, token in result.held.items() if self.held.get(s) != token or s in lapsed)
        self.held = dict(result.held)
        self._valid_until = {s: started + self.ttl - self._margin for s in self.held if s not in self._cut_at}
        for shard in lost | gained:
            self._releasing.pop(shard, None)
            self._cut_at.pop(shard, None)
        self.executors, self.share = result.executors, result.share
        if lost - gained:
            log.warning("shard leases lost: %s", _ranges(lost - gained))
        if gained:
            log.info(
                "shard leases gained: %s (%d held, share %d of %d shards, %d executors)",
                _ranges(gained),
                len(self.held),
                self.share,
                self.shard_count,
                self.executors,
            )
        claim = frozenset((gained | self._unclaimed) & set(self.held))
        if claim:
            self._unclaimed = set(claim)
            await self._on_gained(claim)
            self._unclaimed = set()
        excess = len(self.held) - self.share - len(self._releasing)
        if excess > 0:  # the least preferred first: they are the ones others prefer more
            keep = [s for s in self._preference if s in self.held and s not in self._releasing]
            for shard in keep[-excess:]:
                self._releasing[shard] = started
            log.info("releasing %d shard leases above the fair share of %d", excess, self.share)
        handed_on = await self._release_drained()
        if handed_on and self._on_handed_on is not None:
            self._on_handed_on(handed_on)
        return gained

    async def _release_drained(self, *, force: bool = False) -> frozenset[int]:
        """Give up releasing shards with no request running or response in flight here (or that
        drained for longer than `_drain_limit`: their work cut first, the lease given up
        `2 * LEASE_POLL` later; or all of them with `force`). Returns the shards given up."""
        now = time.monotonic()
        ready = {}
        for s, since in self._releasing.items():
            if s not in self.held:
                continue
            if force or not self._busy(s):
                ready[s] = self.held[s]
            elif now - since > self._drain_limit:
                # NOTE: work that outlived every bound (a long write cycle): it is cut here first
                # (`cut`, and no longer valid here), and the lease handed on a round later, once
                # that has had time to land (`LEASE_POLL`), never while it may still write
                if s not in self._cut_at:
                    self._cut_at[s] = now
                    self._valid_until.pop(s, None)
                    if self.cut(s):
                        log.warning("shard %d drained past its limit: its device calls are cut", s)
                elif now - self._cut_at[s] >= 2 * LEASE_POLL:
                    ready[s] = self.held[s]
        if not ready:
            return frozenset()
        await self._store.release_shards(self.owner, ready)
        for shard in ready:
            self.held.pop(shard, None)
            self._valid_until.pop(shard, None)
            self._releasing.pop(shard, None)
            self._cut_at.pop(shard, None)
        return frozenset(ready)

    async def release_all(self, timeout: float) -> None:
        """At a clean stop: let running work of every shard drain (up to `timeout`), give every
        lease up and drop the liveness row, so peers take the shards over at once. A shard whose
        work still runs here (a restore a BMC holds) keeps its lease, which expires after
        `lease_ttl`: handed on now, its next holder would write the device beside that work."""
        started = time.monotonic()
        for shard in self.held:
            self._releasing.setdefault(shard, started)
        while self.held and time.monotonic() - started < timeout:
            await self._release_drained()
            if self.held:
                await asyncio.sleep(0.05)
        running = sorted(s for s in self.held if self._busy(s))
        if running:
            log.warning(
                "shutdown: shards %s still have work running here; their leases are not handed on "
                "and expire after lease_ttl (%g s)",
                _ranges(running),
                self.ttl,
            )
            for shard in running:
                self._releasing.pop(shard, None)
        await self._release_drained(force=True)
        await self._store.forget_controller(self.owner)


def _ranges(shards: Sequence[int] | set[int] | frozenset[int]) -> str:
    """ "0-3,7,9-10" for logs."""
    out: list[str] = []
    for s in sorted(shards):
        if out and out[-1].split("-")[-1] == str(s - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{s}"
        else:
            out.append(str(s))
    return ",".join(out)
