"""BMC simulators in processes of their own (their CPU must not count as the controller's).

A big fleet is split over several simulator processes (`per_process` BMCs each), each started
through the simulator's command line with a plain-HTTP control endpoint; the benchmark reads and
resets the per-BMC call counters through those endpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import aiohttp

from bench import procstats
from bench.util import ROOT, child_env, say
from bmcsim import DEFAULT_PASSWORD, ensure_tls_files

USERNAME = "admin"
PASSWORD = DEFAULT_PASSWORD


class SimulatorProcesses:
    """`n` simulated BMCs of one model in `ceil(n / per_process)` processes.

    After `start()`: `inventory` (one TOML inventory for the controller), `secrets_dir`,
    `ca_bundle`, `urls` (every BMC's base URL) and `stats()` / `reset()` over all processes.
    """

    def __init__(
        self,
        workdir: Path,
        n: int,
        *,
        latency: float,
        per_process: int = 1000,
        model: str = "gb200",
        session_limit: int = 4,
    ) -> None:
        if n < 1 or per_process < 1:
            raise ValueError("need at least one BMC and one BMC per process")
        self.workdir = workdir
        self.n = n
        self.latency = latency
        self.model = model
        self.session_limit = session_limit
        self.counts = [min(per_process, n - first) for first in range(0, n, per_process)]
        self.cert_dir = workdir / "tls"
        self.secrets_dir = workdir / "secrets"
        self.inventory = workdir / "inventory.toml"
        self.ca_bundle = self.cert_dir / "ca.pem"
        self.urls: list[str] = []
        self.control_urls: list[str] = []
        self._procs: list[subprocess.Popen[bytes]] = []
        self._logs: list[IO[bytes]] = []
        self._http: aiohttp.ClientSession | None = None

    @property
    def processes(self) -> int:
        return len(self.counts)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    async def start(self, timeout: float | None = None) -> None:
        """Start every process and wait until each has written its ready file."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        # Create the CA once, before the processes race to create it.
        await asyncio.to_thread(ensure_tls_files, self.cert_dir)
        timeout = timeout if timeout is not None else 60 + self.n / 20
        ready_files = []
        for index, count in enumerate(self.counts):
            ready = self.workdir / f"sim-{index}.ready.json"
            ready.unlink(missing_ok=True)
            ready_files.append(ready)
            log = (self.workdir / f"sim-{index}.log").open("ab")
            self._logs.append(log)
            args = [
                sys.executable,
                "-m",
                "bmcsim",
                "--count",
                str(count),
                "--model",
                self.model,
                "--latency",
                str(self.latency),
                "--cert-dir",
                str(self.cert_dir),
                "--session-limit",
                str(self.session_limit),
                "--control-port",
                "0",
                "--inventory-out",
                str(self.workdir / f"sim-{index}.inventory.toml"),
                "--secrets-dir",
                str(self.secrets_dir),
                # device ids must be unique across processes: each numbers its BMCs from 1
                "--id-prefix",
                f"s{index}n",
                "--ready-file",
                str(ready),
                "--log-level",
                "WARNING",
            ]
            self._procs.append(
                subprocess.Popen(args, cwd=ROOT, env=child_env(), stdout=log, stderr=subprocess.STDOUT)
            )
        infos = await self._wait_ready(ready_files, timeout)
        self.urls = [url for info in infos for url in info["urls"]]
        self.control_urls = [str(info["control_url"]) for info in infos]
        await asyncio.to_thread(self._merge_inventories, [Path(str(info["inventory"])) for info in infos])
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120))

    def _merge_inventories(self, parts: list[Path]) -> None:
        """One inventory for the controller (device ids differ by process: see `--id-prefix`)."""
        self.inventory.write_text("\n".join(part.read_text() for part in parts))

    async def _wait_ready(self, ready_files: list[Path], timeout: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        last_report = time.monotonic()
        while True:
            done = [f.exists() for f in ready_files]
            if all(done):
                return [json.loads(f.read_text()) for f in ready_files]
            for index, proc in enumerate(self._procs):
                if proc.poll() is not None:
                    log = (self.workdir / f"sim-{index}.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"simulator process {index} exited with {proc.returncode}:\n{log}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"simulators not ready after {timeout:.0f} s ({sum(done)} of {len(done)})")
            if time.monotonic() - last_report > 5:
                last_report = time.monotonic()
                say(f"simulators: {sum(done)} of {len(done)} processes ready")
            await asyncio.sleep(0.1)

    async def _call(self, method: str, base: str, path: str) -> Any:
        assert self._http is not None, "simulators not started"
        async with self._http.request(method, base + path) as reply:
            reply.raise_for_status()
            return await reply.json()

    async def stats(self) -> list[dict[str, Any]]:
        """Every BMC's counters (see `BmcStats.to_dict`), in the order of `urls`."""
        replies = await asyncio.gather(*(self._call("GET", base, "/stats") for base in self.control_urls))
        return [bmc for reply in replies for bmc in reply["bmcs"]]

    async def reset(self) -> None:
        """Zero every BMC's counters."""
        await asyncio.gather(*(self._call("POST", base, "/stats/reset") for base in self.control_urls))

    def cpu_seconds(self) -> float:
        """CPU seconds used so far by all simulator processes together."""
        return procstats.cpu_seconds(self.pids)

    async def stop(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL after 30 s)."""
        if self._http is not None:
            await self._http.close()
            self._http = None
        for proc in self._procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self._procs:
            try:
                await asyncio.to_thread(proc.wait, 30)
            except subprocess.TimeoutExpired:
                proc.kill()
                await asyncio.to_thread(proc.wait)
        for log in self._logs:
            with contextlib.suppress(OSError):
                log.close()
        self._procs, self._logs = [], []


def processes_for(n: int, per_process: int) -> int:
    """How many simulator processes a fleet of `n` BMCs takes."""
    return math.ceil(n / per_process)
