"""The chart's default TLS, end to end: the certificates Helm generates (tls.source generate) and
the roles it renders start a real `devicectl serve` with mutual TLS, and its clients get exactly
their roles: the topology certificate sends requests and may not start a write cycle, the admin
certificate may, a client without a certificate is refused at the handshake."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller._proto.devicecontroller.v1 import admin_pb2_grpc, devicecontroller_pb2_grpc
from tests.controller.security.conftest import ping
from tests.deploy._helm import render_chart
from tests.deploy.test_deploy import CHART, by_kind, container, env_of
from tests.serve_process import ROOT, free_port

SERVER_NAME = "test-devicectl.default.svc"  # a DNS name of the chart's Service


def _secrets(docs: list[dict[str, Any]]) -> dict[str, dict[str, bytes]]:
    return {
        d["metadata"]["name"]: {k: base64.b64decode(v) for k, v in d["data"].items()}
        for d in by_kind(docs)["Secret"]
    }


@pytest.fixture
def chart_pod(tmp_path: Path) -> Iterator[tuple[dict[str, str], dict[str, dict[str, bytes]]]]:
    docs = render_chart(CHART)
    secrets = _secrets(docs)
    tls_dir = tmp_path / "tls"
    tls_dir.mkdir()
    for key, data in secrets["test-devicectl-tls"].items():
        (tls_dir / key).write_bytes(data)
        (tls_dir / key).chmod(0o600)
    env = env_of(container(by_kind(docs)["Deployment"][0]))
    pod_env = {
        k: str(v).replace("/etc/devicectl/tls", str(tls_dir))
        for k, v in env.items()
        if k in ("DEVICECTL_TLS_CERT", "DEVICECTL_TLS_KEY", "DEVICECTL_TLS_CLIENT_CA", "DEVICECTL_ROLES")
    }
    assert set(pod_env) == {
        "DEVICECTL_TLS_CERT",
        "DEVICECTL_TLS_KEY",
        "DEVICECTL_TLS_CLIENT_CA",
        "DEVICECTL_ROLES",
    }
    yield pod_env, secrets


def _channel(port: int, ca: bytes, client: dict[str, bytes] | None) -> grpc.aio.Channel:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=ca,
        private_key=None if client is None else client["tls.key"],
        certificate_chain=None if client is None else client["tls.crt"],
    )
    return grpc.aio.secure_channel(
        f"127.0.0.1:{port}", credentials, options=[("grpc.ssl_target_name_override", SERVER_NAME)]
    )


async def test_the_generated_certificates_and_roles_serve_mutual_tls_with_each_role(
    chart_pod: tuple[dict[str, str], dict[str, dict[str, bytes]]], tmp_path: Path
) -> None:
    pod_env, secrets = chart_pod
    ca = secrets["test-devicectl-ca"]["tls.crt"]
    assert secrets["test-devicectl-tls"]["ca.crt"] == ca
    port = free_port()
    args = [
        sys.executable, "-m", "controller", "serve",
        "--listen", f"127.0.0.1:{port}",
        "--metrics-listen", "127.0.0.1:0",
        "--database-url", f"sqlite:///{tmp_path / 'devicectl.db'}",
        "--callback", "127.0.0.1:9",
        "--auto-upgrade",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), **pod_env}
    serve = subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=(tmp_path / "serve.log").open("ab"), stderr=subprocess.STDOUT
    )
    try:
        # the health check needs a client certificate too under mutual TLS: poll with the operator's
        await _wait_up(port, ca, secrets["test-devicectl-client-devicectl-operator"], serve, tmp_path)
        topology = _channel(port, ca, secrets["test-devicectl-client-topology"])
        admin = _channel(port, ca, secrets["test-devicectl-client-devicectl-admin"])
        nobody = _channel(port, ca, None)
        try:
            send = devicecontroller_pb2_grpc.DeviceControllerStub(topology).SendDeviceRequest
            await send(ping("node000", "chart-1"), timeout=10)  # the topology role sends
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await admin_pb2_grpc.DeviceControllerAdminStub(topology).StartWriteCycle(
                    apb.StartVerifyRequest(devices=["node000"]), timeout=10
                )
            assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
            listed = await admin_pb2_grpc.DeviceControllerAdminStub(admin).ListRequests(
                apb.ListRequestsRequest(), timeout=10
            )
            assert [r.request_id for r in listed.requests] == ["chart-1"]  # the admin role reads
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await admin_pb2_grpc.DeviceControllerAdminStub(nobody).ListRequests(
                    apb.ListRequestsRequest(), timeout=10
                )
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE  # no certificate: no handshake
        finally:
            for channel in (topology, admin, nobody):
                await channel.close()
    finally:
        serve.terminate()
        serve.wait(timeout=60)


async def _wait_up(
    port: int, ca: bytes, client: dict[str, bytes], serve: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    import asyncio

    from grpc_health.v1 import health_pb2, health_pb2_grpc

    async with _channel(port, ca, client) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for _ in range(600):
            assert serve.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=0.5)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError((tmp_path / "serve.log").read_text()[-3000:])
