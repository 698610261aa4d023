"""A Redfish plugin process for the crash tests: one metrics read of one BMC, then it waits to be killed.

Usage: python -m tests.plugins.redfish.client.session_child CLIENT_ID URL CA_BUNDLE MODEL [OPTIONS_JSON]
(the password on stdin). It prints `ready` once the request and the sweep after its login are done.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from plugins.base import Credentials, DeviceContext, Empty, Endpoint
from plugins.redfish import RedfishPlugin


async def main(
    client_id: str, url: str, bundle: str, model: str, password: str, options: dict[str, Any]
) -> None:
    plugin = RedfishPlugin()
    plugin.set_client_id(client_id)
    await plugin.start()
    ctx = DeviceContext(
        device_id="node0",
        model={"Model": model, "Name": "node0"},
        endpoint=Endpoint(
            url=url, credentials=Credentials("admin", password), ca_bundle=bundle, options=options
        ),
        deadline=time.monotonic() + 60,
    )
    await plugin.std_metrics(ctx, Empty())
    for client in plugin.pool.clients():
        await client.settled()
    print("ready", flush=True)
    await asyncio.sleep(3600)  # the test kills it long before


if __name__ == "__main__":
    client_id, url, bundle, model = sys.argv[1:5]
    options = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
    asyncio.run(main(client_id, url, bundle, model, sys.stdin.readline().strip(), options))
