"""A device call whose result or error comes as its deadline passes is dropped quietly: no
"Task exception was never retrieved" traceback in the log (seen in the crash drill)."""

from __future__ import annotations

import asyncio
import gc
import logging
import math
from types import SimpleNamespace

import pytest

from controller.execution.runner import RequestRunner


class _Lease:
    """The shard lease as the runner sees it: held for good here."""

    def valid_for(self, shard: int) -> float:
        return math.inf


async def _fails_when_cancelled() -> None:
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        raise RuntimeError("the plugin's own deadline error") from None


async def test_an_error_at_the_deadline_is_not_logged_as_never_retrieved(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner = SimpleNamespace(shards=_Lease())
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        with pytest.raises(TimeoutError):
            await RequestRunner.call_under_lease(runner, _fails_when_cancelled(), 0.05, 0)  # type: ignore[arg-type,operator]
        await asyncio.sleep(0.1)
        gc.collect()
        await asyncio.sleep(0)
    assert "never retrieved" not in caplog.text
