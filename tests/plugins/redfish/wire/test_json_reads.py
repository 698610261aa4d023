"""A reply's text parsed by `loads_scanned` reads as `json.loads` reads it: the same value, or the
same error (`JsonOverBound` for nesting the parser cannot follow)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from plugins.redfish._wire.document import MAX_NESTING, JsonOverBound, loads_scanned

TEXTS = [
    '{"PowerLimitWatts": {"SetPoint": 1200, "AllowableMin": 200}, "PowerWatts": {"Reading": 700.5}}',
    ' {"leading": "space"}',
    '{"trailing": "space"}\r\n',
    "\n\t[1, 2]\n",
    '"text"',
    "12.5e3",
    "null",
    '{"a": NaN, "b": -Infinity}',
    '{"escapes": "\\u00fc \\ud83d\\ude00 \\" \\\\ \\n"}',
    '{"lone": "\\ud800"}',
    "",
    "   ",
    "\ufeff{}",
    "nan",
    '{"a": 1} x',
    '{"a": 1}{"b": 2}',
    '{"a": }',
    "[1, 2",
    '{"a": 1,}',
]


def _read(parse: Callable[[str], Any], text: str) -> tuple[str, object]:
    try:
        return "value", json.dumps(parse(text))
    except ValueError as exc:
        return type(exc).__name__, str(exc)


@pytest.mark.parametrize("text", TEXTS)
def test_a_reply_reads_as_json_loads_reads_it(text: str) -> None:
    assert _read(loads_scanned, text) == _read(json.loads, text)
    assert _read(lambda t: loads_scanned(t, yielding=True), text) == _read(json.loads, text)


def test_nesting_past_the_parser_is_the_nesting_bound() -> None:
    text = "[" * 100_000 + "]" * 100_000
    with pytest.raises(JsonOverBound) as raised:
        loads_scanned(text)
    assert raised.value.bound == "nesting depth"
    assert raised.value.limit == MAX_NESTING
