"""`devicectl agent` as its own process: SIGKILL between the stream ack and completion, restart,
every request answered exactly once in order; `devicectl sink agents` shows it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.delivery.sink import TopologySink
from tests.controller.delivery.conftest import (
    assert_exactly_once_in_order,
    ping,
    send_until_acked,
    until,
    wait_connected,
)

ROOT = Path(__file__).resolve().parents[3]


class AgentProcess:
    def __init__(self, tmp: Path, server: str) -> None:
        inventory = tmp / "inventory.toml"
        inventory.write_text(
            '[[device]]\nid = "node000"\nplugin = "tests.memory_plugin:MemoryPlugin"\n'
            'model = { Model = "DGX_GB200", delay = 3.0 }\n'
        )
        config = tmp / "agent.toml"
        config.write_text("agent_reconnect_max = 0.5\ndelivery_probe_max_interval = 0.5\n")
        self.args = [
            sys.executable,
            "-m",
            "controller",
            "agent",
            "--config",
            str(config),
            "--agent-server",
            server,
            "--agent-id",
            "rack-a",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            f"sqlite:///{tmp}/agent.db",
            "--inventory",
            str(inventory),
            "--instance-id",
            "agent-crash",
            "--auto-upgrade",
        ]
        self.env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.log = tmp / "agent.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.args, cwd=ROOT, env=self.env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT
        )

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture
def agent(tmp_path: Path, sink: TopologySink) -> Iterator[AgentProcess]:
    process = AgentProcess(tmp_path, sink.address)
    yield process
    process.terminate()


async def connected(sink: TopologySink, agent: AgentProcess) -> None:
    try:
        await wait_connected(sink, timeout=30)
    except AssertionError:
        raise AssertionError(f"agent did not connect: {agent.log.read_text()[-2000:]}") from None


async def test_sigkill_between_ack_and_completion_answers_once_after_restart(
    agent: AgentProcess, sink: TopologySink
) -> None:
    agent.start()
    await connected(sink, agent)
    await send_until_acked(sink.address, ping("node000", "k1"))
    await send_until_acked(sink.address, ping("node000", "k2"))
    await asyncio.sleep(0.3)
    agent.kill()
    assert not sink.responses, "the device takes 3 s: nothing can have completed before the kill"
    await until(lambda: not sink.agents.agents["rack-a"].connected, 10, "the sink saw the stream end")
    agent.start()
    await sink.wait_for({"k1", "k2"}, timeout=30)
    await send_until_acked(sink.address, ping("node000", "k3"))
    await sink.wait_for({"k3"}, timeout=30)
    assert_exactly_once_in_order(sink, {"node000": ["k1", "k2", "k3"]})
    assert all(r.ping.success for r in sink.responses)

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "controller",
        "--json",
        "sink",
        "agents",
        "--sink",
        sink.address,
        cwd=ROOT,
        env=agent.env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    (row,) = json.loads(out)
    assert row["agent_id"] == "rack-a" and row["connected"] and row["devices"] == ["node000"]
    assert row["responses"] == 3 and row["queued"] == 0
