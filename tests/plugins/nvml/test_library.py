"""The NVML library: binding check, one init per process, a dedicated thread, timeouts, no driver."""

from __future__ import annotations

import importlib.metadata
import threading
import time
import types
from pathlib import Path

import pynvml
import pytest

from plugins.base import (
    DeviceContext,
    DeviceTimeoutError,
    Empty,
    GpuMetricsQuery,
    HostEnvironmentError,
    Ping,
)
from plugins.nvml import NvmlLibrary, NvmlPlugin, check_binding, shared_library
from plugins.nvml.testing import FakeNode, FakeNvml

# ---- the binding -------------------------------------------------------------------------------


def test_the_installed_binding_is_nvidia_ml_py() -> None:
    assert check_binding() == importlib.metadata.version("nvidia-ml-py")


def test_a_shadowing_pynvml_module_is_refused(tmp_path: Path) -> None:
    impostor = types.ModuleType("pynvml")
    impostor.__file__ = str(tmp_path / "site-packages" / "pynvml" / "__init__.py")
    impostor._nvmlGetFunctionPointer = lambda name: None  # type: ignore[attr-defined]
    with pytest.raises(HostEnvironmentError) as info:
        check_binding(impostor)
    assert "shadows" in info.value.message
    assert "pip uninstall pynvml" in info.value.message


def test_a_module_without_the_function_resolver_is_refused() -> None:
    # same file as the real one, but not the official code (e.g. pynvml <= 11.5 overwrote it)
    impostor = types.ModuleType("pynvml")
    impostor.__file__ = pynvml.__file__
    with pytest.raises(HostEnvironmentError, match="not the one from nvidia-ml-py"):
        check_binding(impostor)


def test_a_missing_distribution_is_refused() -> None:
    def missing(name: str) -> importlib.metadata.Distribution:
        raise importlib.metadata.PackageNotFoundError(name)

    with pytest.raises(HostEnvironmentError, match="install nvidia-ml-py"):
        check_binding(pynvml, missing)


def test_the_deprecated_pynvml_package_next_to_it_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    real = importlib.metadata.distribution("nvidia-ml-py")

    class Legacy:
        version = "13.0.1"

    def lookup(name: str) -> importlib.metadata.Distribution:
        return real if name == "nvidia-ml-py" else Legacy()  # type: ignore[return-value]

    assert check_binding(pynvml, lookup) == real.version
    assert "deprecated `pynvml` package 13.0.1" in caplog.text


async def test_start_fails_when_the_binding_is_shadowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pynvml, "__file__", "/opt/elsewhere/pynvml.py")
    plugin = NvmlPlugin(NvmlLibrary())
    with pytest.raises(HostEnvironmentError, match="shadows"):
        await plugin.start()


# ---- lifecycle and thread ----------------------------------------------------------------------


async def test_nvml_is_initialised_once_and_shut_down_after_the_last_user() -> None:
    library = NvmlLibrary()
    with FakeNvml.node("h100") as fake:
        first, second = NvmlPlugin(library), NvmlPlugin(library)
        await first.start()
        await second.start()
        ctx = DeviceContext(device_id="n")
        await first.ping(ctx, Ping())
        await second.gpu_metrics(ctx, GpuMetricsQuery())
        assert fake.called("nvmlInit") == 1
        await first.close()
        assert fake.called("nvmlShutdown") == 0
        await second.close()
        assert fake.called("nvmlShutdown") == 1
        assert fake.refcount == 0


def test_the_default_library_is_shared_by_the_process() -> None:
    assert NvmlPlugin()._lib is shared_library() is NvmlPlugin()._lib


