"""The command line over mutual TLS: `certs init`, `serve` and `topology-sink` with TLS flags, and
client commands with `--ca-cert/--cert/--key` before or after the command, as separate processes."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controller.cli.test_serve_and_send import ENV, ROOT, devicectl, free_port, wait_port


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    out = devicectl(
        "--json", "certs", "init", "--dir", str(tmp_path / "pki"), "--name", "topology",
        "--name", "operator", "--name", "controller",
    ).stdout  # fmt: skip
    made = json.loads(out)
    assert set(made["clients"]) == {"topology", "operator", "controller"}
    for client in made["clients"].values():
        assert stat.S_IMODE(Path(client["key"]).stat().st_mode) == 0o600
    return tmp_path / "pki"


@pytest.fixture
def secure(tmp_path: Path, pki: Path) -> Iterator[dict[str, object]]:
    inventory = tmp_path / "inventory.toml"
    inventory.write_text(
        '[[device]]\nid = "node001"\nplugin = "tests.memory_plugin:MemoryPlugin"\nmodel = "DGX_GB200"\n'
    )
    db = f"sqlite:///{tmp_path}/cli.db"
    sink_port, port = free_port(), free_port()
    record = tmp_path / "responses.jsonl"
    server_tls = ["--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server-key.pem")]
    server_tls += ["--tls-client-ca", str(pki / "ca.pem")]
    sink = subprocess.Popen(
        [sys.executable, "-m", "controller", "topology-sink", "--listen", f"127.0.0.1:{sink_port}",
         "--record", str(record), *server_tls],
        cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    serve = subprocess.Popen(
        [sys.executable, "-m", "controller", "serve", "--listen", f"127.0.0.1:{port}",
         "--database-url", db, "--auto-upgrade", "--callback", f"127.0.0.1:{sink_port}",
         "--inventory", str(inventory), *server_tls, "--roles", "topology=topology,operator=operator",
         "--callback-ca-cert", str(pki / "ca.pem"), "--callback-cert", str(pki / "controller.pem"),
         "--callback-key", str(pki / "controller-key.pem")],
        cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_port(sink_port, sink)
        wait_port(port, serve)
        yield {"server": f"127.0.0.1:{port}", "record": record}
    finally:
        for proc in (serve, sink):
            proc.terminate()
            proc.wait(20)


def _as(pki: Path, name: str) -> list[str]:
    return [
        "--ca-cert",
        str(pki / "ca.pem"),
        "--cert",
        str(pki / f"{name}.pem"),
        "--key",
        str(pki / f"{name}-key.pem"),
    ]


def test_client_commands_over_mutual_tls(secure: dict[str, object], pki: Path) -> None:
    server = str(secure["server"])
    # TLS flags before the command ...
    out = devicectl("--server", server, *_as(pki, "topology"), "send", "ping", "--device", "node001",
                    "--request-id", "mtls-1").stdout  # fmt: skip
    assert "accepted request_id=mtls-1" in out
    # ... and after it
    listed = devicectl("--server", server, "--json", "devices", "list", *_as(pki, "operator")).stdout
    assert "node001" in listed
    record = Path(str(secure["record"]))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (record.exists() and "mtls-1" in record.read_text()):
        time.sleep(0.1)
    assert "mtls-1" in record.read_text()  # delivered to the mTLS-only sink


def test_refusals_are_one_clear_line(secure: dict[str, object], pki: Path) -> None:
    server = str(secure["server"])
    denied = devicectl("--server", server, *_as(pki, "operator"), "send", "ping", "--device", "node001",
                       check=False)  # fmt: skip
    assert denied.returncode == 2 and "PERMISSION_DENIED" in denied.stdout + denied.stderr
    assert "operator" in denied.stdout + denied.stderr
    plain = devicectl("--server", server, "devices", "list", check=False)  # no TLS at all
    assert plain.returncode == 2 and "UNAVAILABLE" in plain.stdout + plain.stderr
    remote = devicectl("--server", "192.0.2.1:50051", "devices", "list", check=False)
    assert remote.returncode == 2 and "not a loopback address" in remote.stdout + remote.stderr
    for result in (denied, plain, remote):
        assert "Traceback" not in result.stdout + result.stderr


def test_serve_refuses_plaintext_on_a_public_address(tmp_path: Path) -> None:
    result = devicectl("serve", "--listen", "0.0.0.0:0", "--database-url", f"sqlite:///{tmp_path}/x.db",
                       "--auto-upgrade", check=False)  # fmt: skip
    assert result.returncode == 2
    assert "not a loopback address" in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_wait_with_a_topology_only_certificate_says_the_request_was_accepted(
    secure: dict[str, object], pki: Path
) -> None:
    server = str(secure["server"])
    sent = devicectl("--server", server, *_as(pki, "topology"), "send", "ping", "--device", "node001",
                     "--request-id", "mtls-wait", "--wait", check=False)  # fmt: skip
    # it printed only PERMISSION_DENIED for WaitRequest, exit 2: an operator would send it again
    assert sent.returncode == 1, sent.stdout + sent.stderr
    assert "accepted request_id=mtls-wait" in sent.stdout
    err = " ".join(sent.stderr.split())
    assert "mtls-wait was accepted and runs on, but cannot be waited on: this certificate may not" in err
    assert "do not send it again" in err and "PERMISSION_DENIED" in err and "Traceback" not in err
    as_json = devicectl("--server", server, *_as(pki, "topology"), "--json", "send", "ping", "--device",
                        "node001", "--request-id", "mtls-wait-2", "--wait", check=False)  # fmt: skip
    assert as_json.returncode == 1
    data = json.loads(as_json.stdout)
    assert data["request_id"] == "mtls-wait-2" and data["accepted"] is True and data["waited"] is False
    record = Path(str(secure["record"]))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (record.exists() and "mtls-wait-2" in record.read_text()):
        time.sleep(0.1)
    assert "mtls-wait-2" in record.read_text()  # accepted, run and delivered
