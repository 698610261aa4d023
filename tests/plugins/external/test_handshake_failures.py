"""Handshake failures: each gives one clear error, leaves no process behind and no request stuck."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from controller import translate
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.delivery.sink import TopologySink
from controller.plugin_host.launch import connect, parse_handshake
from plugins.base import HostEnvironmentError
from plugins.base.serving import MAGIC_COOKIE_KEY
from tests.plugins.external.conftest import ROOT, device_table, plugin_table, serve_command, spec

R = pb.DeviceControllerRequest


def fake_plugin(tmp_path: Path, body: str) -> list[str]:
    """A command running `body` after writing its pid (to prove it was reaped)."""
    script = tmp_path / "fake_plugin.py"
    script.write_text(
        f"import os, sys, time\nopen({str(tmp_path / 'pid')!r}, 'w').write(str(os.getpid()))\n{body}\n"
    )
    return [sys.executable, str(script)]


def assert_gone(tmp_path: Path) -> None:
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("1|3|unix|/nowhere.sock|grpc", "version mismatch: plugin protocol version '3'"),
        ("2|2|unix|/nowhere.sock|grpc", "version mismatch: go-plugin core protocol '2'"),
        ("1|2|tcp|127.0.0.1:1|netrpc", "speaks 'netrpc'"),
        ("hello", "bad handshake line"),
    ],
)
async def test_a_bad_handshake_line_is_refused(tmp_path: Path, line: str, message: str) -> None:
    command = fake_plugin(tmp_path, f"print({line!r}, flush=True)\ntime.sleep(60)")
    with pytest.raises(HostEnvironmentError, match=message):
        await connect(spec("fake", command))
    assert_gone(tmp_path)


async def test_a_plugin_that_never_announces_is_killed(tmp_path: Path) -> None:
    command = fake_plugin(tmp_path, "time.sleep(60)")
    with pytest.raises(
        HostEnvironmentError, match=r"never announced itself \(no handshake line within 1 s\)"
    ):
        await connect(spec("silent", command, handshake_timeout=1.0))
    assert_gone(tmp_path)


async def test_a_plugin_that_announces_but_does_not_serve_is_refused(tmp_path: Path) -> None:
    command = fake_plugin(tmp_path, "print('1|2|tcp|127.0.0.1:9|grpc', flush=True)\ntime.sleep(60)")
    with pytest.raises(HostEnvironmentError, match=r"cannot connect to 127\.0\.0\.1:9"):
        await connect(spec("liar", command, handshake_timeout=1.0))
    assert_gone(tmp_path)


def test_serve_refuses_to_run_without_the_magic_cookie() -> None:
    env = {k: v for k, v in os.environ.items() if k != MAGIC_COOKIE_KEY}
    env["PYTHONPATH"] = str(ROOT)
    result = subprocess.run(
        serve_command("filedevices"), env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 1
    assert result.stdout == "", "nothing may reach stdout: it carries the handshake"
    assert f"they set {MAGIC_COOKIE_KEY}" in result.stderr and "--manual" in result.stderr
    assert "Traceback" not in result.stderr


async def test_the_host_reports_a_plugin_that_refused_to_start() -> None:
    command = ["env", "-u", MAGIC_COOKIE_KEY, *serve_command("filedevices")]
    with pytest.raises(
        HostEnvironmentError, match=r"exited with status 1 before its handshake: error: this is"
    ):
        # `env -u` plays a host that does not set the cookie
        await connect(spec("nocookie", command))


async def test_a_config_the_plugin_rejects_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(
        HostEnvironmentError, match=r"negotiation failed: dir: '/no/such/dir' is not a directory"
    ):
        await connect(spec("files", serve_command("filedevices"), config={"dir": "/no/such/dir"}))


def test_handshake_targets() -> None:
    assert parse_handshake("p", "1|2|unix|/run/p.sock|grpc\n") == "unix:/run/p.sock"
    assert parse_handshake("p", "1|2|tcp|127.0.0.1:4000|grpc") == "127.0.0.1:4000"
    with pytest.raises(HostEnvironmentError, match="unknown network type 'udp'"):
        parse_handshake("p", "1|2|udp|x|grpc")


async def test_no_request_is_stuck_behind_a_plugin_that_cannot_start(
    controller, sink: TopologySink, tmp_path: Path
) -> None:
    inventory = tmp_path / "inventory.toml"
    command = fake_plugin(tmp_path, "time.sleep(60)")
    inventory.write_text(
        plugin_table("filedevices", command, handshake_timeout=1.0) + device_table("f1", "filedevices")
    )
    h = await controller(inventory)
    for rid in ("a", "b"):
        await h.stub.SendDeviceRequest(R(device="f1", request_id=rid, ping=R.PingRequest()))
    await sink.wait_for({"a", "b"}, timeout=60)
    for rid in ("a", "b"):
        ok, error = translate.success_of(sink.unique()[rid])
        assert not ok and "plugin filedevices: never announced itself" in error, error
    assert set(sink.counts.values()) == {1}
