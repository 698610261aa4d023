"""A request's JSON body is `json.dumps`'s, byte for byte, from the transport's encoder made once."""

from __future__ import annotations

import json
from typing import Any

import pytest

from plugins.redfish._wire.transport import _json_bytes

BODIES: list[Any] = [
    {"PowerLimitWatts": {"SetPoint": 1200}},
    {"SetPoint": 812.5, "ControlMode": "Manual", "Oem": {"Nvidia": {"PowerMode": None}}},
    {"a": [1, -2.25, True, False, None], "ü": "snow\u2603", "q": 'quote " back \\ nl \n'},
    {"nan": float("nan"), "inf": float("inf"), 1: "int key", 2.5: "float key", None: "null key"},
    {},
    [],
    "text",
    7,
]


@pytest.mark.parametrize("body", BODIES)
def test_the_body_is_json_dumps_byte_for_byte(body: Any) -> None:
    assert _json_bytes(body) == json.dumps(body).encode()


def test_what_json_dumps_refuses_is_refused() -> None:
    for bad in ({"a": object()}, {b"key": 1}):
        with pytest.raises(TypeError):
            _json_bytes(bad)
    looped: dict[str, Any] = {}
    looped["self"] = looped
    with pytest.raises(RecursionError):
        _json_bytes(looped)
    # nothing of a refused body stays behind
    assert _json_bytes({"SetPoint": 500}) == b'{"SetPoint": 500}'
