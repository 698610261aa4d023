"""The fake NVML itself: strictness, handle semantics, faults, and the read-only guard."""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from plugins.nvml.testing import FakeNvml, forbid_writes, is_mutating


def test_unexpected_calls_fail_loudly() -> None:
    with pytest.raises(AssertionError, match="unexpected NVML calls: nvmlDeviceGetFanSpeed"):
        with FakeNvml.node("h100") as fake:
            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            with pytest.raises(AssertionError, match="unexpected NVML call nvmlDeviceGetFanSpeed"):
                pynvml.nvmlDeviceGetFanSpeed(handle)
            assert fake.unexpected == ["nvmlDeviceGetFanSpeed"]


def test_the_unchecked_v2_wrapper_is_not_served() -> None:
    """The plugin must never call the stock `_v2` setter, which swallows errors."""
    with FakeNvml.node("gh200") as fake:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        with pytest.raises(AssertionError):
            pynvml.nvmlDeviceSetPowerManagementLimit_v2(handle, pynvml.NVML_POWER_SCOPE_MODULE, 800_000)
        fake.unexpected.clear()


def test_the_real_binding_is_restored_afterwards() -> None:
    original = pynvml.nvmlDeviceGetPowerUsage
    with FakeNvml.node("h100"):
        assert pynvml.nvmlDeviceGetPowerUsage is not original
    assert pynvml.nvmlDeviceGetPowerUsage is original
    assert pynvml.nvmlExceptionClass(15) is pynvml.NVMLError_GpuIsLost  # helpers are left alone


def test_handles_are_unhashable_and_unequal_across_lookups() -> None:
    with FakeNvml.node("h100"):
        pynvml.nvmlInit()
        first = pynvml.nvmlDeviceGetHandleByIndex(0)
        second = pynvml.nvmlDeviceGetHandleByUUID(pynvml.nvmlDeviceGetUUID(first))
        assert first != second
        with pytest.raises(TypeError):
            hash(first)


def test_driver_semantics() -> None:
    with FakeNvml.node("h100", "b200") as fake:
        with pytest.raises(pynvml.NVMLError_Uninitialized):
            pynvml.nvmlDeviceGetCount()
        pynvml.nvmlInit()
        pynvml.nvmlInit()
        assert fake.refcount == 2
        with pytest.raises(pynvml.NVMLError_NotFound):
            pynvml.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            pynvml.nvmlDeviceGetHandleByUUID("not-a-uuid")
        h100 = pynvml.nvmlDeviceGetHandleByIndex(0)
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            pynvml.nvmlDeviceSetPowerManagementLimit(h100, 100_000)  # below 200 W
        pynvml.nvmlDeviceSetPowerManagementLimit(h100, 300_000)
        assert pynvml.nvmlDeviceGetPowerManagementLimit(h100) == 300_000
        with pytest.raises(pynvml.NVMLError_NotSupported):  # Hopper has no workload profiles
            info = pynvml.c_nvmlWorkloadPowerProfileProfilesInfo_v1_t()
            pynvml.nvmlDeviceWorkloadPowerProfileGetProfilesInfo(h100, ctypes.byref(info))
        b200 = pynvml.nvmlDeviceGetHandleByIndex(1)
        current = pynvml.c_nvmlWorkloadPowerProfileCurrentProfiles_v1_t()
        current.version = 0  # a struct without its version is refused, as by a driver
        with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
            pynvml.nvmlDeviceWorkloadPowerProfileGetCurrentProfiles(b200, ctypes.byref(current))
        fake.privileged = False
        with pytest.raises(pynvml.NVMLError_NoPermission):
            pynvml.nvmlDeviceSetPowerManagementLimit(h100, 300_000)
        assert [c.function for c in fake.writes()].count("nvmlDeviceSetPowerManagementLimit") == 3


def test_faults_can_be_limited_to_a_gpu_and_a_number_of_calls() -> None:
    with FakeNvml.node("h100", "h100") as fake:
        pynvml.nvmlInit()
        fake.fail("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_TIMEOUT, uuid=fake.gpu(1).uuid, times=2)
        h0, h1 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1))
        assert pynvml.nvmlDeviceGetPowerUsage(h0) == 350_000
        for _ in range(2):
            with pytest.raises(pynvml.NVMLError_Timeout):
                pynvml.nvmlDeviceGetPowerUsage(h1)
        assert pynvml.nvmlDeviceGetPowerUsage(h1) == 350_000
        fake.missing("nvmlDeviceGetTotalEnergyConsumption")
        with pytest.raises(pynvml.NVMLError_FunctionNotFound):
            pynvml.nvmlDeviceGetTotalEnergyConsumption(h0)


def test_energy_and_driver_reload() -> None:
    with FakeNvml.node("h100", "h100") as fake:
        fake.gpu(0).persistence = False
        fake.gpu(0).limit_mw = fake.gpu(1).limit_mw = 400_000
        fake.advance(3.0)
        assert fake.gpu(0).energy_mj == 1_050_000  # 350 W for 3 s
        fake.unload_driver()
        assert (fake.gpu(0).energy_mj, fake.gpu(0).limit_mw) == (0, 700_000)
        assert fake.gpu(1).limit_mw == 400_000  # persistence mode kept this one


def test_only_one_fake_at_a_time() -> None:
    with FakeNvml.node("h100"), pytest.raises(RuntimeError, match="already installed"):
        FakeNvml.node("h100").install()


def test_forbid_writes_refuses_every_setter() -> None:
    assert is_mutating("nvmlDeviceSetPowerManagementLimit")
    assert is_mutating("nvmlDeviceWorkloadPowerProfileUpdateProfiles_v1")
    assert is_mutating("nvmlDeviceSetPowerManagementLimit_v2")
    assert not is_mutating("nvmlDeviceGetPowerManagementLimitConstraints")
    assert not is_mutating("nvmlDeviceGetAutoBoostedClocksEnabled")
    assert not is_mutating("nvmlDeviceWorkloadPowerProfileGetProfilesInfo")
    with FakeNvml.node("h100"), forbid_writes() as refused:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        assert pynvml.nvmlDeviceGetPowerManagementLimit(handle) == 700_000
        with pytest.raises(AssertionError, match="refused in a read-only check"):
            pynvml.nvmlDeviceSetPowerManagementLimit(handle, 300_000)
        with pytest.raises(AssertionError):
            pynvml._nvmlGetFunctionPointer("nvmlDeviceSetPowerManagementLimit_v2")
        assert refused == ["nvmlDeviceSetPowerManagementLimit", "nvmlDeviceSetPowerManagementLimit_v2"]
