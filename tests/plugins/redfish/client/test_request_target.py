"""The request line a logged-in call sends is what `redfish.aio` itself sends for the path."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redfish.aio import AsyncRedfishClient
from redfish.aio.exceptions import RedfishInvalidTargetError
from yarl import URL

from plugins.redfish._wire.dmtf import DmtfClient

CORPUS = Path(__file__).parents[3] / "corpus" / "redfish"
BASE = "https://10.0.0.1:8443"
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


class _Sent(Exception):
    """Raised by `_Recorder` once it has the URL the library asked for (nothing is sent)."""


class _Recorder:
    """A session (`aiohttp.ClientSession.request`'s contract) that keeps the URL it is asked for."""

    def __init__(self) -> None:
        self.urls: list[URL] = []

    def request(self, method: str, url: URL, **kwargs: Any) -> Any:
        self.urls.append(url)
        raise _Sent


async def _librarys_target(path: str) -> str:
    """What the library itself puts on the request line for `path` (through its public `get`)."""
    recorder = _Recorder()
    with pytest.raises(_Sent):
        await AsyncRedfishClient(BASE, session=recorder).get(path)
    return str(recorder.urls[0].raw_path_qs)


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


def _client() -> DmtfClient:
    return DmtfClient(BASE, "user", "secret", transport=object())


@pytest.mark.parametrize("path", EDGES)
async def test_the_target_is_the_librarys_url(path: str) -> None:
    assert _client().target(path) == await _librarys_target(path)


async def test_every_path_in_the_real_bmc_captures_gets_the_librarys_url() -> None:
    client = _client()
    paths = _corpus_paths()
    assert len(paths) > 500  # real BMCs' resource paths, from captures
    wrong = [p for p in paths if client.target(p) != await _librarys_target(p)]
    assert wrong == []
    # asked again (a plain path seen before is known plain): the same
    again = [p for p in [*paths, *EDGES] if client.target(p) != await _librarys_target(p)]
    assert again == []


@pytest.mark.parametrize("path", ["//evil.example/redfish/v1", "https://evil.example/redfish/v1"])
async def test_another_origin_is_refused_as_the_library_refuses_it(path: str) -> None:
    with pytest.raises(RedfishInvalidTargetError):
        await AsyncRedfishClient(BASE, session=_Recorder()).get(path)
    with pytest.raises(RedfishInvalidTargetError):
        _client().target(path)
