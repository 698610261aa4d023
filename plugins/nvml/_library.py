"""The NVML library: binding check, one initialisation per process, one dedicated thread.

- The binding must be `pynvml` from the `nvidia-ml-py` distribution (nvml.md §1): the deprecated
  `pynvml` distribution (≤ 11.5) shipped a module of the same name that overwrote the official one.
- NVML is initialised once per process and shut down once, after every pending call (nvml.md §5:
  shutting down while another thread is inside NVML has crashed processes).
- Every NVML call runs on one dedicated thread, never on the event loop. NVML is thread-safe but
  serialises on driver-wide locks anyway, so one thread costs nothing and makes init/shutdown
  ordering trivial. Calls wait at most until the request's deadline (a hung driver call has been
  seen in the field), and NVML errors are converted to devicectl errors before they leave the
  thread.
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib.metadata
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import pynvml

from plugins.base import (
    DeviceControllerError,
    DeviceTimeoutError,
    HostEnvironmentError,
)
from plugins.nvml._errors import map_nvml_error

log = logging.getLogger(__name__)

T = TypeVar("T")

DISTRIBUTION = "nvidia-ml-py"


def check_binding(
    module: ModuleType = pynvml,
    distribution: Callable[[str], importlib.metadata.Distribution] = importlib.metadata.distribution,
) -> str:
    """Check that `module` is the `pynvml` of the nvidia-ml-py distribution; return its version.

    Raises:
        HostEnvironmentError: nvidia-ml-py is not installed, or another `pynvml` shadows it.
    """
    try:
        dist = distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise HostEnvironmentError(
            "the NVML binding is missing: install nvidia-ml-py (`pip install nvidia-ml-py`); "
            "the `pynvml` package on PyPI is deprecated and not supported"
        ) from None
    expected = Path(str(dist.locate_file("pynvml.py"))).resolve()
    actual = Path(str(getattr(module, "__file__", "") or "?")).resolve()
    # Zeus's guard as well: every official release has this private resolver; the old
    # unofficial module did not. The setter we call for module scope needs it too.
    if actual != expected or not hasattr(module, "_nvmlGetFunctionPointer"):
        raise HostEnvironmentError(
            f"the imported `pynvml` module ({actual}) is not the one from {DISTRIBUTION} "
            f"{dist.version} ({expected}): an unofficial `pynvml` package shadows it. Run "
            f"`pip uninstall pynvml` and then `pip install --force-reinstall {DISTRIBUTION}`"
        )
    try:
        legacy = distribution("pynvml")
    except importlib.metadata.PackageNotFoundError:
        pass
    else:
        # pynvml >= 12 ships no module (it depends on nvidia-ml-py) but installs an import hook
        # that warns on every `import pynvml`, which breaks `-W error` runs (nvml.md §1).
        log.warning(
            "the deprecated `pynvml` package %s is installed next to %s: remove it (`pip uninstall pynvml`)",
            legacy.version,
            DISTRIBUTION,
        )
    return str(dist.version)


def _scrub(err: BaseException) -> None:
    """Cut NVML exceptions out of an error's cause/context chain (they misbehave when compared)."""
    seen: set[int] = set()
    node: BaseException | None = err
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        if isinstance(node.__cause__, pynvml.NVMLError):
            node.__cause__ = None
        if isinstance(node.__context__, pynvml.NVMLError):
            node.__context__ = None
            node.__suppress_context__ = True
        node = node.__cause__ or node.__context__


