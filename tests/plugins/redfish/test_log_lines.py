"""A BMC's text cannot forge a log line: a newline in its error message stays inside the one record
that quotes it, in the controller's text format (real HTTPS simulator)."""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Callable
from typing import Any

import pytest

from bmcsim import _messages
from controller.observability import logs
from plugins.base import Empty

FORGED = "\nCRITICAL root device=- request_id=- trace_id=- forged by the BMC\r\x1b[2J"
_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


def _hostile_property_unknown(prop: str) -> dict[str, Any]:
    return _messages.message(
        _messages.BASE + "PropertyUnknown", f"The property {prop} is unknown.{FORGED}", [prop]
    )


async def test_a_newline_in_a_bmcs_error_text_forges_no_log_line(
    make_harness: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = io.StringIO()
    handler = logs.handler(out, "text")
    logger = logging.getLogger("plugins.redfish")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        async with make_harness(n=1, model="gb200", session_limit=8) as h:
            bmc = h.fleet.bmcs[0]
            # the BMC refuses the login's Context with a message that carries a line of its own
            monkeypatch.setattr(_messages, "property_unknown", _hostile_property_unknown)
            bmc.configure(session_context="reject")
            result = await h.call("std_metrics", bmc, Empty())
            assert result.result.ok, result.result.error
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    text = out.getvalue()
    assert "refuses the Redfish Session.Context" in text and "forged by the BMC" in text
    lines = text.splitlines()
    assert lines and all(_LINE.match(line) for line in lines), lines
    assert not any(line.startswith("CRITICAL") or " CRITICAL " in line[:40] for line in lines)
    assert "\\nCRITICAL root" in text and "\x1b" not in text


def test_the_text_format_writes_one_line_per_record_whatever_the_message() -> None:
    out = io.StringIO()
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "bmc said %s", ("a\nb\u2028c\x00",), None)
    logs.handler(out, "text").handle(record)
    assert out.getvalue().count("\n") == 1 and "a\\nb\\u2028c\\x00" in out.getvalue()
