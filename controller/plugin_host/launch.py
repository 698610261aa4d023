"""Start (or dial) one out-of-process device plugin and negotiate with it, as a Nomad client does.

go-plugin's protocol: the host sets the magic cookie and the app protocol versions it accepts in
the child's environment; the child prints one line on stdout, `CORE|APP|NETWORK|ADDR|grpc`; the
host dials that address, waits for the `plugin` health service to be SERVING, reads PluginInfo,
picks a device API version both sides speak and sends SetConfig. Every failure is one clear
`HostEnvironmentError` naming the plugin, and a started process is never left behind.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import tomllib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import empty_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from controller.inventory import InventoryError, unknown_name
from plugins._proto.devicectl.plugin.v1 import power_pb2, power_pb2_grpc
from plugins._proto.goplugin import (
    grpc_controller_pb2,
    grpc_controller_pb2_grpc,
    grpc_stdio_pb2,
    grpc_stdio_pb2_grpc,
)
from plugins._proto.nomad.plugins.base import base_pb2, base_pb2_grpc
from plugins._proto.nomad.plugins.device import device_pb2_grpc
from plugins.base import HostEnvironmentError, InvalidRequestError
from plugins.base.bounds import check_number
from plugins.base.plugin_config import ConfigSpec, decode_config, encode_config
from plugins.base.serving import (
    API_VERSIONS,
    APP_PROTOCOL_VERSION,
    CORE_PROTOCOL_VERSION,
    MAGIC_COOKIE_KEY,
    MAGIC_COOKIE_VALUE,
)

log = logging.getLogger(__name__)

#: how long a plugin asked to shut down may take before it is killed (go-plugin's Kill waits 2 s)
SHUTDOWN_GRACE = 2.0


@dataclass(frozen=True)
class ExternalPlugin:
    """An inventory `[[plugin]]` entry: a plugin served by its own process.

    Exactly one of `command` (start it, one process per plugin) or `address` (dial a plugin that
    something else runs, e.g. a root-owned NVML plugin: "unix:/run/x.sock" or "127.0.0.1:7001").
    """

    name: str
    command: tuple[str, ...] = ()
    address: str = ""
    #: plugin-level config, sent with SetConfig (msgpack, as Nomad does)
    config: Mapping[str, Any] = field(default_factory=dict)
    #: extra environment for the started process
    env: Mapping[str, str] = field(default_factory=dict)
    #: seconds to wait for the handshake line and the first health check
    handshake_timeout: float = 10.0

    @property
    def label(self) -> str:
        """How messages name the plugin before its PluginInfo is known."""
        return self.name or self.address or " ".join(self.command)[:80]


#: what a `[[plugin]]` table holds
_PLUGIN_KEYS = ("name", "command", "address", "config", "env", "handshake_timeout")


def load_external_plugins(path: str | Path) -> dict[str, ExternalPlugin]:
    """The `[[plugin]]` tables of an inventory file (none when the file has none)."""
    where = str(path)
    with Path(path).open("rb") as fh:
        raw = tomllib.load(fh).get("plugin", [])
    if not isinstance(raw, list):
        raise InventoryError(f"{where}: `plugin` must be an array of tables ([[plugin]])")
    out: dict[str, ExternalPlugin] = {}
    for i, item in enumerate(raw):
        at = f"{where}: plugin[{i}]"
        if not isinstance(item, Mapping):
            raise InventoryError(f"{where}: `plugin` must be an array of tables ([[plugin]])")
        problem = unknown_name(
            item, ("name", "command", "address", "config", "env", "handshake_timeout"), "plugin"
        )
        if problem:
            raise InventoryError(f"{at}: {problem}")
        name, command, address = item.get("name"), item.get("command", []), item.get("address", "")
        if not isinstance(name, str) or not name:
            raise InventoryError(f"{at}: `name` must be a non-empty string")
        if isinstance(command, str):
            command = command.split()
        if not isinstance(command, list) or not all(isinstance(c, str) for c in command):
            raise InventoryError(f"{at} ({name}): `command` must be a list of strings")
        if bool(command) == bool(address):
            raise InventoryError(f"{at} ({name}): give exactly one of `command` or `address`")
        if name in out:
            raise InventoryError(f"{at}: duplicate plugin name {name!r}")
        try:
            handshake = check_number(item.get("handshake_timeout", 10.0), "handshake_timeout", positive=True)
        except ValueError as exc:
            raise InventoryError(f"{at} ({name}): {exc}") from None
        out[name] = ExternalPlugin(
            name=name,
            command=tuple(command),
            address=str(address),
            config=dict(item.get("config", {})),
            env={str(k): str(v) for k, v in dict(item.get("env", {})).items()},
            handshake_timeout=float(handshake),
        )
    return out


@dataclass
class Connection:
    """A negotiated plugin: stubs for every service, and the process when we started it."""

    name: str
    target: str
    channel: grpc.aio.Channel
    info: base_pb2.PluginInfoResponse
    api_version: str
    process: asyncio.subprocess.Process | None = None
    stderr_tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=20))
    _drains: list[asyncio.Task[None]] = field(default_factory=list)
    #: the name the output drains print (shared with them, so a rename reaches them)
    label: list[str] = field(default_factory=list)
    #: the plugin honours a dry run at its write choke point (its Capabilities say so)
    dry_run: bool = False

    def __post_init__(self) -> None:
        self.device = device_pb2_grpc.DevicePluginStub(self.channel)
        self.base = base_pb2_grpc.BasePluginStub(self.channel)
        self.power = power_pb2_grpc.PowerOperationsStub(self.channel)
        self.controller = grpc_controller_pb2_grpc.GRPCControllerStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self.stdio = grpc_stdio_pb2_grpc.GRPCStdioStub(self.channel)
        if not self.label:
            self.label.append(self.name)

    def rename(self, name: str) -> None:
        self.name = name
        self.label[0] = name

    def stdio_drain(self) -> None:
        """Open go-plugin's stdio stream and read it in the background (plugins that do not serve it
        answer UNIMPLEMENTED). Opened before the negotiation's calls, as go-plugin's own client
        opens it while it connects (hashicorp/go-plugin `grpc_client.go`, `newGRPCClient`:
        `newGRPCStdioClient` before any plugin is dispensed): the request goes out ahead of
        theirs, so the plugin streams what it prints from SetConfig on. Opened after them (it
        was), a host that shut the plugin down soon after could find its stream reaching a plugin
        already stopping, and lose what it had printed (6 times in 8 where the host closed right
        after connecting)."""
        call = self.stdio.StreamStdio(empty_pb2.Empty())  # its request is sent from here on
        self._drains.append(asyncio.create_task(_drain_stdio(self, call), name=f"plugin {self.name} stdio"))

    async def healthy(self, timeout: float) -> bool:
        try:
            reply = await self.health.Check(health_pb2.HealthCheckRequest(service="plugin"), timeout=timeout)
        except grpc.aio.AioRpcError:
            return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

    async def close(self, *, graceful: bool = True) -> None:
        """Ask the process to shut down (go-plugin's Shutdown) and give it `SHUTDOWN_GRACE` seconds
        to exit, as go-plugin's `Kill` does, then make sure it is gone."""
        proc = self.process
        if proc is not None and proc.returncode is None and graceful:
            with contextlib.suppress(grpc.aio.AioRpcError):
                await self.controller.Shutdown(grpc_controller_pb2.Empty(), timeout=SHUTDOWN_GRACE)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), SHUTDOWN_GRACE)
            if proc.returncode is None:
                log.warning(
                    "plugin %s did not exit %g s after Shutdown; killing it", self.name, SHUTDOWN_GRACE
                )
        await _reap(proc)
        if graceful and proc is not None and self._drains:  # its last words: output ends at exit
            await asyncio.wait(self._drains, timeout=SHUTDOWN_GRACE / 2)
        await self.channel.close()
        for task in self._drains:
            task.cancel()


