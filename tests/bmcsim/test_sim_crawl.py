"""Every resource reachable from the service root is well formed, for every model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bmcsim import MODELS, SimulatedBmc, SimulatorFleet
from bmcsim._platforms import MOCKUPS

Api = Callable[[SimulatedBmc], Any]


def _links(value: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(value, dict):
        for key, sub in value.items():
            if key in ("@odata.id", "target", "@Redfish.ActionInfo", "TaskMonitor") and isinstance(sub, str):
                found.add(sub)
            else:
                found |= _links(sub)
    elif isinstance(value, list):
        for item in value:
            found |= _links(item)
    return found


@pytest.mark.parametrize("model", [m for m in MODELS if m not in MOCKUPS])
async def test_crawl(model: str, cert_dir: Path, api: Api) -> None:
    async with SimulatorFleet(n=1, model=model, cert_dir=cert_dir) as fleet:
        client = api(fleet.bmcs[0])
        seen: set[str] = set()
        todo = ["/redfish/v1"]
        while todo:
            path = todo.pop()
            if path in seen or "#" in path or "/Actions/" in path:
                continue
            seen.add(path)
            reply = await client.get(path)
            assert reply.status == 200, path
            body = reply.body
            assert body["@odata.id"] == path
            assert body["@odata.type"].startswith("#")
            assert "Name" in body, path
            if "Members" not in body:
                assert "Id" in body, path
            assert reply.headers["ETag"] == body["@odata.etag"], path
            assert reply.headers["OData-Version"] == "4.0"
            todo += sorted(_links(body) - seen)
        assert len(seen) > 12
        # writes on anything without a PATCH handler are refused with a Redfish error body
        refused = await client.patch("/redfish/v1/Systems", {"Name": "x"})
        assert refused.status == 405
        assert refused.body["error"]["code"].endswith("OperationNotAllowed")
        assert "GET" in refused.headers["Allow"]
