"""What the fan-out benchmark sends and how it is sized: the activation of each phase, the writes
it makes on a GB200 tray, the sender's retries and the configuration (`bench.fanout` runs it; the
scale-out and client-only benchmarks send the same activations)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

from controller import translate
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from plugins.base import (
    Allocation,
    ElementType,
    Policy,
    PolicyAction,
    PolicyChange,
    PolicyLimit,
    PowerLimit,
    RequestKind,
)

#: cap writes one activation makes on a GB200 tray: 2 superchip modules (the node policy), 4 GPUs, 2 CPUs
EXPECTED_WRITES = 8
#: refusals a sender retries (the controller sheds load with CANCELLED when it cannot pick calls up)
RETRY_CODES = frozenset(
    {
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    }
)
SEND_ATTEMPTS = 10


@dataclass(frozen=True)
class Phase:
    """One activation: its resource group and the policy's node, GPU and CPU totals (watts)."""

    name: str
    group: str
    node: int
    gpu: int
    cpu: int

    @property
    def per_component(self) -> dict[str, int]:
        """Watts per cap resource: module (node / 2), GPU (gpu / 4), CPU (cpu / 2)."""
        return {"module": self.node // 2, "gpu": self.gpu // 4, "cpu": self.cpu // 2}


# Different values in the two phases, all different from the simulator's defaults, so every cap
# is written in both (the plugin skips writes of values already in force).
PHASES = (
    Phase("first contact", "bench-first", node=5000, gpu=3200, cpu=600),
    Phase("steady state", "bench-steady", node=4800, gpu=3000, cpu=500),
)
#: the wave after a restart (SIGTERM, start again on the same database, warm-up finished): other
#: values again, so every cap is written
AFTER_RESTART = Phase("after restart", "bench-restart", node=4600, gpu=2800, cpu=440)


@dataclass(frozen=True)
class FanoutConfig:
    """Sizes and settings of the fan-out benchmark."""

    sizes: tuple[int, ...] = (100, 1000, 2000, 4000)
    latency: float = 0.05
    per_process: int = 1000
    #: per-BMC concurrency of the Redfish plugin (its default; checked against the simulator)
    concurrency: int = 2
    baseline_workers: int = 64
    baseline: bool = True
    backend: str = "sqlite"
    log_level: str = "INFO"
    #: write py-spy profiles of the controller per phase here (None: no profiling)
    profile_dir: Path | None = None
    #: run the Redfish plugin as its own process (an inventory [[plugin]] table): the extra hop's cost
    plugin_process: bool = False
    #: controller layouts, each against fresh simulators: 0 = one process on `backend`, N = `serve
    #: --workers N` on PostgreSQL (CPU counted over the front end and its executors)
    workers: tuple[int, ...] = (0,)
    #: `executor_niceness` of the `--workers` layouts (None: the controller's default)
    executor_niceness: int | None = None
    #: the controller's `max_concurrency` (None: the fleet size, at least the default 1,024, so
    #: every activation of a wave runs at once). Peak memory grows with it (docs/operations.md)
    max_concurrency: int | None = None
    #: a third wave after a restart with the warm-up at start (`AFTER_RESTART`)
    after_restart: bool = True
    #: single repeated pings sent while each wave executes, timing their acks (`bench.prober`).
    #: Each ack is CPU the controller spends beside the wave's activations (a repeat's ack took
    #: 2-5 ms each during a 1,000-BMC wave): off for a like-for-like CPU comparison against a
    #: harness that sends none
    probes: bool = True

    def concurrency_for(self, n: int) -> int:
        """The `max_concurrency` a controller of an `n`-BMC run is given."""
        return self.max_concurrency if self.max_concurrency is not None else max(n, 1024)


QUICK_FANOUT = FanoutConfig(sizes=(3,), latency=0.02, per_process=2, baseline_workers=4)


def activation(device: str, request_id: str, phase: Phase) -> pb.DeviceControllerRequest:
    """The resource-group activation a topology server would send for `phase`."""
    policy = Policy(
        "bench",
        (
            PolicyLimit(ElementType.NODE, PowerLimit(watts=phase.node)),
            PolicyLimit(ElementType.GPU, PowerLimit(watts=phase.gpu)),
            PolicyLimit(ElementType.CPU, PowerLimit(watts=phase.cpu)),
        ),
    )
    return translate.request_to_proto(
        RequestKind.RESOURCE_GROUP_ACTIVATE,
        Allocation(phase.group, PolicyChange(PolicyAction.SET, policy)),
        device=device,
        request_id=request_id,
    )
