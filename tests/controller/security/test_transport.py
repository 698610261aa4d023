"""TLS and mutual TLS on the controller's gRPC server and on the callback channel, roles from
certificate identities, reflection off by default, plaintext only on loopback, and certificate
rotation without a restart. Real ports, real certificates made at test time."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from bmcsim.tls import write_file
from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller._proto.devicecontroller.v1 import admin_pb2_grpc, devicecontroller_pb2_grpc
from controller.app import Controller
from controller.config import Settings
from controller.delivery.sink import TopologySink
from controller.security import certs
from controller.security.authz import allows, required_role
from controller.security.tls import ClientTls, ServerTls, client_channel, is_loopback
from tests.controller.conftest import memory_inventory
from tests.controller.security.conftest import Pki, mtls_settings, ping


async def test_topology_role_sends_and_the_mtls_sink_gets_the_response(
    start_secure: Any, channel_to: Any, pki: Pki, mtls_sink: TopologySink
) -> None:
    controller = await start_secure()
    stub = devicecontroller_pb2_grpc.DeviceControllerStub(channel_to(controller, pki.client("topology")))
    await stub.SendDeviceRequest(ping("node000", "tls-1"), timeout=10)
    await mtls_sink.wait_for({"tls-1"}, timeout=15)
    assert mtls_sink.peers["controller"] >= 1  # delivered with the controller's client certificate


async def test_client_without_certificate_is_refused(start_secure: Any, channel_to: Any, pki: Pki) -> None:
    controller = await start_secure()
    stub = devicecontroller_pb2_grpc.DeviceControllerStub(channel_to(controller, pki.client(None)))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.SendDeviceRequest(ping("node000", "nocert"), timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert await controller.store.get_request("nocert") is None


async def test_client_from_an_unknown_ca_is_refused(start_secure: Any, channel_to: Any, pki: Pki) -> None:
    controller = await start_secure()
    admin = admin_pb2_grpc.DeviceControllerAdminStub(channel_to(controller, pki.client("admin", rogue=True)))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await admin.ListDevices(apb.ListDevicesRequest(), timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_role_that_does_not_allow_the_call_is_refused_and_logged(
    start_secure: Any, channel_to: Any, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    controller = await start_secure()
    caplog.set_level(logging.WARNING, logger="controller.security.authz")
    operator = channel_to(controller, pki.client("operator"))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await devicecontroller_pb2_grpc.DeviceControllerStub(operator).SendDeviceRequest(
            ping("node000", "op-send"), timeout=5
        )
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "operator" in (info.value.details() or "")
    assert await controller.store.get_request("op-send") is None
    denied = [r.getMessage() for r in caplog.records if "permission denied" in r.getMessage()]
    assert any("SendDeviceRequest" in m and "operator" in m for m in denied)

    topology = channel_to(controller, pki.client("topology"))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await admin_pb2_grpc.DeviceControllerAdminStub(topology).ListRequests(
            apb.ListRequestsRequest(), timeout=5
        )
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED

    nobody = channel_to(controller, pki.client("nobody"))  # our CA, but no role
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await admin_pb2_grpc.DeviceControllerAdminStub(nobody).ListDevices(
            apb.ListDevicesRequest(), timeout=5
        )
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert any("nobody" in m for m in (r.getMessage() for r in caplog.records))


async def test_operator_and_admin_read_the_admin_api_and_health_is_open(
    start_secure: Any, channel_to: Any, pki: Pki
) -> None:
    controller = await start_secure()
    for name in ("operator", "admin"):
        admin = admin_pb2_grpc.DeviceControllerAdminStub(channel_to(controller, pki.client(name)))
        listed = await admin.ListDevices(apb.ListDevicesRequest(), timeout=5)
        assert {d.id for d in listed.devices} == {"node000", "node001"}
    health = health_pb2_grpc.HealthStub(channel_to(controller, pki.client("nobody")))
    reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_wait_request_stream_is_guarded_too(start_secure: Any, channel_to: Any, pki: Pki) -> None:
    controller = await start_secure()
    topology = channel_to(controller, pki.client("topology"))
    admin = admin_pb2_grpc.DeviceControllerAdminStub(topology)
    await devicecontroller_pb2_grpc.DeviceControllerStub(topology).SendDeviceRequest(ping("node000", "w1"))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in admin.WaitRequest(apb.WaitRequestRequest(request_id="w1"), timeout=5):
            pass
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    operator = admin_pb2_grpc.DeviceControllerAdminStub(channel_to(controller, pki.client("operator")))
    records = [r async for r in operator.WaitRequest(apb.WaitRequestRequest(request_id="w1"), timeout=15)]
    assert records[-1].outcome == "ok"


async def _refusal(stub: Any, request: Any) -> grpc.StatusCode:
    """The status of a reflection call the server refuses at its start.

    NOTE: a request written while the refusal is on its way fails in grpc's core, and the client
    then reports that write's INTERNAL error instead of the server's status (grpc/aio/_call.py,
    `_write`: `set_internal_error`), so the request waits until the call has ended (and is then
    dropped unsent)."""
    ended = asyncio.Event()

    async def after_the_answer() -> AsyncIterator[Any]:
        await ended.wait()
        yield request

    with pytest.raises(grpc.aio.AioRpcError) as info:
        _ = [a async for a in stub.ServerReflectionInfo(after_the_answer(), timeout=5)]
    ended.set()
    code: grpc.StatusCode = info.value.code()
    return code


async def test_reflection_is_off_unless_enabled_and_then_needs_the_operator_role(
    start_secure: Any, channel_to: Any, pki: Pki
) -> None:
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    off = await start_secure()
    stub = reflection_pb2_grpc.ServerReflectionStub(channel_to(off, pki.client("admin")))
    assert await _refusal(stub, request) == grpc.StatusCode.UNIMPLEMENTED
    await off.stop()

    on = await start_secure(reflection=True)
    stub = reflection_pb2_grpc.ServerReflectionStub(channel_to(on, pki.client("operator")))
    answers = [a async for a in stub.ServerReflectionInfo(iter([request]), timeout=5)]
    names = {s.name for s in answers[0].list_services_response.service}
    assert "devicecontroller.v1.DeviceController" in names
    stub = reflection_pb2_grpc.ServerReflectionStub(channel_to(on, pki.client("topology")))
    assert await _refusal(stub, request) == grpc.StatusCode.PERMISSION_DENIED


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"roles": ""}, "no roles"),
        ({"tls_client_ca": ""}, "roles need client certificates"),
        ({"roles": "alice=root"}, "unknown role"),
        ({"roles": "alice"}, "not identity=role"),
        ({"tls_key": ""}, "both a certificate and a key"),
        ({"tls_cert": "/nonexistent/cert.pem"}, "not found"),
    ],
)
async def test_bad_security_settings_refuse_to_start(
    pki: Pki, tmp_path: Path, overrides: dict[str, Any], message: str
) -> None:
    controller = Controller(mtls_settings(pki, tmp_path, "127.0.0.1:1", **overrides), memory_inventory(1))
    with pytest.raises(ValueError, match=message):
        await controller.start()
    await controller.store.close()


async def test_plaintext_only_on_loopback_unless_insecure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    base = {"database_url": f"sqlite:///{tmp_path}/d.db", "auto_upgrade": True, "callback": ""}
    refused = Controller(Settings(listen="0.0.0.0:0", **base), memory_inventory(1))
    with pytest.raises(ValueError, match="not a loopback address"):
        await refused.start()
    await refused.store.close()
    callback = Controller(Settings(listen="127.0.0.1:0", **{**base, "callback": "10.0.0.1:50052"}), {})
    with pytest.raises(ValueError, match=r"topology callback 10\.0\.0\.1:50052 is not a loopback"):
        await callback.start()
    await callback.store.close()

    caplog.set_level(logging.WARNING, logger="controller.security.tls")
    allowed = Controller(Settings(listen="0.0.0.0:0", insecure=True, **base), memory_inventory(1))
    await allowed.start()
    try:
        assert any("plaintext gRPC on a non-loopback address" in r.getMessage() for r in caplog.records)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{allowed.port}") as channel:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=5
            )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        await allowed.stop()


def test_loopback_addresses() -> None:
    for address in ("127.0.0.1:50051", "localhost:1", "[::1]:5", "127.9.9.9:1", "unix:/tmp/s"):
        assert is_loopback(address), address
    for address in ("0.0.0.0:50051", "[::]:1", "10.0.0.1:1", "topology.example:443", ":50051"):
        assert not is_loopback(address), address


async def test_server_tls_without_client_ca_and_tls_only_callback(pki: Pki, tmp_path: Path) -> None:
    """TLS (no client certificates) on both sides: a TLS-only receiver gets every delivery."""
    sink = TopologySink("127.0.0.1:0", tls=ServerTls(str(pki.ours.server_cert), str(pki.ours.server_key)))
    await sink.start()
    settings = mtls_settings(
        pki, tmp_path, sink.address, tls_client_ca="", roles="", callback_cert="", callback_key=""
    )
    controller = Controller(settings, memory_inventory(2))
    await controller.start()
    try:
        async with client_channel(f"127.0.0.1:{controller.port}", ClientTls(ca_cert=str(pki.ours.ca))) as ch:
            stub = devicecontroller_pb2_grpc.DeviceControllerStub(ch)
            ids = {f"t{i}" for i in range(10)}
            for rid in sorted(ids):
                await stub.SendDeviceRequest(ping(f"node00{int(rid[1:]) % 2}", rid), timeout=5)
        await sink.wait_for(ids, timeout=20)
        assert set(sink.counts) == ids
    finally:
        await controller.stop()
        await sink.stop()


async def test_a_rotated_server_certificate_is_served_to_new_connections(
    start_secure: Any, pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    controller = await start_secure()
    old_ca = pki.client("admin")

    async def health_with(tls: ClientTls) -> grpc.StatusCode:
        async with client_channel(f"127.0.0.1:{controller.port}", tls) as channel:
            try:
                await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
            except grpc.aio.AioRpcError as exc:
                return exc.code()
            return grpc.StatusCode.OK

    assert await health_with(old_ca) == grpc.StatusCode.OK
    # Rotate the server certificate to one from a new CA (write-then-rename, as an operator should).
    fresh = certs.init(tmp_path / "rotated", ())
    # The client still presents a certificate from our CA (client CA unchanged) but trusts the new CA.
    new_ca = ClientTls(ca_cert=str(fresh.ca), cert=old_ca.cert, key=old_ca.key)
    caplog.set_level(logging.INFO, logger="controller.security.tls")
    # Half-way (new certificate, old key): the mismatched pair is refused and the old one kept.
    write_file(pki.ours.server_cert, fresh.server_cert.read_bytes())
    assert await health_with(old_ca) == grpc.StatusCode.OK
    assert any("does not belong to certificate" in r.getMessage() for r in caplog.records)
    write_file(pki.ours.server_key, fresh.server_key.read_bytes(), private=True)
    assert await health_with(new_ca) == grpc.StatusCode.OK
    assert await health_with(old_ca) == grpc.StatusCode.UNAVAILABLE  # the old certificate is gone
    assert any("reloaded certificate files" in r.getMessage() for r in caplog.records)


def test_method_to_role_table() -> None:
    admin_api = "/devicecontroller.v1.DeviceControllerAdmin/"
    assert required_role("/devicecontroller.v1.DeviceController/SendDeviceRequest") == "topology"
    assert required_role("/devicecontroller.v1.DeviceController/SomethingNew") == ""  # nobody
    assert required_role(admin_api + "ListRequests") == "operator"
    assert required_role(admin_api + "WaitRequest") == "operator"
    assert required_role(admin_api + "RequeueDeadLetter") == "admin"  # any write
    assert required_role("/grpc.health.v1.Health/Check") is None
    assert required_role("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo") == "operator"
    assert required_role("/other.Service/Call") == ""
    assert allows(frozenset({"admin"}), "operator") and allows(frozenset({"admin"}), "admin")
    assert not allows(frozenset({"operator"}), "admin")
    assert not allows(frozenset({"admin"}), "topology")  # sending requests is the topology's job
    assert not allows(frozenset({"topology", "operator", "admin"}), "")
