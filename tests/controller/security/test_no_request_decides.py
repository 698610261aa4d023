"""Defects 1 and 2: a request never decides which code is imported or where a secret is sent.

The hostile receiver is a real HTTPS server (trusted by the controller, so TLS is not what stops
it) that records every request it gets; a control run with the operator's allow-list proves it
would have seen the credentials.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from aiohttp import web

from bmcsim.tls import ensure_tls_files
from controller import translate
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc
from controller.app import Controller
from controller.config import Settings
from controller.delivery.sink import TopologySink
from plugins.base import Empty, RequestKind

ROOT = Path(__file__).resolve().parents[3]
PASSWORD = "hunter2-canary-8c1f"


def test_a_request_naming_a_module_imports_nothing(tmp_path: Path) -> None:
    """In a fresh interpreter: `power_policy_plugin: "this:s"` (and friends) must import nothing."""
    script = textwrap.dedent(
        f"""
        import asyncio, json, sys
        from controller.app import Controller
        from controller.config import Settings
        from controller.delivery.sink import TopologySink
        from controller import translate
        from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
        from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc
        import grpc
        from tests.controller.conftest import memory_inventory

        MODELS = {{
            "evil1": {{"power_policy_plugin": "this:s", "Redfish": {{"URL": "https://127.0.0.1:9"}}}},
            "evil2": {{"spec": {{"powerPolicyPlugin": "antigravity:x"}}, "Redfish": {{"URL": "https://127.0.0.1:9"}}}},
            "evil3": {{"powerPolicyPlugin": "nosuchplugin", "Redfish": {{"URL": "https://127.0.0.1:9"}}}},
        }}

        async def main():
            sink = TopologySink("127.0.0.1:0")
            await sink.start()
            settings = Settings(listen="127.0.0.1:0", database_url="sqlite:///{tmp_path}/d.db",
                                callback=sink.address, auto_upgrade=True, log_level="DEBUG")
            controller = Controller(settings, memory_inventory(1))
            await controller.start()
            async with grpc.aio.insecure_channel(f"127.0.0.1:{{controller.port}}") as ch:
                stub = dgrpc.DeviceControllerStub(ch)
                for device, model in MODELS.items():
                    msg = pb.DeviceControllerRequest(device=device, request_id=device,
                        device_model_json=json.dumps(model).encode(),
                        ping=pb.DeviceControllerRequest.PingRequest(retry_count=1))
                    await stub.SendDeviceRequest(msg, timeout=10)
            await sink.wait_for(set(MODELS), timeout=30)
            errors = {{rid: translate.success_of(r)[1] for rid, r in sink.unique().items()}}
            await controller.stop()
            await sink.stop()
            print(json.dumps({{"imported": [m for m in ("this", "antigravity", "nosuchplugin")
                                           if m in sys.modules], "errors": errors}}))

        asyncio.run(main())
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["imported"] == []
    assert "Beautiful is better than ugly" not in result.stdout + result.stderr  # `this` never ran
    assert set(report["errors"]) == {"evil1", "evil2", "evil3"}
    for error in report["errors"].values():
        assert "unknown plugin" in error and "installed: " in error
    assert "Traceback" not in result.stderr


