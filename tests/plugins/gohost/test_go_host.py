"""Our plugins under HashiCorp's real go-plugin host, loaded the way a Nomad client loads an
external device plugin (see host/main.go for each step and the Nomad v1.6.5 file it follows):
the loader's PluginInfo/ConfigSchema/SetConfig on an instance it then kills, the device
manager's own instance with Fingerprint (validated by Nomad's rules), Stats and Reserve,
reattach, Ctrl-C to the process group, and Kill.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bmcsim import SimulatorFleet
from plugins.base.plugin_config import decode_config, encode_config
from plugins.base.serving import config_spec
from plugins.filedevices import FileDevicesPlugin
from plugins.nvml import NvmlPlugin
from plugins.nvml.testing import FakeNvml
from plugins.redfish import RedfishPlugin
from tests.plugins.gohost import build
from tests.plugins.gohost.conftest import CHILD_ENV, run_host, serve_command
from tests.plugins.gohost.serve_fake_nvml import MODELS

FAKE_NVML = Path(__file__).with_name("serve_fake_nvml.py")


def check_lifecycle(report: dict[str, Any], name: str, *, reattach: bool = True) -> None:
    """What every plugin must get right, whatever its devices."""
    assert report["errors"] == [], report["log"][-3000:]
    assert report["info"]["name"] == name and report["api_version"] == "v0.1.0"
    assert not report["fingerprint"]["problems"], "Nomad's validation rejects this fingerprint"
    assert report["loader_kill"].startswith("graceful"), "the loader's instance needed SIGKILL"
    assert report.get("reattach") == (name if reattach else None)
    assert report["stdio"] == "open"  # GRPCStdio answers (go-plugin >= 1.4 hosts call it)
    assert report["kill"].startswith("graceful"), "Kill had to SIGKILL the plugin"
    assert report["exited"] and report["socket_left"] is False


def same_bytes_as_devicectl(report: dict[str, Any], plugin: Any, given: dict[str, Any]) -> None:
    """devicectl's host sends the plugin exactly the msgpack a Nomad client sends for this config
    (the Go host encodes with HCL + cty; we decode with the same spec and encode)."""
    ours = encode_config(decode_config(config_spec(plugin), given))
    assert ours.hex() == report["msgpack_hex"]


def devices(report: dict[str, Any]) -> list[str]:
    return sorted(d for g in report["fingerprint"]["groups"] for d in g["devices"] or ())


@pytest.fixture
def files(tmp_path: Path) -> Path:
    directory = tmp_path / "devices"
    directory.mkdir()
    (directory / "a.txt").write_text("hello\n")
    (directory / "b.bin").write_bytes(b"\0" * 3000)
    return directory


@pytest.mark.parametrize("config", ["empty", "full"])
async def test_filedevices(go: build.Built, tmp_path: Path, files: Path, config: Any) -> None:
    env = {**CHILD_ENV, "DEVICECTL_FILEDEVICES_DIR": str(files)}
    given = {"dir": str(files), "list_period": 0.5} if config == "full" else {}
    report = await run_host(
        go,
        tmp_path,
        {"name": "filedevices", "command": serve_command("filedevices"), "env": env, "config": given},
    )
    check_lifecycle(report, "filedevices")
    assert report["sent_keys"] == ["dir", "list_period"]  # every attribute, as cty sends it
    same_bytes_as_devicectl(report, FileDevicesPlugin(), given)
    assert devices(report) == ["a.txt", "b.bin"]
    assert {g["units"]["total_size"] for g in report["fingerprint"]["groups"]} == {"KiB"}
    assert report["stats"]["devices"] == 2
    assert report["reserve"]["code"] == "OK" and report["reserve"]["mounts"] == 1


@pytest.mark.parametrize("config", ["empty", "full"])
async def test_nvml_with_a_fake_node(go: build.Built, tmp_path: Path, config: str) -> None:
    fake = FakeNvml.node(*MODELS)
    gpu0, gpu1 = fake.gpu(0).uuid, fake.gpu(1).uuid
    given = (
        {"enabled": True, "ignored_gpu_ids": [gpu1], "fingerprint_period": "1m", "stream_timeout": 5}
        if config == "full"
        else {}
    )
    command = [serve_command("x")[0], str(FAKE_NVML)]
    report = await run_host(
        go, tmp_path, {"name": "nvml", "command": command, "env": CHILD_ENV, "config": given}
    )
    check_lifecycle(report, "nvml")
    same_bytes_as_devicectl(report, NvmlPlugin(), given)
    assert report["sent_keys"] == ["enabled", "fingerprint_period", "ignored_gpu_ids", "stream_timeout"]
    assert devices(report) == ([gpu0] if config == "full" else sorted([gpu0, gpu1]))
    (group,) = report["fingerprint"]["groups"]
    assert group["units"]["memory"] == "MiB" and group["units"]["power_limit_max"] == "W"
    assert report["stats"]["devices"] == (1 if config == "full" else 2)
    assert report["reserve"]["code"] == "OK"
    assert report["reserve"]["envs"] == {"NVIDIA_VISIBLE_DEVICES": gpu0}


@pytest.fixture
async def bmc(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SimulatorFleet]:
    fleet = SimulatorFleet(cert_dir=tmp_path_factory.mktemp("bmc-tls"), n=1, model="gb200")
    await fleet.start()
    try:
        yield fleet
    finally:
        await fleet.stop()


@pytest.mark.parametrize("config", ["empty", "full"])
async def test_redfish_against_the_simulator(
    go: build.Built, tmp_path: Path, bmc: SimulatorFleet, config: str
) -> None:
    given: dict[str, Any] = {}
    if config == "full":
        (tmp_path / "bmc.pw").write_text(bmc.bmcs[0].password)
        given = {
            "endpoints": bmc.urls,
            "username": bmc.bmcs[0].username,
            "password_file": str(tmp_path / "bmc.pw"),
            "ca_bundle": str(bmc.ca_bundle),
            "concurrency": 2,
            "read_timeout": 20,
        }
    report = await run_host(
        go,
        tmp_path,
        {"name": "redfish", "command": serve_command("redfish"), "env": CHILD_ENV, "config": given},
    )
    check_lifecycle(report, "redfish")
    same_bytes_as_devicectl(report, RedfishPlugin(), given)
    assert "endpoints" in report["sent_keys"] and "password_file" in report["sent_keys"]
    if config == "empty":  # no BMCs configured: a valid, empty fingerprint
        assert devices(report) == [] and report["stats"]["devices"] == 0
    else:
        assert len(devices(report)) >= 1 and report["stats"]["devices"] >= 1
    # a BMC-managed node has nothing to mount into a container: Reserve says so, clearly
    assert report["reserve"]["code"] == "Unimplemented", report["reserve"]
    assert bmc.bmcs[0].password not in report["log"]


async def test_ctrl_c_to_the_hosts_process_group_leaves_the_plugin_to_the_host(
    go: build.Built, tmp_path: Path, files: Path
) -> None:
    """go-plugin's server ignores SIGINT: plugins run in the host's process group, and a Ctrl-C
    on a foreground Nomad agent must not kill them before the agent shuts them down."""
    run = {
        "name": "filedevices",
        "command": serve_command("filedevices"),
        "env": CHILD_ENV,
        "config": {"dir": str(files)},
    }
    report = await run_host(go, tmp_path, run, interrupt=True)
    check_lifecycle(report, "filedevices")
    assert report["interrupt"] == "the plugin kept serving"


async def test_go_plugins_auto_mtls(go: build.Built, tmp_path: Path, files: Path) -> None:
    """A host with AutoMTLS on sends its certificate in PLUGIN_CLIENT_CERT and dials with TLS,
    trusting only the certificate the plugin returns in its handshake line (go-plugin's mtls.go)."""
    run = {
        "name": "filedevices",
        "command": serve_command("filedevices"),
        "env": CHILD_ENV,
        "config": {"dir": str(files)},
        "auto_mtls": True,
    }
    report = await run_host(go, tmp_path, run)
    check_lifecycle(report, "filedevices", reattach=False)  # 1.0.1's ReattachConfig has no TLS
    assert devices(report) == ["a.txt", "b.bin"] and report["reserve"]["code"] == "OK"
