"""The plugin through a real nginx in front of the HTTPS BMC simulator (`nginx_front`).

nginx answers `GET /redfish/v1` with a 301 to `/redfish/v1/` (its own trailing-slash redirect for a
`location /redfish/v1/`); the client follows it on the same origin and the plugin works as it does
without the proxy. A client that took the 301's HTML page as the service root failed every request.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bmcsim import ensure_tls_files
from plugins.base import DeviceContext, Empty
from tests.plugins.redfish.client.test_connections import one_gpu
from tests.plugins.redfish.harness import Harness
from tests.plugins.redfish.wire.nginx_front import NginxFront, nginx_or_skip


def _through(ctx: DeviceContext, front: NginxFront) -> DeviceContext:
    return dataclasses.replace(ctx, endpoint=dataclasses.replace(ctx.endpoint, url=front.url))


async def test_the_301_on_redfish_v1_behind_nginx_is_followed(
    make_harness: Callable[..., Any], sim_certs: Path, tmp_path: Path
) -> None:
    nginx_or_skip()
    h: Harness
    async with make_harness(n=1, model="gb200") as h:
        bmc = h.fleet.bmcs[0]
        with NginxFront(bmc.url, ensure_tls_files(sim_certs), tmp_path) as front:
            metrics = await h.plugin.std_metrics(_through(h.ctx(bmc), front), Empty())
            assert metrics.result.ok, metrics.result
            change = await h.plugin.update_gpu_policies(_through(h.ctx(bmc), front), one_gpu(0, 555))
            assert change.result.results[0].ok and change.result.results[0].applied_watts == 555

            seen = front.requests()
            # nginx redirected the login's service-root GET, and the client read the new place
            assert '"GET /redfish/v1 HTTP/1.1" 301' in seen, seen
            assert '"GET /redfish/v1/ HTTP/1.1" 200' in seen, seen
            patches = [line for line in seen if line.startswith('"PATCH /redfish/v1/')]
            assert patches and all(line.endswith(" 200") for line in patches), seen
            assert not any(line.endswith((" 404", " 502", " 504")) for line in seen), seen
            await h.plugin.close()  # the session's DELETE goes through nginx while it runs
