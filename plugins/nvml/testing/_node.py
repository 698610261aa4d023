"""`FakeNode`: a fake GPU node, a started `NvmlPlugin` serving it, and the state a controller keeps.

For tests, demos and benchmarks: it passes the stored device state into each operation and keeps
what the operation returns, as the controller does, so a scenario reads as a list of requests::

    async with FakeNode.start("h100", "h100") as node:
        await node.do("set_policy", PolicyChange(PolicyAction.SET, policy))
        assert node.fake.gpu(0).limit_mw == 500_000
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from plugins.base import DeviceContext, Endpoint, Outcome
from plugins.nvml._library import NvmlLibrary
from plugins.nvml._plugin import NvmlPlugin
from plugins.nvml.testing._fake import FakeNvml


class FakeNode:
    """A `FakeNvml` node with its own plugin and library (no process-wide NVML state).

    Args:
        fake: the fake node; installed by `open()`.
        model: the device model JSON passed in every context.
        options: the inventory options (e.g. {"power_scope": "module"}).
        plugin_kwargs: passed to `NvmlPlugin` (fast timers by default).
    """

    def __init__(
        self,
        fake: FakeNvml,
        *,
        model: Mapping[str, Any] | None = None,
        options: Mapping[str, Any] | None = None,
        plugin_kwargs: Mapping[str, Any] | None = None,
        device_id: str = "gpu-node-1",
    ) -> None:
        kwargs = {"fingerprint_interval": 0.01, "verify_after": 0.0, **(plugin_kwargs or {})}
        self.fake = fake
        self.plugin = NvmlPlugin(NvmlLibrary(retry_initial=0.0, retry_max=0.0), **kwargs)
        self.model: dict[str, Any] = dict(model or {})
        self.options: dict[str, Any] = dict(options or {})
        self.device_id = device_id
        self.state: dict[str, Any] = {}

    @classmethod
    def start(cls, *models: str, **kwargs: Any) -> FakeNode:
        """`async with FakeNode.start("b200", privileged=False, options=...)`: node kwargs go to
        `FakeNode`, the rest to `FakeNvml`."""
        own = {k: kwargs.pop(k) for k in ("model", "options", "plugin_kwargs", "device_id") if k in kwargs}
        return cls(FakeNvml.node(*models, **kwargs), **own)

    async def open(self) -> FakeNode:
        self.fake.install()
        try:
            await self.plugin.start()
        except BaseException:
            self.fake.uninstall()
            raise
        return self

    async def close(self) -> None:
        try:
            await self.plugin.close()
        finally:
            self.fake.uninstall()

    async def __aenter__(self) -> FakeNode:
        return await self.open()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
        if exc_type is None and self.fake.unexpected:
            raise AssertionError(f"unexpected NVML calls: {', '.join(self.fake.unexpected)}")

    def ctx(self, **overrides: Any) -> DeviceContext:
        """A context for this node carrying the current state (fields can be overridden)."""
        fields: dict[str, Any] = {
            "device_id": self.device_id,
            "model": self.model,
            "endpoint": Endpoint(options=self.options),
            "state": self.state,
            "request_id": "req-1",
        }
        fields.update(overrides)
        return DeviceContext(**fields)

    async def do(self, method: str, request: Any, **ctx_overrides: Any) -> Outcome[Any]:
        """Call a plugin operation by name and keep the state it returns, as the controller would."""
        outcome: Outcome[Any] = await getattr(self.plugin, method)(self.ctx(**ctx_overrides), request)
        if outcome.state is not None:
            # the state goes into a JSON column: it must survive a round trip unchanged
            assert json.loads(json.dumps(outcome.state)) == outcome.state
            # and the controller checks it against the plugin's schema before the next operation
            assert self.plugin.load_state(outcome.state) == outcome.state
            self.state = dict(outcome.state)
        return outcome

    def uuid(self, index: int) -> str:
        """The UUID of the GPU at NVML index `index`."""
        return self.fake.gpu(index).uuid

    def limit_w(self, index: int) -> float:
        """The requested limit of the GPU at NVML index `index`, in watts."""
        return self.fake.gpu(index).limit_mw / 1000
