"""The command line as the README shows it: serve + topology-sink + send --wait, over real ports."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.ports import free_port

ROOT = Path(__file__).resolve().parents[3]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}


def devicectl(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "controller", *args],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"devicectl {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return result


def wait_port(port: int, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"process exited early: {proc.stdout.read() if proc.stdout else ''}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"port {port} did not open")


@pytest.fixture
def running(tmp_path: Path) -> Iterator[dict[str, object]]:
    inventory = tmp_path / "inventory.toml"
    inventory.write_text(
        '[[device]]\nid = "node001"\nplugin = "tests.memory_plugin:MemoryPlugin"\nmodel = "DGX_GB200"\n'
    )
    db = f"sqlite:///{tmp_path}/cli.db"
    devicectl("db", "upgrade", "--database-url", db)
    sink_port, port = free_port(), free_port()
    record = tmp_path / "responses.jsonl"
    sink = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "controller",
            "topology-sink",
            "--listen",
            f"127.0.0.1:{sink_port}",
            "--record",
            str(record),
        ],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "controller",
            "serve",
            "--listen",
            f"127.0.0.1:{port}",
            "--database-url",
            db,
            "--callback",
            f"127.0.0.1:{sink_port}",
            "--inventory",
            str(inventory),
        ],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_port(sink_port, sink)
        wait_port(port, serve)
        yield {"server": f"127.0.0.1:{port}", "record": record, "sink": sink}
    finally:
        for proc in (serve, sink):
            proc.terminate()
            proc.wait(20)


def test_send_gpu_policies_and_wait_prints_the_response(running) -> None:
    server = str(running["server"])
    out = devicectl(
        "--server",
        server,
        "send",
        "gpu-policies",
        "--device",
        "node001",
        "--gpu",
        "0=500",
        "--gpu",
        "1=450",
        "--request-id",
        "cli-1",
        "--wait",
    ).stdout
    assert "cli-1" in out and "ok" in out
    assert "GPU 0" in out and "500 W" in out and "450 W" in out
    shown = json.loads(devicectl("--server", server, "--json", "requests", "show", "cli-1").stdout)
    assert shown["outcome"] == "ok" and shown["device"] == "node001"
    device = json.loads(devicectl("--server", server, "--json", "devices", "show", "node001").stdout)
    assert device["state_json"]["gpus"] == {  # JSON, not protobuf's base64 (issue 13)
        "0": 500.0,
        "1": 450.0,
    }
    listed = devicectl("--server", server, "requests", "list").stdout
    assert "cli-1" in listed and "gpu_policies_update" in listed
    for _ in range(300):  # the sink prints and records what it received
        lines = (
            Path(str(running["record"])).read_text().splitlines()
            if Path(str(running["record"])).exists()
            else []
        )
        if lines:
            break
        time.sleep(0.1)
    assert json.loads(lines[0])["requestId"] == "cli-1"


def test_send_rejects_bad_input_with_the_field_name(running, tmp_path: Path) -> None:
    local = devicectl(
        "--server",
        str(running["server"]),
        "send",
        "gpu-policies",
        "--device",
        "node001",
        "--gpu",
        "0=-5",
        check=False,
    )
    assert local.returncode == 2 and "non-negative" in local.stderr
    request = {
        "device": "node001",
        "requestId": "bad-1",
        "gpuPoliciesUpdate": {
            "gpuPolicyAction": "SET_POLICY",
            "gpuPolicies": {"policies": [{"gpuId": 0, "powerLimit": {"watts": -5}}]},
        },
    }
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(request))
    remote = devicectl("--server", str(running["server"]), "send", "--file", str(path), check=False)
    assert remote.returncode == 2
    assert "INVALID_ARGUMENT" in remote.stderr
    assert "gpu_policies_update.gpu_policies.policies[0].power_limit.watts" in remote.stderr


def test_serve_refuses_an_outdated_schema_and_says_what_to_run(tmp_path: Path) -> None:
    result = devicectl(
        "serve", "--listen", "127.0.0.1:0", "--database-url", f"sqlite:///{tmp_path}/new.db", check=False
    )
    assert result.returncode == 2
    assert "devicectl db upgrade" in result.stdout + result.stderr


def test_plugins_lists_the_installed_plugins() -> None:
    out = json.loads(devicectl("--json", "plugins").stdout)
    names = {p["name"] for p in out}
    assert {"redfish", "nvml"} <= names
    assert all(not p["version"].startswith("unloadable") for p in out)


def test_print_config_masks_passwords() -> None:
    out = json.loads(
        devicectl("serve", "--print-config", "--database-url", "postgresql+psycopg://u:hunter2@db/x").stdout
    )
    assert "hunter2" not in json.dumps(out) and out["database_url"].startswith("postgresql+psycopg://u:***@")


def test_old_send_form_and_yaml_against_a_running_controller(running) -> None:
    """Flags before the kind (the argparse form) still send, with a warning; -o yaml anywhere."""
    server = str(running["server"])
    result = devicectl(
        "--server", server, "send", "--device", "node001", "--request-id", "cli-old", "ping", "--wait"
    )
    assert "ping" in result.stdout and "cli-old" in result.stdout and "ok" in result.stdout
    assert result.stderr.startswith("warning: flags before the kind are deprecated")
    shown = devicectl("--server", server, "requests", "show", "cli-old", "-o", "yaml").stdout
    assert 'request_id: "cli-old"' in shown and 'outcome: "ok"' in shown
