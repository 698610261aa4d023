"""Capture a simulated BMC of every model, replay it, and get the same plugin results as the original."""

from __future__ import annotations

import json
import re
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bmcsim import (
    DEFAULT_PASSWORD,
    DPS_ALLOW_LIST,
    SimulatedBmc,
    SimulatorFleet,
    ensure_tls_files,
)
from bmcsim.capture import DOC_HOST, DOC_IPV4, DOC_IPV6, DOC_MAC, CaptureOptions, capture, scrub
from plugins.base import run_operation
from tests.plugins.redfish.harness import Harness, model_json
from tests.plugins.redfish.platforms.test_every_kind_on_every_model import MODELS, requests, succeeded

_FAST = CaptureOptions(rate=2000.0)


async def _capture(bmc: SimulatedBmc, harness: Harness, out: Path) -> None:
    ctx = harness.fleet.client_ssl_context()
    await capture(bmc.url, bmc.username, bmc.password, out, ssl_context=ctx, options=_FAST)


async def _results(
    harness: Harness, bmc: SimulatedBmc, model: dict[str, Any], limits: Any
) -> dict[Any, bool]:
    results = {}
    for kind, request in requests(limits):
        outcome = await run_operation(harness.plugin, kind, harness.ctx(bmc, model=model), request)
        if outcome.state is not None:
            harness.states[bmc.index] = outcome.state
        results[kind] = succeeded(outcome.result)
    return results


def _scan(directory: Path, password: str) -> None:
    """No credential, serial number or address anywhere in a capture."""
    text = "\n".join(p.read_text() for p in sorted(directory.rglob("*.json")))
    assert password not in text
    assert "X-Auth-Token" not in text and "Authorization" not in text
    assert not re.search(r'"(Password|Token|Secret)[^"]*": "', text)  # credentials are null
    assert not re.search(r'SerialNumber": "(?!REDACTED")', text)
    for address in re.findall(r"\b(?:\d{1,3}\.){3}\d{1,3}\b", text):
        assert address == DOC_IPV4, address
    for mac in re.findall(r"\b[0-9A-Fa-f]{2}(?:[:-][0-9A-Fa-f]{2}){5}\b", text):
        assert mac == DOC_MAC, mac


@pytest.mark.parametrize("model", list(MODELS))
async def test_capture_replay_gives_the_same_plugin_results(
    make_harness: Callable[..., Any], tmp_path: Path, model: str
) -> None:
    spec = MODELS[model]
    async with make_harness(n=1, model=model) as original:
        bmc = original.fleet.bmcs[0]
        await _capture(bmc, original, tmp_path)
        device_model = model_json(bmc)
        expected = await _results(original, bmc, device_model, spec["policy"])
        password = bmc.password
    # the original did what the matrix says, so the comparison below is not trivially all-failed
    assert {kind for kind, ok in expected.items() if not ok} == spec["fails"]
    _scan(tmp_path, password)
    captured = json.loads((tmp_path / "capture.json").read_text())
    assert captured["resources"] > 10 and captured["session"]["token_header"]
    async with make_harness(n=1, model=f"capture:{tmp_path}") as replay:
        copy = replay.fleet.bmcs[0]
        got = await _results(replay, copy, device_model, spec["policy"])
    assert got == expected


async def test_capture_writes_nothing_and_holds_no_secret(
    make_harness: Callable[..., Any], tmp_path: Path
) -> None:
    async with make_harness(n=1, model="gb200") as harness:
        bmc = harness.fleet.bmcs[0]
        await _capture(bmc, harness, tmp_path)
        methods = {method for (method, _template) in bmc.stats.calls}
        assert methods <= {"GET", "POST", "DELETE"}
        assert [t for (m, t) in bmc.stats.calls if m == "POST"] == ["/redfish/v1/SessionService/Sessions"]
        assert bmc.stats.writes_applied == 0 and bmc.stats.open_sessions == 0
        password = bmc.password
    assembly = tmp_path / "Chassis" / "HGX_ProcessorModule_0" / "Assembly" / "index.json"
    assert json.loads(assembly.read_text())["Assemblies"][0]["SerialNumber"] == "REDACTED"
    _scan(tmp_path, password)


