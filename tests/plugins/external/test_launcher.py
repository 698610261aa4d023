"""`devicectl plugin launch` against the example plugin, as a plugin author or operator would run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.plugins.external.conftest import ROOT

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
SERVE = f"{sys.executable} -m controller plugin serve filedevices"


def launch(directory: Path, *args: str, config: dict[str, object] | None = None) -> list[str]:
    conf = json.dumps(config if config is not None else {"dir": str(directory), "list_period": 0.1})
    return [
        sys.executable,
        "-m",
        "controller",
        "plugin",
        "launch",
        "--command",
        SERVE,
        "--config",
        conf,
        *args,
    ]


def run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=120, check=False)


def test_fingerprint_updates_stream_as_files_appear(tmp_path: Path) -> None:
    (tmp_path / "a.dat").write_text("1\n2\n")
    proc = subprocess.Popen(
        launch(tmp_path, "--json", "fingerprint", "--count", "2"),
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    first = json.loads(proc.stdout.readline())
    assert [d["id"] for g in first["groups"] for d in g["devices"]] == ["a.dat"]
    (tmp_path / "b.dat").write_text("")
    second = json.loads(proc.stdout.readline())
    assert sorted(d["id"] for g in second["groups"] for d in g["devices"]) == ["a.dat", "b.dat"]
    assert proc.wait(timeout=60) == 0


def test_stats_reserve_schema_and_a_power_operation(tmp_path: Path) -> None:
    (tmp_path / "a.dat").write_text("1\n2\n")
    result = run(launch(tmp_path, "--json", "stats", "--interval", "0.1", "--count", "2"))
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == 2
    stats = lines[0]["groups"][0]["instance_stats"]["a.dat"]
    assert (
        stats["summary"]["int_numerator"] == 4 and stats["stats"]["attributes"]["lines"]["int_numerator"] == 2
    )

    result = run(launch(tmp_path, "--json", "reserve", "a.dat"))
    assert result.returncode == 0, result.stderr
    reserved = json.loads(result.stdout)
    assert reserved["mounts"] == [
        {"task_path": "/dev/files/a.dat", "host_path": str((tmp_path / "a.dat").resolve()), "read_only": True}
    ]

    result = run(launch(tmp_path, "schema"))  # a table for people
    assert result.returncode == 0 and "list_period" in result.stdout and "number" in result.stdout

    request = tmp_path / "ping.json"
    request.write_text('{"retry_count": 2}')
    result = run(
        launch(
            tmp_path,
            "--json",
            "op",
            "ping",
            "--device",
            "a.dat",
            "--request",
            f"@{request}",
            "--state",
            '{"pings": 41}',
        )
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "result": {"ok": True, "error": ""},
        "state": {"pings": 42},
        "reach_error": "",
    }


def test_errors_are_one_line_and_name_the_problem(tmp_path: Path) -> None:
    result = run(launch(tmp_path, "reserve", "nope.dat"))
    assert result.returncode == 1
    assert "no such file device(s): nope.dat" in result.stderr and "Traceback" not in result.stderr

    result = run(launch(tmp_path, "info", config={"dir": str(tmp_path / "absent")}))
    assert result.returncode == 1 and "is not a directory" in result.stderr

    result = run(launch(tmp_path, "op", "std_metrics", "--device", "x"))
    assert result.returncode == 1 and "standard metrics are not supported" in result.stderr

    result = run(launch(tmp_path, "op", "ping", "--device", "x", "--request", '{"retry_count": "two"}'))
    assert result.returncode == 1 and "retry_count: expected int" in result.stderr


def test_launch_dials_a_plugin_served_by_hand(tmp_path: Path) -> None:
    sock = tmp_path / "files.sock"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "controller",
            "plugin",
            "serve",
            "filedevices",
            "--manual",
            "--address",
            f"unix:{sock}",
        ],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == f"1|2|unix|{sock}|grpc"
        command = [
            sys.executable,
            "-m",
            "controller",
            "plugin",
            "launch",
            "--address",
            f"unix:{sock}",
            "--config",
            json.dumps({"dir": str(tmp_path)}),
            "--json",
            "info",
        ]
        result = run(command)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["negotiated"] == "v0.1.0"
        assert server.poll() is None, "dialing a plugin must not stop it"
    finally:
        server.terminate()
        assert server.wait(timeout=30) == 0


def test_sigterm_to_launch_shuts_its_plugin_down(tmp_path: Path) -> None:
    """A SIGTERM (systemd, kill, a CI timeout) used to end `plugin launch` at once and leave the
    plugin process it started running, orphaned."""
    import signal
    import time

    proc = subprocess.Popen(
        launch(tmp_path, "--json", "stats", "--interval", "0.2"),
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # the first update: the plugin is up
        children = _children(proc.pid)
        assert children, "plugin launch started no plugin process"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(pid) for pid in children):
            time.sleep(0.05)
        assert not [pid for pid in children if _alive(pid)], "the plugin process outlived launch"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has exited (its parent, gone, cannot reap it)
