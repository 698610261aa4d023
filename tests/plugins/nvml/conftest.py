"""Fixtures for the NVML plugin: fake nodes (FakeNvml installed) with a started plugin each."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from plugins.nvml.testing import FakeNode

MakeNode = Callable[..., Awaitable[FakeNode]]


@pytest.fixture
async def make_node() -> AsyncIterator[MakeNode]:
    """`await make_node("h100", "b200", model={...}, options={...}, privileged=False, ...)`."""
    made: list[FakeNode] = []

    async def make(*models: str, **kwargs: Any) -> FakeNode:
        node = FakeNode.start(*models, **kwargs)
        made.append(node)
        return await node.open()

    yield make
    for node in made:
        await node.close()
        assert not node.fake.unexpected, f"unexpected NVML calls: {node.fake.unexpected}"


@pytest.fixture
async def h100x4(make_node: MakeNode) -> FakeNode:
    return await make_node("h100", "h100", "h100", "h100")


@pytest.fixture
async def b200x2(make_node: MakeNode) -> FakeNode:
    return await make_node("b200", "b200")