async def test_every_nvml_call_runs_on_the_dedicated_thread_not_the_event_loop() -> None:
    threads: list[str] = []
    with FakeNvml.node("h100") as fake:
        real = pynvml.nvmlDeviceGetPowerUsage

        def spy(handle: object) -> int:
            threads.append(threading.current_thread().name)
            return int(real(handle))

        pynvml.nvmlDeviceGetPowerUsage = spy
        library = NvmlLibrary()
        try:
            await NvmlPlugin(library).gpu_metrics(DeviceContext(device_id="n"), GpuMetricsQuery())
        finally:
            await library.close()
        assert fake.called("nvmlDeviceGetPowerUsage") == 1
    assert threads and all(name.startswith("nvml") for name in threads)
    assert threading.current_thread().name not in threads


async def test_a_hung_call_times_out_at_the_deadline() -> None:
    library = NvmlLibrary()
    with FakeNvml.node("h100"):
        try:
            with pytest.raises(DeviceTimeoutError, match="slow call: NVML did not answer within"):
                await library.run(lambda: time.sleep(0.3), what="slow call", within=0.05)
        finally:
            await library.close()


async def test_the_request_deadline_bounds_every_call() -> None:
    async with FakeNode.start("h100") as node:
        count = pynvml.nvmlDeviceGetCount

        def slow() -> int:
            time.sleep(0.3)  # a driver call that hangs
            return int(count())

        pynvml.nvmlDeviceGetCount = slow
        started = time.monotonic()
        with pytest.raises(DeviceTimeoutError, match="read GPU metrics"):
            await node.plugin.raw_metrics(node.ctx(deadline=time.monotonic() + 0.05), Empty())
        assert time.monotonic() - started < 0.25


# ---- without a driver ---------------------------------------------------------------------------


async def test_without_a_driver_ping_says_so_clearly() -> None:
    async with FakeNode.start("h100", driver_loaded=False) as node:
        with pytest.raises(HostEnvironmentError) as info:
            await node.do("ping", Ping())
        assert "NVML library not found" in info.value.message
        assert "is the NVIDIA driver installed?" in info.value.message
        assert info.value.retryable  # the driver may be installed later
        with pytest.raises(HostEnvironmentError, match="driver installed"):
            await node.do("std_metrics", Empty())


async def test_a_driver_that_appears_later_is_picked_up() -> None:
    async with FakeNode.start("h100", driver_loaded=False) as node:
        with pytest.raises(HostEnvironmentError):
            await node.do("ping", Ping())
        node.fake.driver_loaded = True
        assert (await node.do("ping", Ping())).result.ok


async def test_failed_initialisation_is_retried_with_backoff() -> None:
    now = [100.0]
    library = NvmlLibrary(retry_initial=2.0, retry_max=20.0, clock=lambda: now[0])
    with FakeNvml.node("h100", driver_loaded=False, init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED) as fake:
        plugin = NvmlPlugin(library)
        await plugin.start()  # does not fail: NVML may come later
        ctx = DeviceContext(device_id="n")
        with pytest.raises(HostEnvironmentError, match="driver is not loaded"):
            await plugin.ping(ctx, Ping())
        assert fake.called("nvmlInit") == 1  # within the backoff: the cached error, no new attempt
        fake.driver_loaded = True
        now[0] += 2.5
        assert (await plugin.ping(ctx, Ping())).result.ok
        assert fake.called("nvmlInit") == 2
        await plugin.close()


async def test_uninitialised_nvml_is_initialised_again() -> None:
    async with FakeNode.start("h100") as node:
        node.fake.refcount = 0  # someone else shut NVML down
        with pytest.raises(Exception, match="not initialised"):
            await node.do("ping", Ping())
        assert (await node.do("ping", Ping())).result.ok


async def test_real_binding_without_driver_gives_a_clear_environment_error() -> None:
    """On this machine (no NVIDIA driver) the real binding reports LIBRARY_NOT_FOUND."""
    library = NvmlLibrary()
    plugin = NvmlPlugin(library)
    await plugin.start()
    try:
        if library.initialised:
            pytest.skip("a real NVIDIA driver is present")
        with pytest.raises(HostEnvironmentError, match=r"is the NVIDIA driver installed\?"):
            await plugin.ping(DeviceContext(device_id="n"), Ping())
    finally:
        await plugin.close()
