"""Playing a Nomad client: launch each devicectl plugin as Nomad would and speak only Nomad's protocol."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import grpc
import msgpack
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.plugins.external import nomad_client as nc
from tests.plugins.external.conftest import ROOT, serve_command

DP = "/hashicorp.nomad.plugins.device.DevicePlugin"
BP = "/hashicorp.nomad.plugins.base.proto.BasePlugin"


class Launched:
    def __init__(self, name: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), nc.COOKIE_KEY: nc.COOKIE_VALUE}
        env["PLUGIN_PROTOCOL_VERSIONS"] = nc.APP_PROTOCOL
        self.proc = subprocess.Popen(
            serve_command(name), env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self.channel = grpc.insecure_channel(nc.handshake(self.proc))
        grpc.channel_ready_future(self.channel).result(timeout=30)

    def close(self) -> int:
        # go-plugin's controller service asks the plugin to exit
        shutdown = self.channel.unary_unary("/plugin.GRPCController/Shutdown")
        shutdown(b"", timeout=10)
        self.channel.close()
        return self.proc.wait(timeout=30)


@pytest.fixture
def launch() -> Iterator[type[Launched]]:
    started: list[Launched] = []

    class Tracked(Launched):
        def __init__(self, name: str) -> None:
            super().__init__(name)
            started.append(self)

    yield Tracked
    for plugin in started:
        if plugin.proc.poll() is None:
            plugin.proc.kill()
            plugin.proc.wait()


def negotiate(plugin: Launched, config: dict[str, object]) -> object:
    health = health_pb2_grpc.HealthStub(plugin.channel).Check(health_pb2.HealthCheckRequest(service="plugin"))
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    info = nc.unary(
        plugin.channel,
        f"{BP}/PluginInfo",
        nc.msg(nc.BASE, "PluginInfoRequest"),
        f"{nc.BASE}.PluginInfoResponse",
    )
    assert info.type == 3, "PluginType DEVICE"
    assert nc.DEVICE_API in info.plugin_api_versions
    request = nc.msg(
        nc.BASE, "SetConfigRequest", msgpack_config=msgpack.packb(config), plugin_api_version=nc.DEVICE_API
    )
    nc.unary(plugin.channel, f"{BP}/SetConfig", request, f"{nc.BASE}.SetConfigResponse")
    return info


def test_nomad_client_drives_the_example_plugin(launch: type[Launched], tmp_path: Path) -> None:
    (tmp_path / "gpu0.bin").write_bytes(b"abc\n")
    plugin = launch("filedevices")
    schema = nc.unary(
        plugin.channel,
        f"{BP}/ConfigSchema",
        nc.msg(nc.BASE, "ConfigSchemaRequest"),
        f"{nc.BASE}.ConfigSchemaResponse",
    )
    assert schema.spec.object.attributes["dir"].Attr.type == "string"
    period = schema.spec.object.attributes["list_period"].default
    assert (period.primary.Attr.type, period.default.literal.value) == ("number", "5")
    info = negotiate(plugin, {"dir": str(tmp_path), "list_period": 0.1})
    assert info.name == "filedevices"

    prints = nc.stream(
        plugin.channel,
        f"{DP}/Fingerprint",
        nc.msg(nc.DEVICE, "FingerprintRequest"),
        f"{nc.DEVICE}.FingerprintResponse",
    )
    first = next(prints)
    (group,) = first.device_group
    assert (group.vendor, group.device_type, group.device_name) == ("devicectl", "file", "bin")
    assert [(d.ID, d.healthy) for d in group.devices] == [("gpu0.bin", True)]
    # 4 bytes, as a unit Nomad knows (plugins/shared/structs/units.go has no plain bytes)
    assert group.attributes["total_size"].int_val == 1 and group.attributes["total_size"].unit == "KiB"
    (tmp_path / "gpu1.bin").write_bytes(b"")
    second = next(prints)
    assert sorted(d.ID for d in second.device_group[0].devices) == ["gpu0.bin", "gpu1.bin"]
    prints.cancel()

    interval = timedelta(milliseconds=100)
    stats = nc.stream(
        plugin.channel,
        f"{DP}/Stats",
        nc.msg(nc.DEVICE, "StatsRequest", collection_interval=interval),
        f"{nc.DEVICE}.StatsResponse",
    )
    for _ in range(2):
        reply = next(stats)
        instance = reply.groups[0].instance_stats["gpu0.bin"]
        assert instance.summary.int_numerator_val.value == 4
        assert instance.stats.attributes["lines"].int_numerator_val.value == 1
        assert instance.timestamp.seconds > 0
    stats.cancel()

    reserved = nc.unary(
        plugin.channel,
        f"{DP}/Reserve",
        nc.msg(nc.DEVICE, "ReserveRequest", device_ids=["gpu1.bin"]),
        f"{nc.DEVICE}.ReserveResponse",
    )
    (mount,) = reserved.container_res.mounts
    assert (mount.task_path, mount.host_path, mount.read_only) == (
        "/dev/files/gpu1.bin",
        str((tmp_path / "gpu1.bin").resolve()),
        True,
    )
    assert reserved.container_res.envs["FILE_DEVICES"] == "gpu1.bin"
    with pytest.raises(grpc.RpcError) as err:
        nc.unary(
            plugin.channel,
            f"{DP}/Reserve",
            nc.msg(nc.DEVICE, "ReserveRequest", device_ids=["nope"]),
            f"{nc.DEVICE}.ReserveResponse",
        )
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "nope" in err.value.details()
    assert plugin.close() == 0


def test_an_unknown_api_version_is_refused(launch: type[Launched]) -> None:
    plugin = launch("filedevices")
    request = nc.msg(nc.BASE, "SetConfigRequest", plugin_api_version="v9.9.9")
    with pytest.raises(grpc.RpcError) as err:
        nc.unary(plugin.channel, f"{BP}/SetConfig", request, f"{nc.BASE}.SetConfigResponse")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "plugin API version 'v9.9.9' is not supported" in err.value.details()


@pytest.mark.parametrize("name", ["redfish", "nvml"])
def test_nomad_client_drives_the_power_plugins(launch: type[Launched], name: str) -> None:
    """Served unchanged. Without targets (Redfish) or a GPU (NVML, here) the streams still follow the
    protocol: device groups, or one clean status that names the problem."""
    plugin = launch(name)
    info = negotiate(plugin, {})
    assert info.name == name
    prints = nc.stream(
        plugin.channel,
        f"{DP}/Fingerprint",
        nc.msg(nc.DEVICE, "FingerprintRequest"),
        f"{nc.DEVICE}.FingerprintResponse",
    )
    try:
        reply = next(prints)
        assert all(g.device_type for g in reply.device_group)
    except grpc.RpcError as exc:
        assert exc.code() != grpc.StatusCode.UNKNOWN and exc.details(), exc
    prints.cancel()
    stats = nc.stream(
        plugin.channel, f"{DP}/Stats", nc.msg(nc.DEVICE, "StatsRequest"), f"{nc.DEVICE}.StatsResponse"
    )
    try:
        next(stats)
    except grpc.RpcError as exc:
        assert exc.code() != grpc.StatusCode.UNKNOWN and exc.details(), exc
    stats.cancel()
    try:
        nc.unary(
            plugin.channel,
            f"{DP}/Reserve",
            nc.msg(nc.DEVICE, "ReserveRequest", device_ids=[]),
            f"{nc.DEVICE}.ReserveResponse",
        )
    except grpc.RpcError as exc:
        assert exc.code() in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.FAILED_PRECONDITION), exc
    assert plugin.close() == 0


def test_sigint_is_left_to_the_host_sigterm_stops(launch: type[Launched]) -> None:
    """go-plugin's server ignores interrupts ("eat the interrupts", server.go): the plugin runs in
    the host's process group, and Ctrl-C on a foreground agent is the agent's to handle."""
    plugin = launch("filedevices")
    check = health_pb2_grpc.HealthStub(plugin.channel).Check
    for _ in range(3):
        plugin.proc.send_signal(signal.SIGINT)
    reply = check(health_pb2.HealthCheckRequest(service="plugin"), timeout=10)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING and plugin.proc.poll() is None
    plugin.proc.send_signal(signal.SIGTERM)
    assert plugin.proc.wait(timeout=30) == 0


def test_grpc_stdio_and_the_broker_answer(launch: type[Launched]) -> None:
    """go-plugin >= 1.4 hosts open GRPCStdio and the broker's stream at once; both must answer
    (not UNIMPLEMENTED) and end when the plugin shuts down.

    The stdio stream's end after a Shutdown is read as go-plugin's host reads it
    (hashicorp/go-plugin, grpc_stdio.go, `grpcStdioClient.Run`): an end, UNAVAILABLE or CANCELLED
    stops its loop as the plugin's normal exit. The plugin ends the stream before it exits, but a
    host may take that end only after the process has gone and the connection with it: in CI the
    stream once ended as UNAVAILABLE, "Stream removed (sendmsg: Broken pipe)", which this check
    used to fail although the host would have taken it as the end (55 runs here did not repeat
    it)."""
    plugin = launch("filedevices")
    stdio = plugin.channel.unary_stream("/plugin.GRPCStdio/StreamStdio")(b"")
    broker = plugin.channel.stream_stream("/plugin.GRPCBroker/StartStream")(iter(()))
    assert list(broker) == []  # the host's side ended: so does ours, having sent nothing
    # answered after the stdio call on the same connection: a refusal of it (UNIMPLEMENTED) is in
    assert not stdio.done(), stdio.code()  # open and quiet until the plugin shuts down
    plugin.channel.unary_unary("/plugin.GRPCController/Shutdown")(b"", timeout=10)
    try:
        assert list(stdio) == []  # then ended, having sent nothing
    except grpc.RpcError as exc:  # the end as go-plugin's host takes it, the connection gone with it
        assert exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED), exc
    assert plugin.proc.wait(timeout=30) == 0
