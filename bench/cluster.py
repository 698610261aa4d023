"""Several controller processes on one PostgreSQL database, as the scale-out benchmark and drill run them.

Each is `devicectl serve` with its own `--instance-id` and port, the same inventory and callback,
and short leases from a settings file. Shard ownership is read from the database (`shard_leases`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from bench.processes import ControllerProcess, database
from bench.util import say
from controller.config import Settings

TRACEBACK = "Traceback (most recent call last)"


def count_tracebacks(controllers: Sequence[ControllerProcess]) -> int:
    """Tracebacks in these controllers' logs (a handled fault must not produce one)."""
    total = 0
    for controller in controllers:
        try:
            total += controller.log_path.read_text(errors="replace").count(TRACEBACK)
        except OSError:
            pass
    return total


def settings_toml(lease_ttl: float) -> str:
    """A settings file with short leases (and a short claim poll, where the controller has one)."""
    wanted: dict[str, float] = {"lease_ttl": lease_ttl, "claim_interval": 0.1}
    known = {f.name for f in dataclasses.fields(Settings)}
    return "".join(f"{key} = {value}\n" for key, value in wanted.items() if key in known)


def query(url: str, sql: str, **params: Any) -> list[Any] | None:
    """Rows of one query, or None when it cannot run (a table or column this schema lacks)."""
    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            statement = sa.text(sql)
            for name, value in params.items():
                if isinstance(value, list):
                    statement = statement.bindparams(sa.bindparam(name, expanding=True))
            return list(conn.execute(statement, params).all())
    except sa.exc.DBAPIError:
        return None
    finally:
        engine.dispose()


def live_shards(url: str) -> dict[int, str] | None:
    """shard -> owner, for leases unexpired by the database's clock (None: no shard_leases table)."""
    rows = query(url, "SELECT shard, owner FROM shard_leases WHERE owner <> '' AND expires_at > now()")
    return None if rows is None else {int(r[0]): str(r[1]) for r in rows}


async def wait_balanced(url: str, instances: list[str], limit: float) -> dict[str, Any]:
    """Wait until every shard is leased and each instance holds no more than its fair share.

    Returns `balanced_s` (None when it did not happen) and `shards_per_process`, or `problem`."""
    shard_count = Settings().shard_count
    share = math.ceil(shard_count / len(instances))
    began = time.monotonic()
    counts: Counter[str] = Counter()
    while time.monotonic() - began < limit:
        owners = await asyncio.to_thread(live_shards, url)
        if owners is None:
            return {"balanced_s": None, "problem": "no shard_leases table: shards are not leased"}
        counts = Counter(owners.values())
        if len(owners) == shard_count and set(counts) == set(instances) and max(counts.values()) <= share:
            return {"balanced_s": round(time.monotonic() - began, 2), "shards_per_process": dict(counts)}
        await asyncio.sleep(0.1)
    return {"balanced_s": None, "problem": f"shards not balanced after {limit:.0f} s: {dict(counts)}"}


class ControllerGroup:
    """`k` controllers on one database; the first starts alone (it upgrades the schema)."""

    def __init__(
        self,
        workdir: Path,
        k: int,
        *,
        database_url: str,
        callback: str,
        inventory: Path,
        lease_ttl: float,
        name: str,
        secrets_dir: Path | None = None,
        max_concurrency: int | None = None,
        log_level: str = "INFO",
    ) -> None:
        self.database_url = database_url
        self.settings_file = workdir / f"{name}.toml"
        self.lease_ttl = lease_ttl
        self.instances = [f"{name}-{i}" for i in range(k)]
        self.controllers = [
            ControllerProcess(
                workdir,
                database_url=database_url,
                callback=callback,
                inventory=inventory,
                secrets_dir=secrets_dir,
                max_concurrency=max_concurrency,
                instance_id=instance,
                log_level=log_level,
                name=instance,
                extra_args=("--config", str(self.settings_file)),
            )
            for instance in self.instances
        ]

    @property
    def addresses(self) -> list[str]:
        return [c.address for c in self.controllers]

    async def start(self) -> dict[str, Any]:
        """Start every process and wait until the shards are shared out (see `wait_balanced`): a
        joining process gets shards as the others release theirs, one lease round (ttl / 3) apart."""
        self.settings_file.write_text(settings_toml(self.lease_ttl))
        await self.controllers[0].start()
        await asyncio.gather(*(c.start() for c in self.controllers[1:]))
        return await wait_balanced(self.database_url, self.instances, max(60.0, 4 * self.lease_ttl))

    def cpu_seconds(self) -> list[float]:
        """CPU seconds of each process so far (a process that is gone: its last sample)."""
        out = []
        for controller in self.controllers:
            try:
                out.append(controller.sample().cpu_seconds)
            except (ProcessLookupError, AssertionError):
                last = controller.last_sample
                out.append(last.cpu_seconds if last else 0.0)
        return out

    def peak_rss_mb(self) -> list[float]:
        return [(c.last_sample.peak_rss_bytes if c.last_sample else 0) / 2**20 for c in self.controllers]

    async def stop(self) -> None:
        await asyncio.gather(*(c.stop() for c in self.controllers))

    def tracebacks(self) -> int:
        """Tracebacks in all the processes' logs."""
        return count_tracebacks(self.controllers)


@asynccontextmanager
async def serving_group(
    workdir: Path, k: int, label: str, **group: Any
) -> AsyncIterator[tuple[ControllerGroup, dict[str, Any]]]:
    """`k` controllers (`ControllerGroup`, arguments `group`) on a fresh PostgreSQL database, started
    with their shards shared out: the group and its balance (`wait_balanced`); stopped on exit."""
    with database("postgres", workdir) as url:
        controllers = ControllerGroup(workdir, k, database_url=url, **group)
        try:
            balance = await controllers.start()
            say(f"{label}: serving, shards {balance}")
            yield controllers, balance
        finally:
            await controllers.stop()
