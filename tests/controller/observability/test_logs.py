"""JSON logs: every line parses, and lines about a request (run, applied change, delivery) carry
its device, request_id and trace_id as fields."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator

import pytest

from bench.ports import free_port as _closed_port  # nothing listens there
from controller.observability import logs, metrics
from plugins.base import GpuPoliciesResult, GpuResult
from tests.controller.conftest import memory_inventory
from tests.controller.observability.test_metrics import gpu_caps


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    buf = io.StringIO()
    root = logging.getLogger()
    handler = logs.handler(buf, "json")
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield buf
    root.removeHandler(handler)
    root.setLevel(old_level)


def parsed(buf: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in buf.getvalue().splitlines()]  # every line is one JSON object


async def test_json_lines_carry_the_request_ids(start_controller, sink, json_lines: io.StringIO) -> None:
    h = await start_controller(memory_inventory(1))
    await h.stub.SendDeviceRequest(gpu_caps("node000", "j-1", {0: 450}))
    await sink.wait_for({"j-1"}, timeout=10)
    await h.stub.SendDeviceRequest(gpu_caps("node000", "j-2", {0: 420}))
    await sink.wait_for({"j-2"}, timeout=10)
    lines = parsed(json_lines)
    applied = [line for line in lines if str(line["message"]).startswith("applied gpu/0")]
    assert [line["request_id"] for line in applied] == ["j-1", "j-2"]
    assert all(line["device"] == "node000" and line["level"] == "INFO" for line in applied)
    assert applied[0]["trace_id"] == "trace-j-1"
    # before -> requested -> enforced: the second change starts from what the first enforced
    assert applied[1]["message"] == "applied gpu/0: 450 W -> requested 420 W -> enforced 420 W"
    outside = [line for line in lines if line["logger"] == "controller.app"]
    assert outside and all(line["request_id"] is None for line in outside)


async def test_delivery_lines_carry_the_request_ids(start_controller, json_lines: io.StringIO) -> None:
    h = await start_controller(memory_inventory(1), callback=f"127.0.0.1:{_closed_port()}")
    await h.stub.SendDeviceRequest(gpu_caps("node000", "d-1", {0: 450}))

    async def delivery_line() -> dict[str, object]:
        while True:
            for line in parsed(json_lines):
                if line["logger"] == "controller.delivery.outbox":
                    return line
            await asyncio.sleep(0.05)

    line = await asyncio.wait_for(delivery_line(), 10)
    assert (line["device"], line["request_id"], line["trace_id"]) == ("node000", "d-1", "trace-d-1")


def test_unknown_log_format_is_refused() -> None:
    with pytest.raises(ValueError, match="log_format must be one of text, json"):
        logs.handler(io.StringIO(), "yaml")


def test_one_change_line_per_request_names_every_component(caplog: pytest.LogCaptureFixture) -> None:
    result = GpuPoliciesResult(
        "rg",
        (
            GpuResult(0, True, 420.0),
            GpuResult(1, True, 400.0, requested_watts=410.0),
            GpuResult(2, False, 0.0, requested_watts=1300.0),
            GpuResult(3, False, 0.0),
        ),
    )
    caplog.set_level(logging.INFO, logger="controller.changes")
    metrics.applied("node-logs-1", result)
    metrics.applied("node-logs-1", GpuPoliciesResult("rg", (GpuResult(0, True, 380.0),)))
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "controller.changes"]
    assert lines == [
        (
            "INFO",
            "applied gpu/0: unknown -> requested 420 W -> enforced 420 W; "
            "gpu/1: unknown -> requested 410 W -> enforced 400 W",
        ),
        ("WARNING", "not applied gpu/2: requested 1300 W; gpu/3: requested unknown"),
        ("INFO", "applied gpu/0: 420 W -> requested 380 W -> enforced 380 W"),
    ]
