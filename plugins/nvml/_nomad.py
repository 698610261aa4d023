"""Nomad's device-plugin trio for the NVML plugin: the fingerprint and stats streams, and the
reservation, each poll run on the NVML thread within the stream timeout (the shapes they send are
built in `_streams`)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator, Sequence
from datetime import UTC, datetime
from typing import Any

from plugins.base import (
    ContainerReservation,
    DeviceControllerError,
    FingerprintResponse,
    InvalidRequestError,
    StatsResponse,
)
from plugins.nvml import _telemetry
from plugins.nvml._gpus import KnownGpu, enumerate_gpus
from plugins.nvml._library import NvmlLibrary
from plugins.nvml._plugin_config import PluginConfig
from plugins.nvml._streams import build_groups, build_stats, reservation, take_fingerprint, take_stats


async def fingerprints(
    lib: NvmlLibrary, config: PluginConfig, interval: float, timeout: float
) -> AsyncGenerator[FingerprintResponse, None]:
    """This node's GPUs grouped by model; sent at once, then whenever something changes.

    GPUs seen earlier in the stream stay listed (unhealthy) when they are lost.
    """
    known: dict[str, KnownGpu] = {}
    last: tuple[Any, ...] | None = None
    while True:
        response: FingerprintResponse
        try:
            snapshot = await lib.run(
                functools.partial(take_fingerprint, dict(known)),
                what="fingerprint",
                within=timeout,
            )
            for gpu in snapshot.gpus:
                known[gpu.uuid] = KnownGpu(gpu.uuid, gpu.pci_bus_id, gpu.name)
            response = FingerprintResponse(groups=config.visible(build_groups(snapshot)))
            key: tuple[Any, ...] = ("groups", response.groups)
        except DeviceControllerError as exc:
            response = FingerprintResponse(error=exc)
            key = ("error", type(exc).__name__, str(exc))
        if key != last:
            last = key
            yield response
        await asyncio.sleep(interval)


async def stats(
    lib: NvmlLibrary, config: PluginConfig, interval: float, timeout: float
) -> AsyncGenerator[StatsResponse, None]:
    """Every `interval` seconds, each GPU's power, energy, temperatures, clocks, utilisation, limits."""
    known: dict[str, KnownGpu] = {}
    while True:
        response: StatsResponse
        try:
            readings = await lib.run(
                functools.partial(take_stats, dict(known)),
                what="stats",
                within=timeout,
            )
            for r in readings:
                known[r.uuid] = KnownGpu(r.uuid, r.pci_bus_id, r.name)
            response = StatsResponse(groups=config.visible(build_stats(readings, datetime.now(UTC))))
        except DeviceControllerError as exc:
            response = StatsResponse(error=exc)
        yield response
        await asyncio.sleep(interval)


async def reserve(
    lib: NvmlLibrary, config: PluginConfig, device_ids: Sequence[str], timeout: float
) -> ContainerReservation:
    """`NVIDIA_VISIBLE_DEVICES` with the GPUs' UUIDs, and their device nodes."""
    wanted = list(device_ids)
    config.check_reserve(wanted)

    def job() -> list[int]:
        gpus = {gpu.uuid: gpu for gpu in enumerate_gpus().gpus}
        unknown = [d for d in wanted if d not in gpus]
        if unknown:
            raise InvalidRequestError(
                f"unknown GPU UUID(s) {', '.join(unknown)} (this node has: {', '.join(gpus) or 'none'})"
            )
        return [int(_telemetry.minor_number(gpus[d])) for d in wanted]

    minors = await lib.run(job, what="reserve", within=timeout)
    return reservation(wanted, minors)
