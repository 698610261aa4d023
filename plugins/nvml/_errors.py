"""NVML error codes → devicectl's typed errors, at the plugin boundary.

`pynvml.NVMLError` objects must never leave the plugin: they are unhashable (no `__hash__`) and
their `__eq__` raises `AttributeError` against anything that is not an NVML error (nvml.md §4).
Every NVML call therefore runs inside `NvmlLibrary.run`, which converts them with
`map_nvml_error` and raises the typed error `from None`.

The classification follows nvml.md §4 (after DCGM's `DcgmUtilities.h` and dcgm-exporter): a
capability that is absent is `UnsupportedError`; a missing permission, library or driver is
`HostEnvironmentError`; a GPU that is gone is `DeviceLostError`; a caller error or a state
conflict is `DeviceRejectedError`; busy/not-ready conditions are `TransientError` (retryable).
"""

from __future__ import annotations

import pynvml

from plugins.base import (
    DeviceControllerError,
    DeviceLostError,
    DeviceRejectedError,
    HostEnvironmentError,
    TransientError,
    UnsupportedError,
)

#: capability absent: cache "unsupported", use the documented fallback, never retry blindly
CAPABILITY_ABSENT = frozenset(
    {
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
        pynvml.NVML_ERROR_DEPRECATED,
        pynvml.NVML_ERROR_FREQ_NOT_SUPPORTED,
        pynvml.NVML_ERROR_VGPU_ECC_NOT_SUPPORTED,
        pynvml.NVML_ERROR_RESET_TYPE_NOT_SUPPORTED,
    }
)
#: the GPU is gone or broken: mark it unhealthy, stop writing to it, re-resolve it by UUID
DEVICE_GONE = frozenset(
    {
        pynvml.NVML_ERROR_GPU_IS_LOST,
        pynvml.NVML_ERROR_RESET_REQUIRED,
        pynvml.NVML_ERROR_CORRUPTED_INFOROM,
        pynvml.NVML_ERROR_INSUFFICIENT_POWER,
        pynvml.NVML_ERROR_IRQ_ISSUE,
        pynvml.NVML_ERROR_NOT_FOUND,
    }
)
#: NVML as a whole is unusable on this host
ENVIRONMENT = frozenset(
    {
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
        pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
        pynvml.NVML_ERROR_GPU_NOT_FOUND,
        pynvml.NVML_ERROR_OPERATING_SYSTEM,
    }
)
#: worth a bounded retry
TRANSIENT = frozenset(
    {
        pynvml.NVML_ERROR_TIMEOUT,
        pynvml.NVML_ERROR_IN_USE,
        pynvml.NVML_ERROR_NOT_READY,
        pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES,
        pynvml.NVML_ERROR_MEMORY,
        pynvml.NVML_ERROR_UNKNOWN,
        pynvml.NVML_ERROR_NO_DATA,
        # lifecycle: the library was shut down under us; the next call initialises it again
        pynvml.NVML_ERROR_UNINITIALIZED,
    }
)

#: NVML_ERROR_* names by code, taken from the binding itself
ERROR_NAMES: dict[int, str] = {
    value: name
    for name, value in vars(pynvml).items()
    if name.startswith("NVML_ERROR_") and isinstance(value, int)
}

