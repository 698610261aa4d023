"""Every NVMLError is mapped to a typed devicectl error, and no NVML exception object leaks out."""

from __future__ import annotations

import pynvml
import pytest

from plugins.base import (
    DeviceControllerError,
    DeviceLostError,
    DeviceRejectedError,
    Empty,
    HostEnvironmentError,
    Ping,
    TransientError,
    UnsupportedError,
)
from plugins.nvml._errors import ERROR_NAMES, map_nvml_error
from plugins.nvml.testing import FakeNode as Node

EXPECTED: dict[int, tuple[type[DeviceControllerError], bool]] = {
    pynvml.NVML_ERROR_UNINITIALIZED: (TransientError, True),
    pynvml.NVML_ERROR_INVALID_ARGUMENT: (DeviceRejectedError, False),
    pynvml.NVML_ERROR_NOT_SUPPORTED: (UnsupportedError, False),
    pynvml.NVML_ERROR_NO_PERMISSION: (HostEnvironmentError, False),
    pynvml.NVML_ERROR_ALREADY_INITIALIZED: (DeviceRejectedError, False),
    pynvml.NVML_ERROR_NOT_FOUND: (DeviceLostError, False),
    pynvml.NVML_ERROR_INSUFFICIENT_SIZE: (DeviceRejectedError, False),
    pynvml.NVML_ERROR_INSUFFICIENT_POWER: (DeviceLostError, False),
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: (HostEnvironmentError, True),
    pynvml.NVML_ERROR_TIMEOUT: (TransientError, True),
    pynvml.NVML_ERROR_IRQ_ISSUE: (DeviceLostError, False),
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: (HostEnvironmentError, True),
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND: (UnsupportedError, False),
    pynvml.NVML_ERROR_CORRUPTED_INFOROM: (DeviceLostError, False),
    pynvml.NVML_ERROR_GPU_IS_LOST: (DeviceLostError, False),
    pynvml.NVML_ERROR_RESET_REQUIRED: (DeviceLostError, False),
    pynvml.NVML_ERROR_OPERATING_SYSTEM: (HostEnvironmentError, True),
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: (HostEnvironmentError, False),
    pynvml.NVML_ERROR_IN_USE: (TransientError, True),
    pynvml.NVML_ERROR_MEMORY: (TransientError, True),
    pynvml.NVML_ERROR_NO_DATA: (TransientError, True),
    pynvml.NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: (UnsupportedError, False),
    pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES: (TransientError, True),
    pynvml.NVML_ERROR_FREQ_NOT_SUPPORTED: (UnsupportedError, False),
    pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH: (UnsupportedError, False),
    pynvml.NVML_ERROR_DEPRECATED: (UnsupportedError, False),
    pynvml.NVML_ERROR_NOT_READY: (TransientError, True),
    pynvml.NVML_ERROR_GPU_NOT_FOUND: (HostEnvironmentError, True),
    pynvml.NVML_ERROR_INVALID_STATE: (DeviceRejectedError, False),
    pynvml.NVML_ERROR_RESET_TYPE_NOT_SUPPORTED: (UnsupportedError, False),
    pynvml.NVML_ERROR_UNKNOWN: (TransientError, True),
}


def test_every_binding_error_code_has_an_expected_class() -> None:
    assert set(ERROR_NAMES) == set(EXPECTED), "a new NVML error code needs a classification"


@pytest.mark.parametrize("code", sorted(EXPECTED), ids=lambda c: ERROR_NAMES[c])
def test_each_code_maps_to_its_class(code: int) -> None:
    cls, retryable = EXPECTED[code]
    err = map_nvml_error(pynvml.NVMLError(code), "GPU 3: set limit")
    assert type(err) is cls
    assert err.retryable is retryable
    assert err.message.startswith("GPU 3: set limit: ")
    assert ERROR_NAMES[code] in err.message  # names the NVML code for operators
    hash(err)  # our errors are hashable, unlike NVMLError
    assert err != object()


def test_unknown_code_is_a_permanent_rejection() -> None:
    err = map_nvml_error(pynvml.NVMLError(12345))
    assert isinstance(err, DeviceRejectedError)
    assert "12345" in err.message


def test_messages_are_actionable() -> None:
    assert "is the NVIDIA driver installed?" in str(map_nvml_error(pynvml.NVMLError_LibraryNotFound()))
    assert "root" in str(map_nvml_error(pynvml.NVMLError_NoPermission()))
    assert "fell off the bus" in str(map_nvml_error(pynvml.NVMLError_GpuIsLost()))


def _chain(err: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    node: BaseException | None = err
    while node is not None and node not in out:
        out.append(node)
        node = node.__cause__ or node.__context__
    return out


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (pynvml.NVML_ERROR_GPU_IS_LOST, DeviceLostError),
        (pynvml.NVML_ERROR_TIMEOUT, TransientError),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, HostEnvironmentError),
        (pynvml.NVML_ERROR_NOT_SUPPORTED, UnsupportedError),
        (pynvml.NVML_ERROR_INVALID_STATE, DeviceRejectedError),
    ],
)
async def test_errors_cross_the_plugin_boundary_typed_and_without_nvml_objects(
    h100x4: Node, code: int, cls: type[DeviceControllerError]
) -> None:
    h100x4.fake.fail("nvmlDeviceGetCount", code, times=1)
    with pytest.raises(cls) as info:
        await h100x4.do("raw_metrics", Empty())
    assert not any(isinstance(e, pynvml.NVMLError) for e in _chain(info.value))
    assert info.value.__cause__ is None
    # and the next call works again
    assert (await h100x4.do("ping", Ping())).result.ok
