"""Read-only checks against a real NVIDIA driver. Skipped where NVML does not initialise.

These run on production GPU nodes, so they must never change anything: every test runs under
`forbid_writes()`, which makes every mutating NVML function (limits, profiles, clocks, modes...)
raise, and no test calls a plugin operation that writes (no policy, GPU policy or profile
change). Run them with `pytest -m gpu tests/plugins/nvml`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pynvml
import pytest

from plugins.base import DeviceContext, Empty, GpuMetricsQuery, Ping
from plugins.nvml import NvmlLibrary, NvmlPlugin
from plugins.nvml._gpus import enumerate_gpus
from plugins.nvml._power import GPU_SCOPE, read_limits
from plugins.nvml._profiles import read_current, read_info
from plugins.nvml.testing import forbid_writes

pytestmark = pytest.mark.gpu


def _real_nvml_available() -> str:
    """'' when a real driver answers, else why not."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return f"NVML does not initialise here (code {getattr(exc, 'value', '?')}): no NVIDIA driver"
    try:
        if pynvml.nvmlDeviceGetCount() == 0:
            return "NVML initialises but sees no GPU"
    finally:
        pynvml.nvmlShutdown()
    return ""


@pytest.fixture(scope="module")
def real_nvml() -> Iterator[None]:
    reason = _real_nvml_available()
    if reason:
        pytest.skip(reason)
    yield


@pytest.fixture
async def plugin(real_nvml: None) -> AsyncIterator[NvmlPlugin]:
    with forbid_writes() as refused:
        plugin = NvmlPlugin(NvmlLibrary(), fingerprint_interval=0.1)
        await plugin.start()
        try:
            yield plugin
        finally:
            await plugin.close()
        assert not refused, f"a read-only check tried to write: {refused}"


def ctx() -> DeviceContext:
    return DeviceContext(device_id="local-gpu-node")


async def test_ping_and_gpu_power(plugin: NvmlPlugin) -> None:
    assert (await plugin.ping(ctx(), Ping())).result.ok
    out = await plugin.gpu_metrics(ctx(), GpuMetricsQuery())
    assert out.result.metrics and all(m.watts > 0 for m in out.result.metrics)


async def test_fingerprint(plugin: NvmlPlugin) -> None:
    stream = plugin.fingerprint([])
    try:
        response = await asyncio.wait_for(anext(stream), 30)
    finally:
        await stream.aclose()
    assert response.error is None and response.groups
    for group in response.groups:
        assert group.vendor == "nvidia" and group.devices
        assert all(d.id.startswith(("GPU-", "MIG-")) for d in group.devices)
        assert all(d.locality and d.locality.pci_bus_id for d in group.devices)
        assert group.attributes["driver_version"].value


async def test_stats(plugin: NvmlPlugin) -> None:
    stream = plugin.stats([], 1.0)
    try:
        response = await asyncio.wait_for(anext(stream), 30)
    finally:
        await stream.aclose()
    assert response.error is None
    for group in response.groups:
        for stats in group.instance_stats.values():
            power = stats.stats.attributes["power"]
            assert power.unit == "W" and power.float_numerator is not None and power.float_numerator > 0


async def test_limit_reads_are_consistent(plugin: NvmlPlugin) -> None:
    out = await plugin.std_metrics(ctx(), Empty())
    assert out.result.metrics is not None
    for gpu in out.result.metrics.gpus:
        assert 0 < gpu.min_watts <= gpu.limit_watts <= gpu.max_watts


async def test_limit_and_profile_info_reads(real_nvml: None) -> None:
    """The raw reads behind the plugin, through the real binding (checks struct layouts)."""
    library = NvmlLibrary()
    with forbid_writes() as refused:

        def job() -> list[str]:
            notes = []
            for gpu in enumerate_gpus().gpus:
                limits = read_limits(gpu.require(), GPU_SCOPE)
                assert limits.min_mw <= limits.requested_mw <= limits.max_mw
                assert 0 < limits.enforced_mw <= limits.max_mw
                try:
                    info = read_info(gpu.require())
                    current = read_current(gpu.require())
                except pynvml.NVMLError as exc:  # Hopper and older: not supported
                    notes.append(f"{gpu.label}: profiles unavailable ({getattr(exc, 'value', '?')})")
                    continue
                assert current.requested <= current.supported | info.supported
                notes.append(f"{gpu.label}: profiles {sorted(info.supported)}")
            return notes

        try:
            notes = await library.run(job, what="read limits and profiles", within=60)
        finally:
            await library.close()
        assert notes
        assert not refused