# What the operator should read. Our own words, so that formatting an error never calls back into
# the library (`NVMLError.__str__` calls `nvmlErrorString`, which needs a loaded library).
_HINTS: dict[int, str] = {
    pynvml.NVML_ERROR_UNINITIALIZED: "NVML is not initialised (it will be initialised again)",
    pynvml.NVML_ERROR_INVALID_ARGUMENT: "NVML rejected an argument",
    pynvml.NVML_ERROR_NOT_SUPPORTED: "not supported by this GPU or driver",
    pynvml.NVML_ERROR_NO_PERMISSION: (
        "insufficient permissions: run devicectl as root (or with CAP_SYS_ADMIN) to change "
        "limits and profiles"
    ),
    pynvml.NVML_ERROR_NOT_FOUND: "GPU not found (removed, or its UUID changed)",
    pynvml.NVML_ERROR_INSUFFICIENT_SIZE: "NVML reported an insufficient buffer size",
    pynvml.NVML_ERROR_INSUFFICIENT_POWER: "the GPU's external power cables are not properly attached",
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "the NVIDIA kernel driver is not loaded",
    pynvml.NVML_ERROR_TIMEOUT: "NVML timed out",
    pynvml.NVML_ERROR_IRQ_ISSUE: "the kernel detected an interrupt issue with the GPU",
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: (
        "NVML library not found (libnvidia-ml.so.1): is the NVIDIA driver installed?"
    ),
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND: "the installed NVIDIA driver lacks this NVML function",
    pynvml.NVML_ERROR_CORRUPTED_INFOROM: "the GPU's infoROM is corrupted",
    pynvml.NVML_ERROR_GPU_IS_LOST: "GPU is lost (fell off the bus): it needs an operator",
    pynvml.NVML_ERROR_RESET_REQUIRED: "the GPU needs a reset or reboot",
    pynvml.NVML_ERROR_OPERATING_SYSTEM: "the operating system blocked the request",
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
        "NVML and the kernel driver versions differ (driver updated without a reboot or module reload)"
    ),
    pynvml.NVML_ERROR_IN_USE: "the GPU is in use",
    pynvml.NVML_ERROR_MEMORY: "NVML ran out of memory",
    pynvml.NVML_ERROR_NO_DATA: "no data sampled yet",
    pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES: "insufficient resources",
    pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH: "the driver does not know this struct version",
    pynvml.NVML_ERROR_DEPRECATED: "the function is deprecated and no longer available",
    pynvml.NVML_ERROR_NOT_READY: "the GPU is not ready yet",
    pynvml.NVML_ERROR_GPU_NOT_FOUND: "no NVIDIA GPU found",
    pynvml.NVML_ERROR_INVALID_STATE: "the GPU is in a state that does not allow this",
    pynvml.NVML_ERROR_UNKNOWN: "unknown NVML error",
}


def error_code(exc: BaseException) -> int:
    """The `nvmlReturn_t` code carried by an `NVMLError` (`.value`), or UNKNOWN."""
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else pynvml.NVML_ERROR_UNKNOWN


def error_name(code: int) -> str:
    return ERROR_NAMES.get(code, f"NVML error code {code}")


def describe(code: int) -> str:
    """`hint (NVML_ERROR_NAME)`: the operator-facing description of a code."""
    return f"{_HINTS.get(code, 'NVML error')} ({error_name(code)})"


def is_capability_absent(exc: BaseException) -> bool:
    return isinstance(exc, pynvml.NVMLError) and error_code(exc) in CAPABILITY_ABSENT


def is_device_gone(exc: BaseException) -> bool:
    return isinstance(exc, pynvml.NVMLError) and error_code(exc) in DEVICE_GONE


def map_nvml_error(exc: BaseException, where: str = "") -> DeviceControllerError:
    """The devicectl error for an NVML error. `where` says what was being done, e.g. "GPU 3: set limit".

    Only the code is used: the NVML exception is not kept (not even as `__cause__`).
    """
    code = error_code(exc)
    prefix = f"{where}: " if where else ""
    message = f"{prefix}{describe(code)}"
    if code in CAPABILITY_ABSENT:
        return UnsupportedError(message)
    if code in DEVICE_GONE:
        return DeviceLostError(message)
    if code == pynvml.NVML_ERROR_NO_PERMISSION:
        return HostEnvironmentError(message)
    if code in ENVIRONMENT:
        # The library or driver may appear later (driver install, module load), except an
        # NVML/RM version mismatch, which lasts until a reboot or module reload.
        retryable = code != pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH
        return HostEnvironmentError(message, retryable=retryable)
    if code in TRANSIENT:
        return TransientError(message)
    # INVALID_ARGUMENT, INSUFFICIENT_SIZE, INVALID_STATE and codes this binding does not know:
    # the device refused, and repeating the same call will not help.
    return DeviceRejectedError(message)