class NvmlLibrary:
    """NVML's lifecycle and the thread every NVML call runs on.

    One instance is shared by the process (`shared_library()`); tests make their own. `start` and
    `close` are reference-counted: NVML is shut down when the last user closes.

    Args:
        retry_initial: seconds to wait before trying a failed initialisation again (doubles).
        retry_max: the cap of that wait (dcgm-exporter retries LIBRARY_NOT_FOUND with 2 s..20 s).
        clock: monotonic clock, injectable for tests.
    """

    def __init__(
        self,
        *,
        retry_initial: float = 2.0,
        retry_max: float = 20.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._retry_initial = retry_initial
        self._retry_max = retry_max
        self._clock = clock
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._users = 0
        # touched only on the NVML thread
        self._initialised = False
        self._init_error: DeviceControllerError | None = None
        self._next_attempt = 0.0
        self._backoff = retry_initial
        self.driver_version = ""
        self.binding_version = ""

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Check the binding and try to initialise NVML.

        A missing library or driver does not fail start-up: every later call reports it as a
        `HostEnvironmentError` (and initialisation is tried again, with capped backoff), so that
        `ping` on a host without GPUs answers clearly instead of the plugin failing to load.

        Raises:
            HostEnvironmentError: the `pynvml` module is not the one from nvidia-ml-py.
        """
        self.binding_version = check_binding()
        with self._lock:
            self._users += 1
        try:
            await self.run(lambda: None, what="NVML initialisation")
        except HostEnvironmentError as exc:
            log.warning("NVML is not available yet: %s", exc)

    async def close(self) -> None:
        """Release one user; the last one shuts NVML down after every pending call."""
        with self._lock:
            self._users = max(0, self._users - 1)
            if self._users or self._executor is None:
                return
            executor, self._executor = self._executor, None
        # Submitted behind every queued call, so no thread is inside NVML when it runs.
        await asyncio.wrap_future(executor.submit(self._shutdown))
        executor.shutdown(wait=False)

    @property
    def initialised(self) -> bool:
        return self._initialised

    # ---- calls -----------------------------------------------------------------------------

    async def run(self, job: Callable[[], T], *, what: str, within: float | None = None) -> T:
        """Run `job` (which calls NVML) on the NVML thread, after making sure NVML is initialised.

        Args:
            job: a callable doing NVML work; it must not return NVML handles or errors.
            what: what the job does, for messages ("read GPU metrics").
            within: seconds to wait (normally the request's remaining time); None waits forever.

        Raises:
            DeviceControllerError: an NVML error, converted; `DeviceTimeoutError` on timeout.
        """
        # the caller's context goes along: the operation's write log (receipts, dry run) is in it
        context = contextvars.copy_context()
        future = asyncio.wrap_future(self._get_executor().submit(context.run, self._call, job, what))
        try:
            if within is None:
                return await future
            return await asyncio.wait_for(future, timeout=max(within, 0.001))
        except TimeoutError:
            raise DeviceTimeoutError(
                f"{what}: NVML did not answer within {within:.1f} s (the NVML thread may be "
                "stuck in the driver; later calls wait behind it)"
            ) from None

    def _get_executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nvml")
            return self._executor

    def _call(self, job: Callable[[], T], what: str) -> T:
        mapped: DeviceControllerError
        try:
            self._ensure_initialised()
            return job()
        except pynvml.NVMLError as exc:
            if getattr(exc, "value", None) == pynvml.NVML_ERROR_UNINITIALIZED:
                self._initialised = False  # someone shut NVML down: initialise again next call
            mapped = map_nvml_error(exc, what)
        except DeviceControllerError as err:
            _scrub(err)
            raise
        # Raised outside the except block, so the NVML error is not even the implicit context.
        raise mapped

    def _ensure_initialised(self) -> None:
        if self._initialised:
            return
        now = self._clock()
        if self._init_error is not None and now < self._next_attempt:
            err = self._init_error
            raise type(err)(err.message, retryable=err.retryable)
        error: DeviceControllerError
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            error = map_nvml_error(exc, "NVML initialisation")
        else:
            self._initialised = True
            self._init_error = None
            self._backoff = self._retry_initial
            self.driver_version = as_text(_try(pynvml.nvmlSystemGetDriverVersion) or "")
            log.info(
                "NVML initialised: driver %s, nvidia-ml-py %s",
                self.driver_version or "?",
                self.binding_version or "?",
            )
            return
        # NOTE: not a retry loop (so not tenacity): nothing here waits. Each later call fails fast
        # with this error until `_next_attempt`, then one call tries again; the gap doubles from
        # retry_initial to retry_max, as dcgm-exporter's LIBRARY_NOT_FOUND retries do
        self._init_error = error
        self._next_attempt = now + self._backoff
        self._backoff = min(self._backoff * 2, self._retry_max)
        raise error

    def _shutdown(self) -> None:
        if not self._initialised:
            return
        self._initialised = False
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as exc:
            log.warning("nvmlShutdown failed: %s", map_nvml_error(exc, "NVML shutdown"))


def _try(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except pynvml.NVMLError:
        return None


def as_text(value: Any) -> str:
    """NVML strings arrive as `str` (the binding decodes them) or, from older bindings, `bytes`."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


_shared: NvmlLibrary | None = None
_shared_lock = threading.Lock()


def shared_library() -> NvmlLibrary:
    """The process-wide library: NVML is initialised once per process, whatever the plugin count."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = NvmlLibrary()
        return _shared
