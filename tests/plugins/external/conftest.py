"""Fixtures for out-of-process plugins: serve commands, inventory files with [[plugin]] tables, and
a real controller (real gRPC port, SQLite, topology sink) that loads them."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import grpc
import pytest

from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc
from controller.app import Controller
from controller.config import Settings
from controller.delivery.sink import TopologySink
from controller.plugin_host.launch import ExternalPlugin
from controller.plugin_host.remote import RemotePlugin

ROOT = Path(__file__).resolve().parents[3]
#: the child needs the repository on its path for test plugins (tests.memory_plugin)
CHILD_ENV = {"PYTHONPATH": str(ROOT)}
MEMORY = "tests.memory_plugin:MemoryPlugin"


def serve_command(name: str) -> list[str]:
    return [sys.executable, "-m", "controller", "plugin", "serve", name]


def toml_value(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)  # strings, numbers, booleans and lists of them read the same in TOML


def plugin_table(name: str, command: list[str], **keys: Any) -> str:
    lines = ["[[plugin]]", f"name = {toml_value(name)}", f"command = {toml_value(command)}"]
    lines += [f"{k} = {toml_value(v)}" for k, v in {"env": CHILD_ENV, **keys}.items()]
    return "\n".join(lines) + "\n"


def device_table(device_id: str, plugin: str, **keys: Any) -> str:
    lines = ["[[device]]", f"id = {toml_value(device_id)}", f"plugin = {toml_value(plugin)}"]
    lines += [f"{k} = {toml_value(v)}" for k, v in keys.items()]
    return "\n".join(lines) + "\n"


def spec(name: str, command: list[str], **kw: Any) -> ExternalPlugin:
    return ExternalPlugin(name=name, command=tuple(command), env=CHILD_ENV, **kw)


@pytest.fixture
async def remote() -> AsyncIterator[Callable[..., Awaitable[RemotePlugin]]]:
    """Factory: a started (supervised) RemotePlugin, closed at teardown."""
    started: list[RemotePlugin] = []

    async def start(plugin_spec: ExternalPlugin, **kw: Any) -> RemotePlugin:
        plugin = RemotePlugin(plugin_spec, **kw)
        await plugin.start()
        started.append(plugin)
        return plugin

    yield start
    for plugin in started:
        await plugin.close()


class Running:
    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{controller.port}")
        self.stub = devicecontroller_pb2_grpc.DeviceControllerStub(self.channel)


@pytest.fixture
async def controller(sink: TopologySink, tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Running]]]:
    """Factory: a controller started from an inventory file (so [[plugin]] tables are read)."""
    started: list[Running] = []

    async def start(inventory: Path, **overrides: Any) -> Running:
        settings = Settings(
            **{
                "listen": "127.0.0.1:0",
                "database_url": f"sqlite:///{tmp_path}/devicectl.db",
                "callback": sink.address,
                "inventory": str(inventory),
                "auto_upgrade": True,
                "instance_id": "ext-" + uuid.uuid4().hex[:6],
                "delivery_max_backoff": 0.5,
                "shutdown_grace": 2.0,
                **overrides,
            }
        )
        c = Controller(settings)
        await c.start()
        running = Running(c)
        started.append(running)
        return running

    yield start
    for running in started:
        await running.channel.close()
        await running.controller.stop(grace=1.0)