def test_scrub_rules() -> None:
    doc = {
        "SerialNumber": "1321922000123",
        "PartSerialNumber": "X1",
        "AssetTag": "rack 12",
        "Password": "hunter2",
        "Oem": {"Vendor": {"AuthToken": "abc", "SnmpCommunity": "public", "PrivateKey": "k"}},
        "MACAddress": "7c:c2:55:01:02:03",
        "PermanentMACAddress": "7C-C2-55-01-02-03",
        "HostName": "node17-bmc",
        "IPv4Addresses": [{"Address": "10.3.4.5", "Gateway": "10.3.4.1"}],
        "IPv6Addresses": [{"Address": "fe80::7ec2:55ff:fe01:203"}],
        "Description": "BMC at 10.3.4.5 (7c:c2:55:01:02:03)",
        "FirmwareVersion": "1.2.3.4",
        "LastUpdated": "2026-11-23T11:02:51+00:00",
        "Links": {"@odata.id": "/redfish/v1/Chassis/1"},
    }
    clean = scrub(doc)
    assert clean["SerialNumber"] == clean["PartSerialNumber"] == clean["AssetTag"] == "REDACTED"
    assert clean["Password"] is None
    assert clean["Oem"]["Vendor"] == {"AuthToken": None, "SnmpCommunity": None, "PrivateKey": None}
    assert clean["MACAddress"] == clean["PermanentMACAddress"] == DOC_MAC
    assert clean["HostName"] == DOC_HOST
    assert clean["IPv4Addresses"] == [{"Address": DOC_IPV4, "Gateway": DOC_IPV4}]
    assert clean["IPv6Addresses"] == [{"Address": DOC_IPV6}]
    assert clean["Description"] == f"BMC at {DOC_IPV4} ({DOC_MAC})"
    # not addresses: versions and times are kept
    assert clean["FirmwareVersion"] == "1.2.3.4" and clean["LastUpdated"] == doc["LastUpdated"]
    assert clean["Links"] == doc["Links"]


async def test_mockup_serves_documents_and_caps_within_their_ranges(
    make_harness: Callable[..., Any], cert_dir: Path, api: Callable[[SimulatedBmc], Any], tmp_path: Path
) -> None:
    """A DMTF-style mockup (index.json per path, no capture.json) with sessions, ETags and range checks."""
    async with make_harness(n=1, model="dmtf") as original:
        await _capture(original.fleet.bmcs[0], original, tmp_path)
    (tmp_path / "capture.json").unlink()
    node = "/redfish/v1/Chassis/1/Controls/PowerLimit"
    async with SimulatorFleet(n=1, model=f"mockup:{tmp_path}", cert_dir=cert_dir) as fleet:
        client = api(fleet.bmcs[0])
        first = await client.get(node)
        etag, high = first.headers["ETag"], first.body["AllowableMax"]
        over = await client.patch(node, {"SetPoint": high + 1})
        assert over.status == 400
        assert over.body["error"]["@Message.ExtendedInfo"][0]["MessageId"].endswith("PropertyValueOutOfRange")
        done = await client.patch(node, {"SetPoint": high}, headers={"If-Match": etag})
        assert done.status == 200 and done.body["SetPoint"] == high
        assert (await client.patch(node, {"SetPoint": high}, headers={"If-Match": etag})).status == 412
        assert (await client.patch(node, {"Bogus": 1})).status == 400
        # the simulator's own services next to the mockup's documents
        assert (await client.get("/redfish/v1/AccountService/Roles")).status == 200


def test_cli_captures_with_a_secret_and_fails_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from controller.cli import main

    out = str(tmp_path / "c")
    args = ["--url", "https://127.0.0.1:1", "--secret", "nope", "--out", out, "--secrets-dir", str(tmp_path)]
    code = main(["bmc-capture", *args])
    err = capsys.readouterr().err.strip()
    assert code == 1 and err.startswith("bmc-capture: ") and "\n" not in err and "Traceback" not in err


