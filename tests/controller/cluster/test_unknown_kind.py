"""A journaled request of a kind this release does not know (a newer release sharing the database
journaled it) is left in the journal with one warning, never an error: the claim still queues and
answers every other unfinished request, and the sweep never fails on it. Real SQLite, a real
controller, its own recovery; the payloads are real protobuf requests."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controller.store import NewRequest
from tests.controller.api.test_service import ping


async def test_a_request_of_an_unknown_kind_is_left_and_the_others_run(
    start_controller: Any, sink: Any, caplog: pytest.LogCaptureFixture
) -> None:
    h = await start_controller()
    c = h.controller
    now = datetime.now(UTC)

    def journaled(request_id: str, kind: str, payload: bytes) -> NewRequest:
        return NewRequest(
            request_id=request_id,
            device="node000",
            kind=kind,
            payload=payload,
            trace_id="",
            accepted_at=now,
            deadline_at=now + timedelta(seconds=60),
            owner=c.settings.instance_id,
            shard=c.runner.shards.shard_for("node000"),
        )

    await c.store.accept_one(journaled("future-1", "resource_group_teleport", b"\x00\x01"))
    await c.store.accept_one(journaled("ping-1", "ping", ping("node000", "ping-1").SerializeToString()))
    caplog.set_level(logging.WARNING, logger="controller.execution.dispatch")
    assert await c.claims.recover() == 1  # the ping; the unknown kind is left, not an error
    await sink.wait_for({"ping-1"}, timeout=15)
    assert await c.claims.recover() == 0  # the sweep again: no error, and warned once only
    warnings = [r for r in caplog.records if "resource_group_teleport" in r.getMessage()]
    assert len(warnings) == 1 and "not run here" in warnings[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)
    view = await c.store.get_request("future-1")
    assert view is not None and not view.outcome  # still journaled, unanswered, for a newer release