async def _reap(proc: asyncio.subprocess.Process | None) -> None:
    if proc is None or proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    await proc.wait()


async def _drain(stream: asyncio.StreamReader, label: list[str], tail: collections.deque[str]) -> None:
    """Forward the plugin's output to our log (stdout after the handshake, and stderr)."""
    while line := await stream.readline():
        text = line.decode(errors="replace").rstrip()
        tail.append(text)
        log.info("plugin %s: %s", label[0], text)


async def _drain_stdio(conn: Connection, stream: AsyncIterator[grpc_stdio_pb2.StdioData]) -> None:
    """go-plugin >= 1.4 plugins write their stdout/stderr into `GRPCStdio`, a stream only the host
    drains (a chatty plugin blocks when nobody does): read it into our log, line by line."""
    names: dict[int, str] = {
        grpc_stdio_pb2.StdioData.STDOUT: "stdout",
        grpc_stdio_pb2.StdioData.STDERR: "stderr",
    }
    partial: dict[int, str] = {}
    quiet = (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE)
    try:
        async for chunk in stream:
            text = partial.pop(chunk.channel, "") + chunk.data.decode(errors="replace")
            *lines, rest = text.split("\n")
            if rest:
                partial[chunk.channel] = rest
            for line in lines:
                conn.stderr_tail.append(line)
                log.info("plugin %s (%s): %s", conn.name, names.get(chunk.channel, "stdio"), line)
    except grpc.aio.AioRpcError as err:
        if err.code() not in quiet:
            log.debug("plugin %s: stdio stream ended: %s", conn.name, err.details())
    for channel, line in partial.items():
        log.info("plugin %s (%s): %s", conn.name, names.get(channel, "stdio"), line)