async def test_capture_behind_the_dps_proxy_stays_on_its_allow_list(
    make_harness: Callable[..., Any], tmp_path: Path
) -> None:
    """With the proxy's allow-list the walk never asks for a refused path, and the replay still works."""
    allow = tuple(pattern for methods, pattern in DPS_ALLOW_LIST if "GET" in methods.split(","))
    options = CaptureOptions(rate=2000.0, allow_list=allow)
    async with make_harness(n=1, model="gb200", profile="bmcweb", allow_list=DPS_ALLOW_LIST) as original:
        bmc = original.fleet.bmcs[0]
        ctx = original.fleet.client_ssl_context()
        result = await capture(
            bmc.url, bmc.username, bmc.password, tmp_path, ssl_context=ctx, options=options
        )
        assert bmc.stats.responses.get(403, 0) == 0
        device_model = model_json(bmc)
        expected = await _results(original, bmc, device_model, MODELS["gb200"]["policy"])
    assert "/redfish/v1/Systems/System_0" in result.skipped  # linked, but off the list: never requested
    async with make_harness(n=1, model=f"capture:{tmp_path}", profile="bmcweb") as replay:
        copy = replay.fleet.bmcs[0]
        assert await _results(replay, copy, device_model, MODELS["gb200"]["policy"]) == expected


