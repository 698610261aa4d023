"""A device call whose result or error comes as its deadline passes is dropped quietly: no
"Task exception was never retrieved" traceback in the log (seen in the crash drill)."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from controller.cluster.shards import Shards


async def _fails_when_cancelled() -> None:
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        raise RuntimeError("the plugin's own deadline error") from None


async def test_an_error_at_the_deadline_is_not_logged_as_never_retrieved(
    caplog: pytest.LogCaptureFixture,
) -> None:
    shards = Shards({}, 1)  # one process: every shard held for good
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        with pytest.raises(TimeoutError):
            await shards.call_under_lease(_fails_when_cancelled(), 0.05, 0)
        await asyncio.sleep(0.1)
        gc.collect()
        await asyncio.sleep(0)
    assert "never retrieved" not in caplog.text
