"""Real servers that end TLS without close_notify, and a reply framed by that end (docs/redfish.md,
"Framing": what such a reply proves about itself).

- DMTF's Redfish-Mockup-Server is not published on PyPI (nothing to install in CI), so `Mockup`
  below serves a mockup folder with Python's `http.server` the way its `redfishMockupServer.py`
  does (DMTF/Redfish-Mockup-Server, commit 9a86585, `RfMockupServer.do_GET` and `main`): an
  `HTTPServer` (HTTP/1.0, one reply per connection) whose listening socket is wrapped by
  `SSLContext.wrap_socket(server_side=True)`; a resource is its folder's `index.json`, sent with
  `Content-Length` unless the folder holds a `headers.json`, whose headers are sent instead (and no
  length: the body is framed by the close); a missing resource is `send_response(404)` and
  `end_headers()`: no body, no length. `socketserver` ends each connection with
  `shutdown(SHUT_WR)` on the TLS socket, which is the TCP FIN without close_notify.
- A real Apache (`apache_front`), with mod_ssl's `ssl-unclean-shutdown`, HTTP/1.0 replies and
  mod_deflate's gzip on every JSON body, in front of the simulator: every call works.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from bmcsim import TlsFiles, ensure_tls_files
from plugins.base import DeviceContext, Empty
from plugins.redfish._client.client import BmcClient
from plugins.redfish._config import ConnectionSettings
from plugins.redfish._wire.errors import ResourceNotFoundError
from plugins.redfish._wire.http import Disconnected, HttpConnections, Origin
from tests.plugins.redfish.client.test_connections import one_gpu
from tests.plugins.redfish.harness import Harness
from tests.plugins.redfish.wire.apache_front import ApacheFront, apache_or_skip
from tests.plugins.redfish.wire.test_http_client import tls_files

__all__ = ["tls_files"]  # a fixture, imported to be used here

_WAIT = 5.0


class _MockupHandler(BaseHTTPRequestHandler):
    """GET, PATCH and POST as `RfMockupServer` answers them (see the module docstring)."""

    root: Path
    #: seconds between a body's two halves (0: one write): a BMC that streams what it builds
    pause: float = 0.0

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the mockup server logs each request; a test has no use for it

    def do_GET(self) -> None:
        folder = self.root / self.path.split("?", 1)[0].strip("/")
        index, headers = folder / "index.json", folder / "headers.json"
        if not index.is_file():
            self.send_response(404)
            self.end_headers()
            return
        data = index.read_bytes()
        self.send_response(200)
        if headers.is_file():
            for name, value in json.loads(headers.read_text())["GET"].items():
                self.send_header(name, value)
        else:
            self.send_header("Content-Type", "application/json")
            self.send_header("OData-Version", "4.0")
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.pause:
            half = len(data) // 2
            self.wfile.write(data[:half])
            self.wfile.flush()
            time.sleep(self.pause)
            data = data[half:]
        self.wfile.write(data)

    def do_PATCH(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(204)
        self.end_headers()


@dataclasses.dataclass
class Mockup:
    url: str
    root: Path
    handler: type[_MockupHandler]
    #: seconds between a body's two halves (0: one write): a BMC that streams what it builds
    pause: float = 0.0


def _write_mockup(root: Path) -> None:
    def resource(path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        folder = root / path.strip("/")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "index.json").write_text(json.dumps(body, indent=4))
        if headers is not None:
            (folder / "headers.json").write_text(json.dumps({"GET": headers}))

    resource(
        "/redfish/v1",
        {"@odata.id": "/redfish/v1", "Id": "RootService", "Chassis": {"@odata.id": "/redfish/v1/Chassis"}},
        {"Content-Type": "application/json", "OData-Version": "4.0"},  # no length: framed by the close
    )
    resource(
        "/redfish/v1/Chassis",
        {"@odata.id": "/redfish/v1/Chassis", "Members": [{"@odata.id": "/redfish/v1/Chassis/1"}]},
    )
    resource(
        "/redfish/v1/Chassis/1",
        {
            "@odata.id": "/redfish/v1/Chassis/1",
            "Id": "1",
            # linked, and missing from the mockup: its GET is the mockup server's bare 404
            "EnvironmentMetrics": {"@odata.id": "/redfish/v1/Chassis/1/EnvironmentMetrics"},
        },
        {"Content-Type": "application/json"},
    )


@pytest.fixture
def mockup(tls_files: TlsFiles, tmp_path: Path) -> Iterator[Mockup]:
    root = tmp_path / "mockup"
    _write_mockup(root)
    handler = type("Handler", (_MockupHandler,), {"root": root})
    server = HTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certfile=str(tls_files.cert), keyfile=str(tls_files.key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield Mockup(f"https://127.0.0.1:{server.server_address[1]}", root, handler)
    server.shutdown()
    server.server_close()


def _client(url: str, tls: TlsFiles) -> BmcClient:
    settings = ConnectionSettings(url=url, username="admin", password="pw", auth="basic", max_attempts=1)
    return BmcClient(HttpConnections(30.0), settings, tls.client_context())


async def test_the_mockup_servers_404_without_length_or_close_notify_is_a_404(
    mockup: Mockup, tls_files: TlsFiles
) -> None:
    client = _client(mockup.url, tls_files)
    deadline = time.monotonic() + _WAIT

    with pytest.raises(ResourceNotFoundError) as missing:
        await client.get("/redfish/v1/Chassis/1/EnvironmentMetrics", deadline=deadline)
    assert missing.value.status == 404
    reply = await client.call(
        "GET", "/redfish/v1/Chassis/1/EnvironmentMetrics", deadline=deadline, allow_404=True
    )
    assert reply.status == 404 and reply.read == b""

    # an independent client reads that reply the same way (urllib3 through requests)
    url = f"{mockup.url}/redfish/v1/Chassis/1/EnvironmentMetrics"
    independent = await asyncio.to_thread(requests.get, url, verify=str(tls_files.ca))
    assert independent.status_code == 404
    client.transport.close()


async def test_the_mockup_servers_json_framed_by_its_close_is_read_whole(
    mockup: Mockup, tls_files: TlsFiles
) -> None:
    client = _client(mockup.url, tls_files)
    deadline = time.monotonic() + _WAIT

    root = await client.get("/redfish/v1", deadline=deadline)  # no length: one whole JSON object
    assert root.get("Chassis") == {"@odata.id": "/redfish/v1/Chassis"}
    chassis = await client.get("/redfish/v1/Chassis/1", deadline=deadline)
    assert chassis.get("EnvironmentMetrics") == {"@odata.id": "/redfish/v1/Chassis/1/EnvironmentMetrics"}
    members = await client.get("/redfish/v1/Chassis", deadline=deadline)  # with its Content-Length
    assert members.get("Members") == [{"@odata.id": "/redfish/v1/Chassis/1"}]
    client.transport.close()


async def test_a_body_that_proves_nothing_about_its_end_is_still_refused(
    mockup: Mockup, tls_files: TlsFiles
) -> None:
    # the same server, a body framed by its close that is not one whole JSON object or array
    folder = mockup.root / "redfish/v1/Chassis/1/Power"
    folder.mkdir(parents=True)
    (folder / "index.json").write_text('{"PowerControl": [{"PowerLimit": {"LimitInWatts": 50')  # cut
    (folder / "headers.json").write_text(json.dumps({"GET": {"Content-Type": "application/json"}}))
    origin = Origin("127.0.0.1", int(mockup.url.rsplit(":", 1)[1]), tls_files.client_context(), 30.0)

    with pytest.raises(Disconnected, match="without TLS close_notify"):
        await origin.request(
            "GET", "/redfish/v1/Chassis/1/Power", {}, None, connect_timeout=_WAIT, reply_timeout=_WAIT
        )


# ---- a real Apache with ssl-unclean-shutdown, HTTP/1.0 and gzip -----------------------------------


def _through(ctx: DeviceContext, front: ApacheFront) -> DeviceContext:
    return dataclasses.replace(ctx, endpoint=dataclasses.replace(ctx.endpoint, url=front.url))


async def test_every_call_works_behind_apache_that_ends_tls_uncleanly(
    make_harness: Callable[..., Any], sim_certs: Path, tmp_path: Path
) -> None:
    apache_or_skip()
    tls = ensure_tls_files(sim_certs)
    h: Harness
    async with make_harness(n=1, model="gb200") as h:
        bmc = h.fleet.bmcs[0]
        with ApacheFront(bmc.url, tls, tmp_path) as front:
            metrics = await h.plugin.std_metrics(_through(h.ctx(bmc), front), Empty())
            assert metrics.result.ok, metrics.result
            change = await h.plugin.update_gpu_policies(_through(h.ctx(bmc), front), one_gpu(0, 555))
            assert change.result.results[0].ok and change.result.results[0].applied_watts == 555
            await h.plugin.close()  # the session's DELETE goes through Apache too

            seen = front.requests()
            assert any(line.startswith('"PATCH /redfish/v1/') and " 200 " in line for line in seen), seen
            assert any(line.endswith(" gzip") for line in seen), seen  # bodies were gzip'd
            assert not any(" 5" in line.split('"')[-1][:3] for line in seen), seen


async def test_a_large_gzip_body_framed_by_apaches_unclean_close_is_read_whole(
    mockup: Mockup, tls_files: TlsFiles, tmp_path: Path
) -> None:
    apache_or_skip()
    # about 100 KB that gzip cannot shrink much (zlib holds back what a body that compresses well
    # gives, and Apache then learns the whole length before the head goes out)
    members = [
        {"@odata.id": f"/redfish/v1/Chassis/{hashlib.sha256(b'%d' % i).hexdigest()}"} for i in range(1000)
    ]
    folder = mockup.root / "redfish/v1/Chassis"
    (folder / "index.json").write_text(json.dumps({"@odata.id": "/redfish/v1/Chassis", "Members": members}))
    mockup.handler.pause = 0.3
    with ApacheFront(mockup.url, tls_files, tmp_path) as front:
        # a body that streams in (its second half after a pause): Apache gzips it as it comes, so
        # no length is known when its head goes out; HTTP/1.0 has no chunks: the body ends with
        # the connection, whose TLS ends without close_notify. The gzip stream's end proves it whole.
        origin = Origin("127.0.0.1", front.port, tls_files.client_context(), 30.0)
        reply = await origin.request(
            "GET", "/redfish/v1/Chassis", {}, None, connect_timeout=_WAIT, reply_timeout=_WAIT
        )
        assert reply.headers.get("Content-Encoding") == "gzip", dict(reply.headers)
        assert "Content-Length" not in reply.headers and "Transfer-Encoding" not in reply.headers
        assert json.loads(reply.body)["Members"] == members

        client = _client(front.url, tls_files)
        deadline = time.monotonic() + _WAIT
        assert (await client.get("/redfish/v1/Chassis", deadline=deadline)).get("Members") == members
        with pytest.raises(ResourceNotFoundError):
            await client.get("/redfish/v1/Chassis/1/EnvironmentMetrics", deadline=deadline)
        client.transport.close()
        seen = front.requests()
        assert '"GET /redfish/v1/Chassis HTTP/1.1" 200 gzip' in seen, seen