def test_cli_capture_then_serve_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`devicectl bmc-capture` with a secret, then `devicectl bmc-sim --model capture:DIR` serving it."""
    from controller.cli import main
    from tests.conformance.sims import start, stop, wait_ready

    ensure_tls_files(tmp_path / "tls")
    ca = tmp_path / "tls" / "ca.pem"
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir(mode=0o700)
    secret = secrets_dir / "bmc1"
    secret.write_text(json.dumps({"username": "admin", "password": DEFAULT_PASSWORD}))
    secret.chmod(0o600)
    out = tmp_path / "capture"
    proc, ready = start("dmtf", tmp_path / "tls", tmp_path)
    try:
        url = wait_ready(proc, ready)
        args = ["--url", url, "--secret", "bmc1", "--secrets-dir", str(secrets_dir), "--out", str(out)]
        assert main(["bmc-capture", *args, "--ca-bundle", str(ca), "--topology-model", "GENERIC_DMTF"]) == 0
    finally:
        stop([proc])
    assert capsys.readouterr().out.startswith("bmc-capture: ")
    assert json.loads((out / "capture.json").read_text())["topology_model"] == "GENERIC_DMTF"
    assert (
        json.loads((out / "Chassis" / "1" / "index.json").read_text())["@odata.id"] == "/redfish/v1/Chassis/1"
    )

    assert main(["bmc-sim", "--model", f"capture:{tmp_path / 'nothing'}", "--count", "1"]) == 2
    assert "no index.json" in capsys.readouterr().err
    ready = tmp_path / "replay.json"
    cmd = [sys.executable, "-m", "controller", "bmc-sim", "--model", f"capture:{out}", "--count", "1"]
    cmd += ["--cert-dir", str(tmp_path / "tls"), "--ready-file", str(ready), "--duration", "60"]
    replay = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = wait_ready(replay, ready)
        ctx = ssl.create_default_context(cafile=str(ca))
        with urllib.request.urlopen(url + "/redfish/v1", context=ctx, timeout=10) as resp:
            root = json.loads(resp.read())
        assert root == {**json.loads((out / "index.json").read_text()), "@odata.etag": root["@odata.etag"]}
    finally:
        stop([replay])


async def test_capture_bounds(make_harness: Callable[..., Any], tmp_path: Path) -> None:
    """--max-resources stops the walk (the rest is listed as skipped); --max-depth stops following links."""
    async with make_harness(n=1, model="dmtf") as harness:
        bmc = harness.fleet.bmcs[0]
        ctx = harness.fleet.client_ssl_context()
        few = await capture(
            bmc.url, bmc.username, bmc.password, tmp_path / "few", ssl_context=ctx,
            options=CaptureOptions(rate=2000.0, max_resources=5),
        )  # fmt: skip
        await capture(
            bmc.url, bmc.username, bmc.password, tmp_path / "shallow", ssl_context=ctx,
            options=CaptureOptions(rate=2000.0, max_depth=1),
        )  # fmt: skip
    assert few.resources == 5 == len(list((tmp_path / "few").rglob("index.json")))
    assert "beyond --max-resources" in few.skipped.values()
    shallow = tmp_path / "shallow"
    written = {f"/redfish/v1/{p.parent.relative_to(shallow).as_posix()}" for p in shallow.rglob("index.json")}
    root_links = _links_of(shallow / "index.json")
    assert "/redfish/v1/Chassis" in written and "/redfish/v1/Chassis/1" not in written
    # the root and what it links directly, nothing deeper
    assert written - {"/redfish/v1/."} <= root_links


def _links_of(file: Path) -> set[str]:
    return set(re.findall(r'"@odata.id": "(/redfish/v1/[^"#]+)"', file.read_text()))


async def test_an_nvidia_mockup_takes_a_limit_patch_as_nvidia_bmcweb_does(
    cert_dir: Path, api: Callable[[SimulatedBmc], Any]
) -> None:
    """A captured GB300 tray replayed: a limit PATCH is validated as NVIDIA/bmcweb@7f3a16ae takes it
    (`environment_metrics.hpp`), not as the capture's property set would allow: only SetPoint in
    PowerLimitWatts, the persistency a GPU's only (a Grace CPU's read and dropped, a module's
    unknown), the ControlMode shown unchanged by a set point, a refused value PropertyValueIncorrect."""
    corpus = Path(__file__).parents[1] / "corpus" / "redfish" / "nvidia-gb300-nvl"
    procs = "/redfish/v1/Systems/HGX_Baseboard_0/Processors"
    gpu, cpu = f"{procs}/GPU_0/EnvironmentMetrics", f"{procs}/CPU_0/EnvironmentMetrics"
    module = "/redfish/v1/Chassis/HGX_ProcessorModule_0/EnvironmentMetrics"

    def ids(reply: Any) -> list[str]:
        return [i["MessageId"].rsplit(".", 1)[1] for i in reply.body["error"]["@Message.ExtendedInfo"]]

    async with SimulatorFleet(n=1, model=f"mockup:{corpus}", cert_dir=cert_dir) as fleet:
        client = api(fleet.bmcs[0])
        for uri in (gpu, cpu, module):  # shown in each GET, yet never parsed in a PATCH
            mode = await client.patch(uri, {"PowerLimitWatts": {"ControlMode": "Disabled"}})
            assert mode.status == 400 and ids(mode) == ["PropertyUnknown"], (uri, mode.body)
        over = await client.patch(gpu, {"PowerLimitWatts": {"SetPoint": 5000}})
        assert over.status == 400 and ids(over) == ["PropertyValueIncorrect"]

        persist = {"Oem": {"Nvidia": {"PowerLimitPersistency": True}}}
        assert (await client.patch(gpu, {"PowerLimitWatts": {"SetPoint": 900}, **persist})).status == 200
        shown = (await client.get(gpu)).body
        assert shown["PowerLimitWatts"]["SetPoint"] == 900
        assert shown["PowerLimitWatts"]["ControlMode"] == "Automatic"  # a set point leaves it
        assert shown["Oem"]["Nvidia"]["PowerLimitPersistency"] is True
        assert shown["Oem"]["Nvidia"]["RequestedPersistentPowerLimitWatts"] == 900

        assert (await client.patch(cpu, {"PowerLimitWatts": {"SetPoint": 250}, **persist})).status == 200
        assert (await client.get(cpu)).body["PowerLimitWatts"]["SetPoint"] == 250
        refused = await client.patch(module, {"PowerLimitWatts": {"SetPoint": 2000}, **persist})
        assert refused.status == 400 and ids(refused) == ["PropertyUnknown"]
        assert (await client.get(module)).body["PowerLimitWatts"]["SetPoint"] == 2900
