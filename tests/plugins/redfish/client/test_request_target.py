"""The request line a logged-in call sends is what `redfish.aio`'s own URL rules make of the path."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redfish.aio import AsyncRedfishClient
from redfish.aio.exceptions import RedfishInvalidTargetError

from plugins.redfish._client.client import request_target

CORPUS = Path(__file__).parents[3] / "corpus" / "redfish"
EDGES = [
    "/redfish/v1/",
    "/redfish/v1/Chassis/1/Controls/Power%20Limit",  # escapes: normalised by the library
    "/redfish/v1/Chassis/a%7eb",
    "/redfish/v1/Chassis/a%zz",
    "/redfish/v1/Systems/1/../2",  # dot segments: resolved by the library
    "/redfish/v1/./Systems",
    "/redfish/v1/Systems/Node 1",  # a space: encoded by the library
    "/redfish/v1/Systems/Nœud",
    "/redfish/v1/Systems?$expand=.",
    "/redfish/v1/Sys;tems,1:@!$&'()*+=~",
]


def _odata_ids(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "@odata.id" and isinstance(item, str):
                yield item
            else:
                yield from _odata_ids(item)
    elif isinstance(value, list):
        for item in value:
            yield from _odata_ids(item)


def _corpus_paths() -> list[str]:
    paths: set[str] = set()
    for file in CORPUS.rglob("*.json"):
        try:
            paths.update(_odata_ids(json.loads(file.read_text())))
        except (ValueError, UnicodeDecodeError):
            continue
    return sorted(p for p in paths if p.startswith("/"))


def _client() -> AsyncRedfishClient:
    return AsyncRedfishClient("https://10.0.0.1:8443", "user", "secret", session=object())


@pytest.mark.parametrize("path", EDGES)
async def test_the_target_is_the_librarys_url(path: str) -> None:
    client = _client()
    assert request_target(client, path) == client._resolve_url(path).raw_path_qs


async def test_every_path_in_the_real_bmc_captures_gets_the_librarys_url() -> None:
    client = _client()
    paths = _corpus_paths()
    assert len(paths) > 500  # real BMCs' resource paths, from captures
    wrong = [p for p in paths if request_target(client, p) != client._resolve_url(p).raw_path_qs]
    assert wrong == []


@pytest.mark.parametrize("path", ["//evil.example/redfish/v1", "https://evil.example/redfish/v1"])
async def test_another_origin_is_refused_as_the_library_refuses_it(path: str) -> None:
    client = _client()
    with pytest.raises(RedfishInvalidTargetError):
        request_target(client, path)
