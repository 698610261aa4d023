"""Stands in for a device plugin binary built for Nomad: Nomad's services only, no devicectl extension.

Run as a script by the tests: it checks the magic cookie, prints go-plugin's handshake line and
serves DevicePlugin, BasePlugin and health until killed.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from collections.abc import AsyncIterator
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from plugins._proto.nomad.plugins.base import base_pb2, base_pb2_grpc
from plugins._proto.nomad.plugins.device import device_pb2, device_pb2_grpc


class Device(device_pb2_grpc.DevicePluginServicer):
    async def Fingerprint(self, request: Any, context: Any) -> AsyncIterator[device_pb2.FingerprintResponse]:
        group = device_pb2.DeviceGroup(vendor="acme", device_type="fpga", device_name="F1")
        group.devices.add(ID="fpga0", healthy=True)
        yield device_pb2.FingerprintResponse(device_group=[group])
        await asyncio.sleep(3600)

    async def Stats(self, request: Any, context: Any) -> AsyncIterator[device_pb2.StatsResponse]:
        out = device_pb2.StatsResponse()
        stats = out.groups.add(vendor="acme", type="fpga", name="F1").instance_stats["fpga0"]
        stats.summary.int_numerator_val.value = 42
        stats.timestamp.GetCurrentTime()
        yield out
        await asyncio.sleep(3600)

    async def Reserve(self, request: Any, context: Any) -> device_pb2.ReserveResponse:
        res = device_pb2.ContainerReservation(envs={"ACME_FPGA": ",".join(request.device_ids)})
        return device_pb2.ReserveResponse(container_res=res)


class Base(base_pb2_grpc.BasePluginServicer):
    async def PluginInfo(self, request: Any, context: Any) -> base_pb2.PluginInfoResponse:
        return base_pb2.PluginInfoResponse(
            type=base_pb2.DEVICE, plugin_api_versions=["v0.1.0"], plugin_version="9.9", name="acme-fpga"
        )

    async def ConfigSchema(self, request: Any, context: Any) -> base_pb2.ConfigSchemaResponse:
        return base_pb2.ConfigSchemaResponse()  # no spec: takes no config

    async def SetConfig(self, request: Any, context: Any) -> base_pb2.SetConfigResponse:
        return base_pb2.SetConfigResponse()


async def main() -> None:
    if os.environ.get("NOMAD_PLUGIN_MAGIC_COOKIE") is None:
        sys.exit("this is a Nomad plugin")
    server = grpc.aio.server()
    device_pb2_grpc.add_DevicePluginServicer_to_server(Device(), server)
    base_pb2_grpc.add_BasePluginServicer_to_server(Base(), server)
    checks = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checks, server)
    sock = os.path.join(tempfile.mkdtemp(), "plugin.sock")
    server.add_insecure_port(f"unix:{sock}")
    await server.start()
    await checks.set("plugin", health_pb2.HealthCheckResponse.SERVING)
    print(f"1|2|unix|{sock}|grpc", flush=True)
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(main())
