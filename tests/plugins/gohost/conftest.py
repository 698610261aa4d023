"""The Go host and Go plugin, built once per test session with HashiCorp's go-plugin (Debian's
packages); the tests skip, saying what to install, where the Go toolchain is missing."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.plugins.gohost import build

ROOT = Path(__file__).resolve().parents[3]
CHILD_ENV = {"PYTHONPATH": str(ROOT)}


def serve_command(name: str) -> list[str]:
    return [sys.executable, "-m", "controller", "plugin", "serve", name]


@pytest.fixture(scope="session")
def go(tmp_path_factory: pytest.TempPathFactory) -> build.Built:
    why = build.missing()
    if why is not None:
        if os.environ.get("CI"):  # .ci/run installs them: missing there is a failure
            pytest.fail(f"{why}. CI must run the go-plugin tests.", pytrace=False)
        pytest.skip(why)
    try:
        return build.build(tmp_path_factory.mktemp("go"))
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"building the Go host/plugin failed: {' '.join(exc.cmd)}\n{exc.stderr[-3000:]}")


async def run_host(
    go: build.Built, tmp_path: Path, run: dict[str, Any], *, interrupt: bool = False
) -> dict[str, Any]:
    """Run the Go host on one plugin and return its report. With `interrupt`, send SIGINT to the
    host's whole process group (the host and the plugin it started) once it says READY."""
    spec = tmp_path / f"run-{run['name']}.json"
    spec.write_text(json.dumps({**run, "interrupt": interrupt}))
    proc = await asyncio.create_subprocess_exec(
        str(go.host),
        str(spec),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # its own process group, as a foreground agent in a terminal
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        lines: list[str] = []
        async with asyncio.timeout(90):
            while line := (await proc.stdout.readline()).decode():
                lines.append(line)
                if line.strip() == "READY":
                    os.killpg(proc.pid, signal.SIGINT)
            err = (await proc.stderr.read()).decode(errors="replace")
            await proc.wait()
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    assert proc.returncode == 0 and lines, f"the Go host failed ({proc.returncode}):\n{err[-3000:]}"
    report: dict[str, Any] = json.loads(lines[-1])
    report["log"] = err
    return report