def parse_handshake(name: str, line: str) -> str:
    """The gRPC target from go-plugin's handshake line; a clear error for anything else."""
    parts = line.strip().split("|")
    if len(parts) < 4:
        raise HostEnvironmentError(f"plugin {name}: bad handshake line {line.strip()[:200]!r}")
    core, app, network, addr = parts[:4]
    if core != str(CORE_PROTOCOL_VERSION):
        raise HostEnvironmentError(
            f"plugin {name}: version mismatch: go-plugin core protocol {core!r}, "
            f"devicectl speaks {CORE_PROTOCOL_VERSION}"
        )
    if app != str(APP_PROTOCOL_VERSION):
        raise HostEnvironmentError(
            f"plugin {name}: version mismatch: plugin protocol version {app!r}, "
            f"Nomad device plugins and devicectl use {APP_PROTOCOL_VERSION}"
        )
    if len(parts) >= 5 and parts[4] and parts[4] != "grpc":
        raise HostEnvironmentError(f"plugin {name}: speaks {parts[4]!r}; only grpc plugins are supported")
    if network == "unix":
        return f"unix:{addr}"
    if network == "tcp":
        return addr
    raise HostEnvironmentError(f"plugin {name}: unknown network type {network!r} in its handshake")


async def _launch(spec: ExternalPlugin) -> Connection:
    env = {
        **os.environ,
        **spec.env,
        MAGIC_COOKIE_KEY: MAGIC_COOKIE_VALUE,
        "PLUGIN_PROTOCOL_VERSIONS": str(APP_PROTOCOL_VERSION),
    }
    env.pop("PLUGIN_CLIENT_CERT", None)  # we dial without TLS: no go-plugin AutoMTLS from an outer host
    try:
        proc = await asyncio.create_subprocess_exec(
            *spec.command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,  # our signals (Ctrl-C) are not the plugin's
        )
    except OSError as exc:
        raise HostEnvironmentError(
            f"plugin {spec.label}: cannot start {spec.command[0]!r}: {exc.strerror}"
        ) from None
    assert proc.stdout is not None and proc.stderr is not None
    tail: collections.deque[str] = collections.deque(maxlen=20)
    label = [spec.label]  # renamed after PluginInfo; the drains read it per line
    drains = [asyncio.create_task(_drain(proc.stderr, label, tail))]
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), spec.handshake_timeout)).decode(
            errors="replace"
        )
        if not line:
            status = await proc.wait()
            await asyncio.sleep(0.05)  # let the stderr drain catch the last words
            said = f": {tail[-1]}" if tail else ""
            raise HostEnvironmentError(
                f"plugin {spec.label}: exited with status {status} before its handshake{said}"
            )
        target = parse_handshake(spec.label, line)
    except BaseException as exc:
        await _reap(proc)
        for task in drains:
            task.cancel()
        if isinstance(exc, TimeoutError):
            raise HostEnvironmentError(
                f"plugin {spec.label}: never announced itself "
                f"(no handshake line within {spec.handshake_timeout:g} s)"
            ) from None
        raise
    drains.append(asyncio.create_task(_drain(proc.stdout, label, tail)))
    channel = grpc.aio.insecure_channel(target)
    conn = Connection(spec.label, target, channel, base_pb2.PluginInfoResponse(), "", proc, tail, drains)
    conn.label = label
    return conn


