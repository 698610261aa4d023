"""The fake NVML functions, with the real wrappers' signatures and return types.

Struct-taking calls receive `ctypes.byref(struct)` as the real C functions do; the struct is
`ref._obj`. Version fields are checked (ARGUMENT_VERSION_MISMATCH), so a plugin that forgets them
fails here as it would on a driver.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

import pynvml

from plugins.nvml.testing._models import Call, FakeGpu, FakeHandle

_ERROR_TEXT = {v: k for k, v in vars(pynvml).items() if k.startswith("NVML_ERROR_") and isinstance(v, int)}


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


def _bits(mask: Any) -> set[int]:
    return {w * 32 + b for w in range(8) for b in range(32) if (mask.mask[w] >> b) & 1}


def _fill(mask: Any, ids: set[int]) -> None:
    for w in range(8):
        mask.mask[w] = 0
    for i in ids:
        mask.mask[i // 32] |= 1 << (i % 32)


def _struct(ref: Any, cls: type, version: int | None) -> Any:
    obj: Any = getattr(ref, "_obj", ref)
    if not isinstance(obj, cls):
        raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    if version is not None and getattr(obj, "version", None) != version:
        raise _err(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    return obj


class FakeNvmlState(Protocol):
    """What these functions read and change on the fake node: `FakeNvml` (`_fake.py`), which passes
    itself in, so this module never imports it."""

    refcount: int

    @property
    def _lock(self) -> AbstractContextManager[Any]: ...
    @property
    def _missing(self) -> set[str]: ...
    @property
    def calls(self) -> list[Call]: ...
    @property
    def unexpected(self) -> list[str]: ...
    @property
    def driver_loaded(self) -> bool: ...
    @property
    def driver_version(self) -> str: ...
    @property
    def driver_branch(self) -> int: ...
    @property
    def init_error(self) -> int: ...
    @property
    def privileged(self) -> bool: ...
    @property
    def wpps_capability(self) -> bool: ...
    def check(self, name: str, uuid: str | None) -> None: ...
    def device(self, handle: Any, function: str) -> FakeGpu: ...
    def require_init(self) -> None: ...
    def require_privilege(self) -> None: ...
    def visible(self) -> list[FakeGpu]: ...


def implementations(fake: FakeNvmlState) -> dict[str, Callable[..., Any]]:
    """name → implementation for every `pynvml` function the fake serves."""

    def dev(handle: Any, name: str) -> FakeGpu:
        return fake.device(handle, name)

    def init() -> None:
        if not fake.driver_loaded:
            raise _err(fake.init_error)
        fake.refcount += 1

    def shutdown() -> None:
        fake.require_init()
        fake.refcount -= 1

    def driver_version() -> str:
        fake.require_init()
        return fake.driver_version

    def count() -> int:
        fake.require_init()
        return len(fake.visible())

    def by_index(index: int) -> FakeHandle:
        fake.require_init()
        visible = fake.visible()
        if not 0 <= index < len(visible):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = visible[index]
        if gpu.lost:  # as nvidia-smi shows: "Unable to determine the device handle ...: GPU is lost"
            raise _err(pynvml.NVML_ERROR_GPU_IS_LOST)
        return FakeHandle(gpu.uuid)

    def by_uuid(uuid: str | bytes) -> FakeHandle:
        fake.require_init()
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        if not text.startswith("GPU-"):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        for gpu in fake.visible():
            if gpu.uuid == text:
                if gpu.lost:
                    raise _err(pynvml.NVML_ERROR_GPU_IS_LOST)
                return FakeHandle(gpu.uuid)
        raise _err(pynvml.NVML_ERROR_NOT_FOUND)

    def pci_info(handle: Any) -> Any:
        gpu = dev(handle, "nvmlDeviceGetPciInfo")
        info = pynvml.nvmlPciInfo_t()
        info.busId = gpu.pci_bus_id.encode()
        info.busIdLegacy = gpu.pci_bus_id[4:].encode()
        domain, bus, rest = gpu.pci_bus_id.split(":")
        info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)
        return info

    def memory_info(handle: Any, version: Any = None) -> Any:
        gpu = dev(handle, "nvmlDeviceGetMemoryInfo")
        used = gpu.memory_total // 3
        return pynvml.c_nvmlMemory_t(total=gpu.memory_total, free=gpu.memory_total - used, used=used)

    def c2c(handle: Any) -> Any:
        gpu = dev(handle, "nvmlDeviceGetC2cModeInfoV")
        if gpu.module is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return pynvml.c_nvmlC2cModeInfo_v1_t(isC2cEnabled=1)

    def set_limit(handle: Any, limit: int) -> None:
        gpu = dev(handle, "nvmlDeviceSetPowerManagementLimit")
        fake.require_privilege()
        if not gpu.min_mw <= int(limit) <= gpu.max_mw:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu.limit_mw = int(limit)

    def field_values(handle: Any, field_ids: list[Any]) -> Any:
        gpu = dev(handle, "nvmlDeviceGetFieldValues")
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        for entry, spec in zip(values, field_ids, strict=True):
            fid, scope = spec if isinstance(spec, tuple) else (spec, 0)
            entry.fieldId, entry.scopeId = fid, scope
            entry.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
            value = _field(gpu, fid, scope)
            if value is None:
                entry.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            else:
                entry.nvmlReturn = pynvml.NVML_SUCCESS
                entry.value.uiVal = value
        return values

    def temperature(handle: Any, sensor: int, version: Any = None) -> int:
        gpu = dev(handle, "nvmlDeviceGetTemperatureV")
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.temperature_c

    def clock(handle: Any, kind: int) -> int:
        gpu = dev(handle, "nvmlDeviceGetClockInfo")
        if kind not in gpu.clocks_mhz:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.clocks_mhz[kind]

    def utilization(handle: Any) -> Any:
        gpu = dev(handle, "nvmlDeviceGetUtilizationRates")
        return pynvml.c_nvmlUtilization_t(gpu=gpu.utilization[0], memory=gpu.utilization[1])

    # ---- workload power profiles (Blackwell+) ----

    def profiles_of(handle: Any, name: str) -> FakeGpu:
        gpu = dev(handle, name)
        if gpu.profiles is None or gpu.architecture < pynvml.NVML_DEVICE_ARCH_BLACKWELL:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def get_info(handle: Any, ref: Any) -> int:
        gpu = profiles_of(handle, "nvmlDeviceWorkloadPowerProfileGetProfilesInfo")
        info = _struct(
            ref,
            pynvml.c_nvmlWorkloadPowerProfileProfilesInfo_v1_t,
            pynvml.nvmlWorkloadPowerProfileProfilesInfo_v1,
        )
        assert gpu.profiles is not None
        _fill(info.perfProfilesMask, set(gpu.profiles.supported))
        for pid, (priority, conflicts) in gpu.profiles.supported.items():
            entry = info.perfProfile[pid]
            entry.version = pynvml.nvmlWorkloadPowerProfileInfo_v1
            entry.profileId, entry.priority = pid, priority
            _fill(entry.conflictingmask, set(conflicts))
        return pynvml.NVML_SUCCESS

    def get_current(handle: Any, ref: Any) -> int:
        gpu = profiles_of(handle, "nvmlDeviceWorkloadPowerProfileGetCurrentProfiles")
        cur = _struct(
            ref,
            pynvml.c_nvmlWorkloadPowerProfileCurrentProfiles_v1_t,
            pynvml.nvmlWorkloadPowerProfileCurrentProfiles_v1,
        )
        assert gpu.profiles is not None
        _fill(cur.perfProfilesMask, set(gpu.profiles.supported))
        _fill(cur.requestedProfilesMask, gpu.profiles.requested)
        _fill(cur.enforcedProfilesMask, gpu.profiles.enforced())
        return pynvml.NVML_SUCCESS

    def requested(handle: Any, ref: Any, name: str) -> tuple[FakeGpu, set[int]]:
        gpu = profiles_of(handle, name)
        fake.require_privilege()
        req = _struct(
            ref,
            pynvml.c_nvmlWorkloadPowerProfileRequestedProfiles_v1_t,
            pynvml.nvmlWorkloadPowerProfileRequestedProfiles_v1,
        )
        return gpu, _valid(gpu, _bits(req.requestedProfilesMask))

    def set_requested(handle: Any, ref: Any) -> int:
        gpu, ids = requested(handle, ref, "nvmlDeviceWorkloadPowerProfileSetRequestedProfiles")
        assert gpu.profiles is not None
        gpu.profiles.requested |= ids
        return pynvml.NVML_SUCCESS

    def clear_requested(handle: Any, ref: Any) -> int:
        gpu, ids = requested(handle, ref, "nvmlDeviceWorkloadPowerProfileClearRequestedProfiles")
        assert gpu.profiles is not None
        gpu.profiles.requested -= ids
        return pynvml.NVML_SUCCESS

    def update_profiles(handle: Any, ref: Any) -> int:
        if fake.driver_branch < 590:  # added in R590 (nvml.md §3)
            raise _err(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        gpu = profiles_of(handle, "nvmlDeviceWorkloadPowerProfileUpdateProfiles_v1")
        if not (fake.privileged or (fake.wpps_capability and fake.driver_branch >= 615)):
            raise _err(pynvml.NVML_ERROR_NO_PERMISSION)
        req = _struct(ref, pynvml.c_nvmlWorkloadPowerProfileUpdateProfiles_v1_t, None)
        ids = _valid(gpu, _bits(req.updateProfilesMask))
        assert gpu.profiles is not None
        if req.operation == pynvml.NVML_POWER_PROFILE_OPERATION_CLEAR:
            gpu.profiles.requested -= ids
        elif req.operation == pynvml.NVML_POWER_PROFILE_OPERATION_SET:
            gpu.profiles.requested |= ids
        elif req.operation == pynvml.NVML_POWER_PROFILE_OPERATION_SET_AND_OVERWRITE:
            gpu.profiles.requested = set(ids)
        else:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_SUCCESS

    def getter(name: str, attr: str) -> Callable[[Any], Any]:
        return lambda handle: getattr(dev(handle, name), attr)

    simple = {
        "nvmlDeviceGetUUID": "uuid",
        "nvmlDeviceGetName": "name",
        "nvmlDeviceGetArchitecture": "architecture",
        "nvmlDeviceGetMinorNumber": "minor",
        "nvmlDeviceGetPowerManagementLimit": "limit_mw",
        "nvmlDeviceGetPowerManagementDefaultLimit": "default_mw",
        "nvmlDeviceGetEnforcedPowerLimit": "enforced_mw",
        "nvmlDeviceGetPowerUsage": "power_mw",
        "nvmlDeviceGetTotalEnergyConsumption": "energy_mj",
        "nvmlDeviceGetCurrentClocksEventReasons": "clocks_event_reasons",
    }
    table: dict[str, Callable[..., Any]] = {name: getter(name, attr) for name, attr in simple.items()}
    table.update(
        {
            "nvmlInit": init,
            "nvmlShutdown": shutdown,
            "nvmlErrorString": lambda code: _ERROR_TEXT.get(code, f"NVML error {code}"),
            "nvmlSystemGetDriverVersion": driver_version,
            "nvmlDeviceGetCount": count,
            "nvmlDeviceGetHandleByIndex": by_index,
            "nvmlDeviceGetHandleByUUID": by_uuid,
            "nvmlDeviceGetPciInfo": pci_info,
            "nvmlDeviceGetMemoryInfo": memory_info,
            "nvmlDeviceGetPersistenceMode": lambda h: int(dev(h, "nvmlDeviceGetPersistenceMode").persistence),
            "nvmlDeviceGetC2cModeInfoV": c2c,
            "nvmlDeviceGetPowerManagementLimitConstraints": lambda h: [
                (g := dev(h, "nvmlDeviceGetPowerManagementLimitConstraints")).min_mw,
                g.max_mw,
            ],
            "nvmlDeviceSetPowerManagementLimit": set_limit,
            "nvmlDeviceGetFieldValues": field_values,
            "nvmlDeviceGetTemperatureV": temperature,
            "nvmlDeviceGetClockInfo": clock,
            "nvmlDeviceGetUtilizationRates": utilization,
            "nvmlDeviceWorkloadPowerProfileGetProfilesInfo": get_info,
            "nvmlDeviceWorkloadPowerProfileGetCurrentProfiles": get_current,
            "nvmlDeviceWorkloadPowerProfileSetRequestedProfiles": set_requested,
            "nvmlDeviceWorkloadPowerProfileClearRequestedProfiles": clear_requested,
            "nvmlDeviceWorkloadPowerProfileUpdateProfiles_v1": update_profiles,
        }
    )
    return table


def _valid(gpu: FakeGpu, ids: set[int]) -> set[int]:
    assert gpu.profiles is not None
    if ids - set(gpu.profiles.supported):
        raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    return ids


def _field(gpu: FakeGpu, fid: int, scope: int) -> int | None:
    if fid == pynvml.NVML_FI_DEV_MEMORY_TEMP:
        return gpu.memory_temperature_c
    if fid == pynvml.NVML_FI_DEV_POWER_CURRENT_LIMIT:
        if scope == pynvml.NVML_POWER_SCOPE_MODULE:
            return gpu.module.limit_mw if gpu.module else None
        return gpu.enforced_mw if scope == pynvml.NVML_POWER_SCOPE_GPU else None
    attr = {
        pynvml.NVML_FI_DEV_POWER_MIN_LIMIT: "min_mw",
        pynvml.NVML_FI_DEV_POWER_MAX_LIMIT: "max_mw",
        pynvml.NVML_FI_DEV_POWER_DEFAULT_LIMIT: "default_mw",
        pynvml.NVML_FI_DEV_POWER_REQUESTED_LIMIT: "limit_mw",
    }.get(fid)
    if attr is None:
        return None
    if scope == pynvml.NVML_POWER_SCOPE_MODULE:
        return getattr(gpu.module, attr) if gpu.module else None
    return getattr(gpu, attr) if scope == pynvml.NVML_POWER_SCOPE_GPU else None


def function_pointer(fake: FakeNvmlState) -> Callable[[str], Callable[..., int]]:
    """`_nvmlGetFunctionPointer`: C-level fakes; only the `_v2` limit setter is served."""

    def set_limit_v2(handle: Any, ref: Any) -> int:
        # Returns a code like the C function; the binding's `_v2` wrapper would drop it.
        try:
            fake.check("nvmlDeviceSetPowerManagementLimit_v2", getattr(handle, "uuid", None))
            gpu = fake.device(handle, "nvmlDeviceSetPowerManagementLimit_v2")
            value = _struct(ref, pynvml.c_nvmlPowerValue_v2_t, pynvml.nvmlPowerValue_v2)
            fake.require_privilege()
            if value.powerScope == pynvml.NVML_POWER_SCOPE_GPU:
                lo, hi = gpu.min_mw, gpu.max_mw
            elif value.powerScope == pynvml.NVML_POWER_SCOPE_MODULE and gpu.module is not None:
                lo, hi = gpu.module.min_mw, gpu.module.max_mw
            else:
                return pynvml.NVML_ERROR_NOT_SUPPORTED
            if not lo <= value.powerValueMw <= hi:
                return pynvml.NVML_ERROR_INVALID_ARGUMENT
            if value.powerScope == pynvml.NVML_POWER_SCOPE_GPU:
                gpu.limit_mw = value.powerValueMw
            else:
                assert gpu.module is not None
                gpu.module.limit_mw = value.powerValueMw
            return pynvml.NVML_SUCCESS
        except pynvml.NVMLError as exc:
            return int(exc.value)

    def lookup(name: str) -> Callable[..., int]:
        if name in fake._missing:
            raise _err(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        if name == "nvmlDeviceSetPowerManagementLimit_v2":

            def c_function(handle: Any, ref: Any) -> int:
                with fake._lock:
                    fake.calls.append(Call(name, getattr(handle, "uuid", None)))
                    return set_limit_v2(handle, ref)

            return c_function
        fake.unexpected.append(f"C symbol {name}")
        raise AssertionError(f"unexpected NVML call to C symbol {name}: the fake does not serve it")

    return lookup
