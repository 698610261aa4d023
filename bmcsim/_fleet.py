"""A fleet of simulated BMCs in one asyncio loop: one HTTPS listening socket per BMC."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

from aiohttp import web

from bmcsim._bmc import SimulatedBmc
from bmcsim._config import DEFAULT_PASSWORD, BmcConfig
from bmcsim._control import start_control_server
from bmcsim._inventory import InventoryEntry, device_id, write_inventory
from bmcsim._platforms import get_platform
from bmcsim._stats import merge_stats
from bmcsim.tls import TlsFiles, ensure_tls_files

log = logging.getLogger(__name__)

# listening sockets opened concurrently; bounded so a 2,000-BMC start does not flood the loop
_START_BATCH = 256


class SimulatorFleet:
    """Many simulated HTTPS BMCs in one process.

    Usage:
        async with SimulatorFleet(n=16, model="gb200", cert_dir=tmp) as fleet:
            bmc = fleet.bmcs[0]   # bmc.url, bmc.username, bmc.password, bmc.stats, bmc.faults, bmc.state

    Args:
        n: number of BMCs (ignored when `configs` is given).
        model: a model name (see `MODELS`), or a sequence of them used round-robin.
        latency: seconds added to every request.
        cert_dir: where `ca.pem` and the server certificate live (created or reused); None uses a
            temporary directory removed on stop.
        base_port: BMC i listens on `base_port + i`; 0 picks free ports.
        host: listening address.
        username, password: BMC credentials; with `unique_passwords` each BMC gets `password-<n>`.
        session_limit, session_timeout: Redfish session table limit and inactivity timeout.
        async_writes, task_delay: answer cap PATCHes with 202 + task completing after `task_delay`.
        firmware_version: reported BMC firmware (None: the model's default).
        control_port: port of the plain-HTTP control endpoint (0 picks one); None disables it.
        profile: "default" or "bmcweb" (see `BmcConfig.profile`).
        allow_list: a BMC proxy's allow-list (`_bmcweb.DPS_ALLOW_LIST`); None allows everything.
        configs: explicit per-BMC configurations, overriding all the above per-BMC settings.
    """

    def __init__(
        self,
        n: int = 1,
        model: str | Sequence[str] = "gb200",
        *,
        latency: float = 0.0,
        cert_dir: str | os.PathLike[str] | None = None,
        base_port: int = 0,
        host: str = "127.0.0.1",
        username: str = "admin",
        password: str = DEFAULT_PASSWORD,
        unique_passwords: bool = False,
        session_limit: int = 4,
        session_timeout: float = 1800.0,
        async_writes: bool = False,
        task_delay: float = 1.0,
        firmware_version: str | None = None,
        control_port: int | None = None,
        configs: Sequence[BmcConfig] | None = None,
        profile: str = "default",
        allow_list: tuple[tuple[str, str], ...] | None = None,
    ) -> None:
        if configs is None:
            models = [model] if isinstance(model, str) else list(model)
            if n < 0 or not models:
                raise ValueError("need n >= 0 and at least one model")
            template = BmcConfig(
                username=username,
                password=password,
                session_limit=session_limit,
                session_timeout=session_timeout,
                latency=latency,
                async_writes=async_writes,
                task_delay=task_delay,
                firmware_version=firmware_version,
                profile=profile,
                allow_list=allow_list,
            )
            configs = [
                replace(
                    template,
                    model=models[i % len(models)],
                    password=f"{password}-{i + 1}" if unique_passwords else password,
                )
                for i in range(n)
            ]
        for config in configs:
            get_platform(config.model)  # fail early on a typo
        self.bmcs: list[SimulatedBmc] = [SimulatedBmc(i, c, host=host) for i, c in enumerate(configs)]
        self.host = host
        self.base_port = base_port
        self.control_port = control_port
        self.unique_passwords = unique_passwords
        self._cert_dir = Path(cert_dir) if cert_dir is not None else None
        self._own_cert_dir: Path | None = None
        self._tls: TlsFiles | None = None
        self._control: web.AppRunner | None = None
        self._control_bound: int | None = None

    # --- lifecycle -------------------------------------------------------------------------------------

    async def start(self) -> SimulatorFleet:
        """Create the certificates and start every BMC (and the control endpoint)."""
        if self._cert_dir is None:
            self._own_cert_dir = Path(tempfile.mkdtemp(prefix="bmc-sim-tls-"))
        cert_dir = self._cert_dir or self._own_cert_dir
        assert cert_dir is not None
        self._tls = await asyncio.to_thread(ensure_tls_files, cert_dir)
        server_ctx = self._tls.server_context()
        try:
            for first in range(0, len(self.bmcs), _START_BATCH):
                batch = self.bmcs[first : first + _START_BATCH]
                await asyncio.gather(
                    *(b.start(server_ctx, self.base_port + b.index if self.base_port else 0) for b in batch)
                )
            if self.control_port is not None:
                self._control, self._control_bound = await start_control_server(
                    self, self.host, self.control_port
                )
        except BaseException:
            await self.stop()
            raise
        log.info("BMC simulator: %d BMCs started", len(self.bmcs))
        return self

    async def stop(self) -> None:
        """Stop every BMC and the control endpoint; remove a temporary certificate directory."""
        if self._control is not None:
            await self._control.cleanup()
            self._control = None
        for first in range(0, len(self.bmcs), _START_BATCH):
            await asyncio.gather(*(b.stop() for b in self.bmcs[first : first + _START_BATCH]))
        if self._own_cert_dir is not None:
            shutil.rmtree(self._own_cert_dir, ignore_errors=True)
            self._own_cert_dir = None

    async def __aenter__(self) -> SimulatorFleet:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # --- access --------------------------------------------------------------------------------------

    def bmc(self, index: int) -> SimulatedBmc:
        """The BMC at `index`."""
        return self.bmcs[index]

    def __len__(self) -> int:
        return len(self.bmcs)

    @property
    def tls(self) -> TlsFiles:
        """Paths of the CA bundle, certificate and key (after start)."""
        if self._tls is None:
            raise RuntimeError("fleet not started")
        return self._tls

    @property
    def ca_bundle(self) -> Path:
        """`ca.pem`: the CA bundle clients verify the BMCs with."""
        return self.tls.ca

    def client_ssl_context(self) -> ssl.SSLContext:
        """A client SSL context that verifies the BMCs against `ca.pem`."""
        return self.tls.client_context()

    @property
    def control_url(self) -> str | None:
        """Base URL of the control endpoint, or None when disabled."""
        return None if self._control_bound is None else f"http://{self.host}:{self._control_bound}"

    @property
    def urls(self) -> list[str]:
        """Every BMC's base URL, in index order."""
        return [b.url for b in self.bmcs]

    # --- counters --------------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Per-BMC stats snapshots and fleet totals (JSON-friendly)."""
        per_bmc = [{"index": b.index, "url": b.url, **b.stats.to_dict()} for b in self.bmcs]
        return {"totals": merge_stats([b.stats.to_dict() for b in self.bmcs]), "bmcs": per_bmc}

    def reset_stats(self) -> None:
        """Zero every BMC's counters."""
        for bmc in self.bmcs:
            bmc.stats.reset()

    def clear_faults(self) -> None:
        """Make every BMC healthy again."""
        for bmc in self.bmcs:
            bmc.faults.clear()

    # --- inventory -------------------------------------------------------------------------------------

    def inventory_entries(
        self, *, id_prefix: str = "node", secret_name: str = "bmc-sim"
    ) -> list[InventoryEntry]:
        """Inventory entries for every BMC; per-BMC secrets (named like the device) with unique passwords."""
        entries: list[InventoryEntry] = []
        if not self.bmcs:
            return entries
        first = (self.bmcs[0].username, self.bmcs[0].password)
        for bmc in self.bmcs:
            dev = device_id(id_prefix, bmc.index, len(self.bmcs))
            # BMCs with the fleet's common credentials share one secret; any other gets its own
            shared = (bmc.username, bmc.password) == first and not self.unique_passwords
            entries.append(
                InventoryEntry(
                    id=dev,
                    url=bmc.url,
                    model=bmc.model,
                    secret=secret_name if shared else f"{secret_name}-{dev}",
                    ca_bundle=str(self.ca_bundle.resolve()),
                    username=bmc.username,
                    password=bmc.password,
                )
            )
        return entries

    def write_inventory(
        self,
        inventory_path: str | os.PathLike[str],
        secrets_dir: str | os.PathLike[str] | None = None,
        *,
        id_prefix: str = "node",
        secret_name: str = "bmc-sim",
    ) -> Path:
        """Write the TOML inventory and secrets for this fleet; returns the secrets directory."""
        entries = self.inventory_entries(id_prefix=id_prefix, secret_name=secret_name)
        return write_inventory(entries, inventory_path, secrets_dir)