async def connect(spec: ExternalPlugin, *, config: Mapping[str, Any] | None = None) -> Connection:
    """Start or dial the plugin, then health-check and negotiate. Raises HostEnvironmentError.

    A plugin that fails negotiation is asked to shut down before it is killed, so it can remove
    its socket (go-plugin's `Kill`)."""
    if spec.command:
        conn = await _launch(spec)
    else:
        channel = grpc.aio.insecure_channel(spec.address.replace("unix:///", "unix:/", 1))
        conn = Connection(spec.label, spec.address, channel, base_pb2.PluginInfoResponse(), "")
    try:
        await _negotiate(conn, spec, dict(spec.config if config is None else config))
    except BaseException:
        await conn.close(graceful=True)
        raise
    return conn


async def _can_plan(conn: Connection, timeout: float) -> bool:
    """Whether the plugin vouches that it honours a dry run (a plugin built without the
    Capabilities RPC, such as one in another language, does not: UNIMPLEMENTED)."""
    try:
        answer = await conn.power.Capabilities(power_pb2.CapabilitiesRequest(), timeout=timeout)
    except grpc.aio.AioRpcError as err:
        if err.code() is grpc.StatusCode.UNIMPLEMENTED:
            return False
        raise
    return bool(answer.dry_run)


async def _negotiate(conn: Connection, spec: ExternalPlugin, config: Mapping[str, Any]) -> None:
    timeout = spec.handshake_timeout
    try:
        await asyncio.wait_for(conn.channel.channel_ready(), timeout)
    except TimeoutError:
        raise HostEnvironmentError(
            f"plugin {conn.name}: cannot connect to {conn.target} within {timeout:g} s"
        ) from None
    if not await conn.healthy(timeout):
        raise HostEnvironmentError(f"plugin {conn.name}: health check of service 'plugin' is not SERVING")
    conn.stdio_drain()
    try:
        conn.info = await conn.base.PluginInfo(base_pb2.PluginInfoRequest(), timeout=timeout)
        if not spec.name and conn.info.name:  # `plugin launch`: the plugin's own name from here on
            conn.rename(conn.info.name)
        if conn.info.type != base_pb2.DEVICE:
            raise HostEnvironmentError(
                f"plugin {conn.name}: is a {base_pb2.PluginType.Name(conn.info.type)} plugin"
            )
        common = [v for v in API_VERSIONS if v in conn.info.plugin_api_versions]
        if not common:
            raise HostEnvironmentError(
                f"plugin {conn.name}: version mismatch: plugin speaks API "
                f"{', '.join(conn.info.plugin_api_versions) or 'none'}, devicectl {', '.join(API_VERSIONS)}"
            )
        conn.api_version = common[0]
        # as a Nomad client does: decode the operator's config with the plugin's own spec
        # (defaults, types, required), then send every attribute as cty's msgpack would
        schema = await conn.base.ConfigSchema(base_pb2.ConfigSchemaRequest(), timeout=timeout)
        try:
            decoded = decode_config(ConfigSpec.from_pb(schema.spec), config)
        except InvalidRequestError as exc:
            raise HostEnvironmentError(f"plugin {conn.name}: {exc.message}") from None
        await conn.base.SetConfig(
            base_pb2.SetConfigRequest(msgpack_config=encode_config(decoded), plugin_api_version=common[0]),
            timeout=timeout,
        )
        conn.dry_run = await _can_plan(conn, timeout)
    except grpc.aio.AioRpcError as err:
        raise HostEnvironmentError(f"plugin {conn.name}: negotiation failed: {err.details()}") from None
