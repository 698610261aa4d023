"""The scale-out benchmark's sizes (`bench.scaleout`), in a module of their own so that its fan-out
half (`bench.scaleout_fanout`) can name them without importing the module that runs it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScaleoutConfig:
    processes: tuple[int, ...] = (1, 2, 3)
    benchmarks: tuple[str, ...] = ("ingest", "fanout")
    # ingest
    devices: int = 1000
    requests: int = 12_000
    #: requests in flight over all load generators together
    concurrency: int = 256
    warmup: int = 100
    # fan-out
    bmcs: int = 1000
    latency: float = 0.05
    per_sim_process: int = 1000
    #: the Redfish plugin's per-BMC concurrency (its default)
    per_bmc: int = 2
    #: CPUs the simulator processes are confined to (empty: not confined)
    pin_simulators: tuple[int, ...] = ()
    #: the default's: a short lease lapses on a machine this loaded (see BENCHMARKS.md) and work is redone
    lease_ttl: float = 30.0
    log_level: str = "INFO"


QUICK = ScaleoutConfig(
    processes=(1, 2),
    devices=20,
    requests=150,
    concurrency=16,
    warmup=10,
    bmcs=3,
    latency=0.02,
    per_sim_process=2,
    lease_ttl=5.0,
)
