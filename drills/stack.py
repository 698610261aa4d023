"""The processes a drill runs: simulated BMCs, the topology sink and the controller, all real.

The controller and the BMC simulators come from `bench` (`ControllerProcess`, `SimulatorProcesses`);
the sink is `devicectl topology-sink --record FILE` in its own process, so a drill can stop it (a
topology outage) and read, from its record file, every response it received in arrival order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import aiohttp
from google.protobuf import json_format

from bench.loadgen import device_ids
from bench.processes import ControllerProcess, free_port, write_noop_inventory
from bench.simulators import SimulatorProcesses
from bench.util import ROOT, child_env
from controller import translate
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb

#: per-device Redfish options for every drill: short timeouts and few retries, so that a faulty BMC
#: answers within a drill's bounded waits (the defaults are sized for real firmware)
REDFISH_OPTIONS = {
    "connect_timeout": 2.0,
    "read_timeout": 2.0,
    "max_attempts": 3,
    "retry_backoff": 0.1,
    "max_retry_wait": 2.0,
    "busy_backoff": 1.0,
}


@dataclass(frozen=True)
class Arrival:
    """One response as the sink recorded it."""

    request_id: str
    device: str
    ok: bool
    error: str
    seen_at: float  # time.monotonic() when the drill read it (within one poll interval of arrival)
    #: per GPU of a GPU-policies response: (gpu id, ok, power_cap_watts, diag_msg)
    gpus: tuple[tuple[int, bool, float, str], ...] = ()


class SinkProcess:
    """`devicectl topology-sink` on a fixed port, restartable, with its record file read incrementally."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.record = workdir / "sink-record.jsonl"
        self.log_path = workdir / "sink.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._offset = 0
        self._partial = b""
        self.arrivals: list[Arrival] = []
        self.counts: Counter[str] = Counter()
        #: time.monotonic() when the last start's port first accepted a connection
        self.listening_at = 0.0

    async def start(self, timeout: float = 30.0, *, first: bool = False) -> None:
        """Start the sink and wait until its port accepts connections. On the `first` start a port
        another process took meanwhile is given up for a fresh one (later starts keep the port the
        controller calls back on)."""
        for _ in range(3 if first else 1):
            self._log = self.log_path.open("ab")
            args = [sys.executable, "-m", "controller", "topology-sink", "--listen", self.address]
            self.proc = subprocess.Popen(
                [*args, "--record", str(self.record)],
                cwd=ROOT,
                env=child_env(),
                stdout=subprocess.DEVNULL,  # it prints one line per response: costly under load
                stderr=self._log,
            )
            await self._listening(timeout)
            for _ in range(10):  # a sink that could not bind exits (the port answered for another);
                self.poll()  # meanwhile responses arrive: their times count from `listening_at`
                await asyncio.sleep(0.05)
            if self.proc.poll() is None:
                return
            self._log.close()
            if not first:
                break
            self.port = free_port()
            self.address = f"127.0.0.1:{self.port}"
        code = self.proc.returncode if self.proc is not None else None
        raise RuntimeError(f"topology sink exited with {code}: {self._log_tail()}")

    async def _listening(self, timeout: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return  # the caller reports it
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                self.listening_at = time.monotonic()
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
                return
            await asyncio.sleep(0.05)
        raise TimeoutError(f"topology sink not listening after {timeout:.0f} s")

    async def stop(self) -> None:
        """SIGTERM (SIGKILL after 15 s): a receiver that went away."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.proc.wait, 15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                await asyncio.to_thread(self.proc.wait)
        if self._log is not None:
            self._log.close()
            self._log = None

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    def poll(self) -> int:
        """Read what the sink appended since the last call; returns how many responses that was."""
        try:
            with self.record.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return 0
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()  # an incomplete last line is read again next time
        now = time.monotonic()
        for line in lines:
            if not line.strip():
                continue
            response = json_format.ParseDict(json.loads(line), pb.DeviceControllerResponse())
            ok, error = translate.success_of(response)
            gpus = tuple(
                (r.gpu_id, r.ok, r.power_cap_watts, r.diag_msg) for r in response.gpu_policies_update.results
            )
            self.counts[response.request_id] += 1
            self.arrivals.append(Arrival(response.request_id, response.device, ok, error, now, gpus))
        return len(lines)

    def first(self) -> dict[str, Arrival]:
        """The first arrival of each request id."""
        out: dict[str, Arrival] = {}
        for arrival in self.arrivals:
            out.setdefault(arrival.request_id, arrival)
        return out


class Stack:
    """BMC simulators + sink + controller for one drill, stopped together by `close()`."""

    def __init__(
        self,
        workdir: Path,
        *,
        bmcs: int,
        database_url: str,
        name: str = "controller",
        extra_args: tuple[str, ...] = (),
        latency: float = 0.0,
        noop: bool = False,
    ) -> None:
        self.workdir = workdir
        self.sims = SimulatorProcesses(workdir / "bmcs", bmcs, latency=latency)
        #: `bmcs` no-op devices instead (bench/noop_plugin.py): no simulators, no caps to check;
        #: what is left is the controller's own cost per request
        self.noop = noop
        self.sink = SinkProcess(workdir)
        self.database_url = database_url
        self.name = name
        self.extra_args = extra_args
        self.controller: ControllerProcess | None = None
        self.devices: list[str] = []
        self._http: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        inventory = self.workdir / "inventory.toml"
        if self.noop:
            self.devices = device_ids("noop", self.sims.n)
            write_noop_inventory(inventory, self.devices)
        else:
            await self.sims.start()
            self.devices = _with_options(self.sims.inventory, inventory, REDFISH_OPTIONS)
        await self.sink.start(first=True)
        self.controller = ControllerProcess(
            self.workdir,
            database_url=self.database_url,
            callback=self.sink.address,
            inventory=inventory,
            secrets_dir=None if self.noop else self.sims.secrets_dir,
            instance_id=f"drill-{self.name}",
            name=self.name,
        )
        self.controller.args += list(self.extra_args)
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        await self.controller.start()

    @property
    def ctl(self) -> ControllerProcess:
        assert self.controller is not None, "stack not started"
        return self.controller

    async def close(self) -> None:
        if self.controller is not None:
            await self.controller.stop()
        await self.sink.stop()
        if self._http is not None:
            await self._http.close()
        if not self.noop:
            await self.sims.stop()

    # ---- the simulators' control endpoint (one process per 1000 BMCs; drills use fewer) ----

    async def control(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        assert self._http is not None, "stack not started"
        base = self.sims.control_urls[0]
        async with self._http.request(method, base + path, json=body) as reply:
            data = await reply.json()
            if reply.status >= 400:
                raise RuntimeError(f"simulator control {method} {path}: {data}")
            return data

    async def gpu_caps(self, index: int) -> list[float]:
        """The four GPU set points BMC `index` holds now."""
        state = await self.control("GET", f"/bmcs/{index}/state")
        return [float(state["caps"][f"GPU_{g}"]["set_point"]) for g in range(4)]

    def tracebacks(self) -> int:
        """Tracebacks in the controller's log so far (a handled fault must not produce one)."""
        try:
            return self.ctl.log_path.read_text(errors="replace").count("Traceback (most recent call last)")
        except OSError:
            return 0


def _with_options(source: Path, target: Path, options: dict[str, Any]) -> list[str]:
    """Copy the simulators' inventory adding `options` to each `[device.redfish]` table; returns the
    device ids in inventory order (= BMC index order)."""
    extra = [f"{key} = {json.dumps(value)}" for key, value in options.items()]
    lines: list[str] = []
    devices: list[str] = []
    for line in source.read_text().splitlines():
        lines.append(line)
        if line.strip() == "[device.redfish]":
            lines += extra
        if line.startswith("id = "):
            devices.append(json.loads(line.split("=", 1)[1].strip()))
    target.write_text("\n".join(lines) + "\n")
    return devices
