"""`FakeNvml`: a GPU-less NVML for tests, demos and benchmarks.

While installed it replaces *every* `pynvml.nvml*` function: the ones the plugin calls get fake
implementations, any other one raises `AssertionError("unexpected NVML call ...")`. Error classes,
constants and ctypes structs stay the real binding's (nvml.md §7), so the plugin's struct handling
and error mapping run unchanged. Semantics follow nvml.md §7.2: refcounted init, UNINITIALIZED
before init, NOT_FOUND for unknown UUIDs, INVALID_ARGUMENT out of range, NO_PERMISSION when not
privileged, NOT_SUPPORTED by architecture, FUNCTION_NOT_FOUND for `UpdateProfiles_v1` before
R590, unhashable handles that compare unequal across lookups, GPU_IS_LOST for a lost GPU.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import pynvml

from plugins.nvml.testing import _impl
from plugins.nvml.testing._models import Call, FakeGpu, FakeHandle, make_gpu

#: binding helpers that never touch the library
PURE_HELPERS = frozenset({"nvmlExceptionClass", "nvmlFriendlyObjectToStruct", "nvmlStructToFriendlyObject"})

_installed: FakeNvml | None = None


@dataclass
class _Fault:
    function: str
    code: int
    uuid: str | None
    times: int | None


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class FakeNvml:
    """A fake node: several GPUs, a driver version, privileges, and injectable faults.

    Args:
        gpus: the node's GPUs, in NVML index order.
        driver_version: e.g. "570.133.20"; before 590, `UpdateProfiles_v1` is FUNCTION_NOT_FOUND.
        driver_loaded: False makes `nvmlInit` fail with `init_error` (LIBRARY_NOT_FOUND).
        privileged: False makes every setter fail with NO_PERMISSION (not running as root).
        wpps_capability: lets an unprivileged caller use `UpdateProfiles_v1` on R615+.

    Use as a context manager (`with FakeNvml.node("h100", "b200") as fake: ...`).
    """

    def __init__(
        self,
        gpus: Sequence[FakeGpu],
        *,
        driver_version: str = "590.48.01",
        driver_loaded: bool = True,
        init_error: int = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
        privileged: bool = True,
        wpps_capability: bool = False,
    ) -> None:
        self.gpus = list(gpus)
        self.driver_version = driver_version
        self.driver_loaded = driver_loaded
        self.init_error = init_error
        self.privileged = privileged
        self.wpps_capability = wpps_capability
        self.calls: list[Call] = []
        self.unexpected: list[str] = []
        self.refcount = 0
        self._faults: list[_Fault] = []
        self._missing: set[str] = set()
        self._lock = threading.RLock()
        self._saved: dict[str, Any] = {}

    @classmethod
    def node(cls, *models: str, **kwargs: Any) -> FakeNvml:
        """A node with one GPU per model name, e.g. `FakeNvml.node(*["h100"] * 8)`."""
        return cls([make_gpu(model, i) for i, model in enumerate(models)], **kwargs)

    # ---- inspection and faults -------------------------------------------------------------------

    def gpu(self, key: int | str) -> FakeGpu:
        """A GPU by NVML index or UUID."""
        if isinstance(key, int):
            return self.gpus[key]
        for gpu in self.gpus:
            if gpu.uuid == key:
                return gpu
        raise KeyError(key)

    def writes(self) -> list[Call]:
        return [c for c in self.calls if c.is_write]

    def called(self, function: str) -> int:
        return sum(1 for c in self.calls if c.function == function)

    def fail(self, function: str, code: int, *, uuid: str | None = None, times: int | None = None) -> None:
        """Make `function` raise NVML error `code` (for one GPU, for the next `times` calls)."""
        self._faults.append(_Fault(function, code, uuid, times))

    def missing(self, symbol: str) -> None:
        """Pretend the driver lacks `symbol` (FUNCTION_NOT_FOUND)."""
        self._missing.add(symbol)

    def lose(self, uuid: str, *, vanish: bool = False) -> None:
        """The GPU falls off the bus (calls raise GPU_IS_LOST); `vanish` also drops it from the count."""
        gpu = self.gpu(uuid)
        gpu.lost = True
        gpu.vanished = vanish

    def unload_driver(self) -> None:
        """The driver unloads and loads again: energy restarts; limits and profiles revert where
        persistence mode is off (nvml.md §2.3)."""
        with self._lock:
            for gpu in self.gpus:
                gpu.energy_mj = 0
                if not gpu.persistence:
                    gpu.limit_mw = gpu.default_mw
                    if gpu.module is not None:
                        gpu.module.limit_mw = gpu.module.default_mw
                    if gpu.profiles is not None:
                        gpu.profiles.requested.clear()

    def advance(self, seconds: float) -> None:
        """Let time pass: every GPU accumulates energy at its current power draw."""
        with self._lock:
            for gpu in self.gpus:
                gpu.energy_mj += round(gpu.power_mw * seconds)

    # ---- install ---------------------------------------------------------------------------------

    def install(self) -> None:
        global _installed
        if _installed is not None:
            raise RuntimeError("another FakeNvml is already installed")
        _installed = self
        implemented = _impl.implementations(self)
        for name in dir(pynvml):
            obj = getattr(pynvml, name)
            if not (name.startswith("nvml") and inspect.isfunction(obj)) or name in PURE_HELPERS:
                continue
            self._saved[name] = obj
            impl = implemented.get(name)
            setattr(pynvml, name, self._wrap(name, impl) if impl else self._unexpected(name))
        self._saved["_nvmlGetFunctionPointer"] = pynvml._nvmlGetFunctionPointer
        pynvml._nvmlGetFunctionPointer = self._wrap("_nvmlGetFunctionPointer", _impl.function_pointer(self))

    def uninstall(self) -> None:
        global _installed
        for name, obj in self._saved.items():
            setattr(pynvml, name, obj)
        self._saved.clear()
        _installed = None

    def __enter__(self) -> FakeNvml:
        self.install()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.uninstall()
        if exc_type is None and self.unexpected:
            raise AssertionError(f"unexpected NVML calls: {', '.join(self.unexpected)}")

    # ---- dispatch --------------------------------------------------------------------------------

    def _wrap(self, name: str, impl: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                uuid = args[0].uuid if args and isinstance(args[0], FakeHandle) else None
                if name != "_nvmlGetFunctionPointer":
                    self.calls.append(Call(name, uuid))
                    self.check(name, uuid)
                return impl(*args, **kwargs)

        call.__name__ = name
        return call

    def _unexpected(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.unexpected.append(name)
            raise AssertionError(f"unexpected NVML call {name}: the fake does not serve it")

        call.__name__ = name
        return call

    def check(self, name: str, uuid: str | None) -> None:
        """Raise an injected fault or a missing symbol for this call, if any."""
        if name in self._missing:
            raise _err(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        for fault in list(self._faults):
            if fault.function == name and (fault.uuid is None or fault.uuid == uuid):
                if fault.times is not None:
                    fault.times -= 1
                    if fault.times <= 0:
                        self._faults.remove(fault)
                raise _err(fault.code)

    def device(self, handle: Any, function: str) -> FakeGpu:
        """The GPU behind a handle, after the checks every device call makes."""
        self.require_init()
        if not isinstance(handle, FakeHandle):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpu(handle.uuid)
        if gpu.lost:
            raise _err(pynvml.NVML_ERROR_GPU_IS_LOST)
        if function in gpu.unsupported:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def require_init(self) -> None:
        if self.refcount <= 0:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)

    def require_privilege(self) -> None:
        if not self.privileged:
            raise _err(pynvml.NVML_ERROR_NO_PERMISSION)

    @property
    def driver_branch(self) -> int:
        try:
            return int(self.driver_version.split(".")[0])
        except ValueError:
            return 0

    def visible(self) -> list[FakeGpu]:
        return [gpu for gpu in self.gpus if not gpu.vanished]