class Hostile:
    """An HTTPS 'BMC' that records every request: method, path, Authorization header, body."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append(
            {
                "method": request.method,
                "path": request.path,
                "authorization": request.headers.get("Authorization", ""),
                "body": (await request.read()).decode(errors="replace"),
            }
        )
        if request.path.rstrip("/") == "/redfish/v1":
            root = {
                "@odata.id": "/redfish/v1",
                "RedfishVersion": "1.15.0",
                "SessionService": {"@odata.id": "/redfish/v1/SessionService"},
                "Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}},
                "Systems": {"@odata.id": "/redfish/v1/Systems"},
            }
            return web.json_response(root)
        return web.json_response({"error": "no"}, status=401)

    def got_password(self) -> bool:
        for item in self.seen:
            auth = item["authorization"]
            decoded = ""
            if auth.lower().startswith("basic "):
                decoded = base64.b64decode(auth[6:]).decode(errors="replace")
            if PASSWORD in item["body"] or PASSWORD in decoded:
                return True
        return False


@pytest.fixture
async def hostile(tmp_path: Path) -> AsyncIterator[tuple[Hostile, str, str]]:
    made = ensure_tls_files(tmp_path / "hostile-pki")  # a CA the controller is told to trust
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(made.cert, made.key)
    recorder = Hostile()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", recorder.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield recorder, f"https://127.0.0.1:{port}", str(made.ca)
    await runner.cleanup()


def _write_inventory(tmp_path: Path, allow: list[str] | None) -> Path:
    secrets = tmp_path / "secrets"
    secrets.mkdir(exist_ok=True)
    (secrets / "bmc").write_text(json.dumps({"username": "root", "password": PASSWORD}))
    (secrets / "bmc").chmod(0o600)
    text = textwrap.dedent(
        """
        [[device]]
        id = "node-with-url"
        plugin = "redfish"
        model = "DGX_GB200"
        [device.redfish]
        url = "https://127.0.0.1:9"
        secret = "bmc"

        [[device]]
        id = "node-without-url"
        plugin = "redfish"
        model = "DGX_GB200"
        [device.redfish]
        secret = "bmc"
        """
    )
    if allow is not None:
        text += f"\n[secrets.bmc]\nallow = {json.dumps(allow)}\n"
    path = tmp_path / "inventory.toml"
    path.write_text(text)
    return path


async def _run(
    tmp_path: Path, inventory: Path, ca: str, requests: dict[str, tuple[str, dict[str, Any]]]
) -> dict:
    sink = TopologySink("127.0.0.1:0")
    await sink.start()
    settings = Settings(
        listen="127.0.0.1:0",
        database_url=f"sqlite:///{tmp_path}/devicectl.db",
        callback=sink.address,
        auto_upgrade=True,
        inventory=str(inventory),
        secrets_dir=str(tmp_path / "secrets"),
        ca_bundle=ca,
    )
    controller = Controller(settings)
    await controller.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{controller.port}") as channel:
            stub = devicecontroller_pb2_grpc.DeviceControllerStub(channel)
            for rid, (device, model) in requests.items():
                # an authenticated read: the plugin must log in to answer it
                kind = RequestKind.STD_METRICS
                msg = translate.request_to_proto(kind, Empty(), device=device, request_id=rid)
                msg.device_model_json = json.dumps(model).encode()
                await stub.SendDeviceRequest(msg, timeout=10)
        await sink.wait_for(set(requests), timeout=60)
        return {rid: translate.success_of(r)[1] for rid, r in sink.unique().items()}
    finally:
        await controller.stop()
        await sink.stop()


async def test_a_request_cannot_send_a_secret_to_a_url_of_its_choosing(
    tmp_path: Path, hostile: tuple[Hostile, str, str]
) -> None:
    recorder, url, ca = hostile
    inventory = _write_inventory(tmp_path, allow=None)
    redfish = {"Model": "DGX_GB200", "Redfish": {"URL": url, "SecretName": "bmc"}}
    errors = await _run(
        tmp_path,
        inventory,
        ca,
        {
            "new-device": ("evil-node", redfish),  # not in the inventory: model names URL and secret
            "no-url": ("node-without-url", redfish),  # inventory secret, URL from the request
            "with-url": ("node-with-url", redfish),  # the inventory's URL wins over the request's
        },
    )
    assert recorder.seen == []  # not one request reached the hostile server
    assert "secret 'bmc' is not allowed for " + url.lower() in errors["new-device"]
    assert "secret 'bmc' is not allowed for " + url.lower() in errors["no-url"]
    assert errors["with-url"] and url not in errors["with-url"]  # tried 127.0.0.1:9 (closed), not the hostile
    assert PASSWORD not in json.dumps(errors)


async def test_control_the_operators_allow_list_is_what_permits_a_host(
    tmp_path: Path, hostile: tuple[Hostile, str, str]
) -> None:
    """Control for the test above: allowed by the operator, the same request reaches the server."""
    recorder, url, ca = hostile
    inventory = _write_inventory(tmp_path, allow=["127.0.0.1"])
    redfish = {"Model": "DGX_GB200", "Redfish": {"URL": url, "SecretName": "bmc"}}
    await _run(tmp_path, inventory, ca, {"allowed": ("evil-node", redfish)})
    assert recorder.seen, "the hostile recorder saw nothing even when allowed: the test would prove nothing"
    assert recorder.got_password(), recorder.seen
