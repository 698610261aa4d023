"""The command-line compatibility corpus: every form operators' scripts use keeps its meaning.

Each row is a command line that works today, run in-process through `main` on a cheap path (a
closed port, `--print-config`, a scratch SQLite file, a bad argument) and checked for the same exit
code, the same one-line error or the same settings. The send rows also check the request each form
builds, field by field.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from bench.ports import free_port as _closed_port  # nothing listens there
from controller.cli import _parser, main
from controller.cli._send import build_request

ROOT = Path(__file__).resolve().parents[3]
MEMORY_INVENTORY = (
    '[[device]]\nid = "node001"\nplugin = "tests.memory_plugin:MemoryPlugin"\nmodel = "DGX_GB200"\n'
)


CLOSED = f"127.0.0.1:{_closed_port()}"


def run(capsys: pytest.CaptureFixture[str], line: str) -> tuple[int, str, str]:
    """`devicectl LINE` in-process: exit code, stdout, stderr."""
    capsys.readouterr()
    try:
        code = main(shlex.split(line))
    except SystemExit as exc:  # argparse's --version and usage errors exited instead of returning
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


# --- client commands: against a closed port each fails with the same one-line error, exit 1 -------
CLIENT_FORMS = [
    "status",
    "--json status",
    "status --json",
    "-o json status",
    "status -o json",
    "status -ojson",
    "status --output=json",
    "status --output table",
    "status --insecure",
    "--insecure status",
    "--server-name controller.example status",
    "status --server-name controller.example",
    "requests list",
    "requests list --json",
    "--json requests list",
    "-o json requests list",
    "requests list -o table",
    "requests list --device d --status queued --limit 5",
    "requests list --undelivered --wide",
    "requests list --dead-letter --status completed",
    "requests show 0b4f2f7e",
    "requests show 0b4f2f7e --json",
    "--json requests show 0b4f2f7e-3c1d-4a53-9a43-5b7c9f1d2e6a",
    "devices list",
    "devices list --limit 3 --wide",
    "devices list -o json",
    "devices show node001",
    "devices show node001 --json",
    "verifications",
    "verifications --device d --id v-1 --limit 2",
    "verifications --json",
    "send ping --device d",
    "--json send ping --device d",
    "send ping --device d --json",
    "send ping --device d -o json",
    "send ping --device d --retry-count 2 --request-id r-1 --trace-id t-1 --timeout 5",
    "send ping --device d --wait",
    "send ping --device d --wait --wait-delivery --wait-timeout 3",
    "send ping --device d --dry-run",
    "send ping --device d --insecure",
    "send gpu-policies --device d --gpu 0=500 --gpu 1=80% --gpu 2=none",
    "send gpu-policies --device d --unset --resource-group rg",
    "send gpu-policies --device d --gpu 0=500 --node 900 --policy-name p",
    "send rg-activate --device d --resource-group rg --node 900 --gpu-total 700 --cpu 100 --memory 50",
    "send rg-activate --device d --resource-group rg --gpu 0=500 --enable 3 --disable 4 --no-verify",
    "send rg-update --device d --resource-group rg --node 800",
    "send rg-deactivate --device d --resource-group rg --unset",
    "send topology-activate --device d --node 900",
    "send topology-deactivate --device d --unset",
    "send profiles-enable --device d --enable 1 --enable 2",
    "send profiles-disable --device d --disable 1 --no-verify",
    "send profiles-update --device d --enable 1 --disable 2",
    "send gpu-metrics --device d --gpu-id 0 --gpu-id 1",
    "send gpu-metrics --device d",
    "send raw-metrics --device d",
    "send std-metrics --device d",
    "send modify-entity --device d --phase 1 --resource-group rg",
    "send --device d ping",
]


@pytest.mark.parametrize("line", CLIENT_FORMS)
def test_client_forms_reach_for_the_controller(line: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, f"--server {CLOSED} {line}")
    assert code == 1, err
    warnings = [w for w in err.splitlines() if w.startswith("warning: ")]
    assert bool(warnings) == line.startswith("send --")  # flags before the kind: deprecated
    err = "\n".join(e for e in err.splitlines() if not e.startswith("warning: "))
    assert one_line(err).startswith(f"error: controller not running at {CLOSED}"), err
    assert out == ""


def test_send_from_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "req.json"
    path.write_text(json.dumps({"device": "d", "requestId": "f-1", "ping": {}}))
    for line in (
        f"send --file {path}",
        f"send --file {path} --device other --wait",
        f"--json send --file {path} --dry-run",
        f"send --file {path} --request-id f-2 --wait --wait-delivery --wait-timeout 2",
    ):
        code, _, err = run(capsys, f"--server {CLOSED} {line}")
        assert code == 1 and one_line(err).startswith("error: controller not running"), line


def test_sink_agents_reaches_for_the_sink(capsys: pytest.CaptureFixture[str]) -> None:
    for line in (f"sink agents --sink {CLOSED}", f"--json sink agents --sink {CLOSED} --insecure"):
        code, _, err = run(capsys, line)
        assert code == 1 and one_line(err).startswith("error: "), line


# --- usage errors: exit 2, one line naming the problem ----------------------------------------------
USAGE_ERRORS = [
    ("send gpu-policies --device d", "send gpu-policies: give --gpu ID=WATTS"),
    ("send gpu-policies --device d --gpu 0=lots", "--gpu 0=lots: WATTS must be a number"),
    ("send gpu-policies --device d --gpu -1=500", "--gpu -1=500: the GPU id must be a whole number"),
    ("send gpu-policies --device d --gpu 0", "--gpu 0: expected ID=WATTS"),
    ("send profiles-enable --device d", "send profiles-enable: give --enable ID and/or --disable ID"),
    ("send ping --device d --gpu 0=100", "--gpu"),
    ("send std-metrics --device d --node 5", "--node"),
    ("send rg-activate --device d --node 900", "--resource-group"),
    ("agent --print-config", "devicectl agent needs --agent-server"),
    ("fingerprint", "give --inventory"),
    ("stats", "give --inventory"),
    ("inventory check", "give --inventory"),
]


@pytest.mark.parametrize(("line", "message"), USAGE_ERRORS)
def test_usage_errors_are_one_line_exit_2(
    line: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, f"--server {CLOSED} {line}")
    assert code == 2
    assert message in one_line(err)


@pytest.mark.parametrize(
    "line",
    [
        "no-such-command",
        "send no-such-kind --device d",
        "send ping",  # --device is required
        "requests",
        "requests list --status lost",
        "requests list --limit many",
        "serve --role everything --print-config",
        "serve --workers two --print-config",
        "db",
        "certs init",  # --dir is required
        "plugin launch info",  # --command or --address is required
        "plugin launch --command x --address unix:/y info",
    ],
)
def test_bad_command_lines_exit_2(line: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, line)
    assert code == 2, (out, err)
    assert "Traceback" not in err and err.strip()


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("devicectl ")


# --- serve and agent: every settings flag reaches the settings --------------------------------------
SERVE_FLAGS = {
    "--listen 127.0.0.1:7001": ("listen", "127.0.0.1:7001"),
    "--database-url sqlite:///var/flags.db": ("database_url", "sqlite:///var/flags.db"),
    "--callback 127.0.0.1:7002": ("callback", "127.0.0.1:7002"),
    "--inventory inv.toml": ("inventory", "inv.toml"),
    "--secrets-dir /run/secrets": ("secrets_dir", "/run/secrets"),
    "--ca-bundle ca.pem": ("ca_bundle", "ca.pem"),
    "--device-call-timeout 7.5": ("device_call_timeout", 7.5),
    "--max-concurrency 17": ("max_concurrency", 17),
    "--queue-limit 33": ("queue_limit", 33),
    "--instance-id i-9": ("instance_id", "i-9"),
    "--role frontend": ("role", "frontend"),
    "--workers 3": ("workers", 3),
    "--auto-upgrade": ("auto_upgrade", True),
    "--log-level debug": ("log_level", "debug"),
    "--log-format json": ("log_format", "json"),
    "--metrics-listen 127.0.0.1:9464": ("metrics_listen", "127.0.0.1:9464"),
    "--tls-cert s.pem": ("tls_cert", "s.pem"),
    "--tls-key s.key": ("tls_key", "s.key"),
    "--tls-client-ca c.pem": ("tls_client_ca", "c.pem"),
    "--insecure": ("insecure", True),
    "--roles topology=topology": ("roles", "topology=topology"),
    "--reflection": ("reflection", True),
    "--callback-ca-cert cb-ca.pem": ("callback_ca_cert", "cb-ca.pem"),
    "--callback-cert cb.pem": ("callback_cert", "cb.pem"),
    "--callback-key cb.key": ("callback_key", "cb.key"),
    "--agent-server topo:50053": ("agent_server", "topo:50053"),
    "--agent-id a-1": ("agent_id", "a-1"),
    "--agent-devices node*": ("agent_devices", "node*"),
    "--callback-server-name topo.example": ("callback_server_name", "topo.example"),
    "--callback-tls": ("callback_tls", True),
    "--secrets-allow-readable": ("secrets_allow_readable", True),
}


@pytest.mark.parametrize("flag", sorted(SERVE_FLAGS))
def test_serve_flags_reach_the_settings(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    field, value = SERVE_FLAGS[flag]
    for line in (f"serve --print-config {flag}", f"serve {flag} --print-config"):
        code, out, err = run(capsys, line)
        assert code == 0, err
        assert json.loads(out)[field] == value, line


def test_serve_print_config_forms(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "devicectl.toml"
    config.write_text('listen = "127.0.0.1:7100"\nlog_format = "json"\nauto_upgrade = true\n')
    code, out, _ = run(capsys, f"serve --config {config} --print-config")
    shown = json.loads(out)
    assert code == 0 and shown["listen"] == "127.0.0.1:7100" and shown["log_format"] == "json"
    assert shown["auto_upgrade"] is True  # a flag not given leaves the file's value alone
    code, out, _ = run(capsys, f"serve --config {config} --print-config --listen 127.0.0.1:7101")
    assert json.loads(out)["listen"] == "127.0.0.1:7101"
    code, out, _ = run(capsys, "--insecure serve --print-config")  # the main parser's flag
    assert code == 0 and json.loads(out)["insecure"] is True
    code, out, _ = run(capsys, "--json serve --print-config")
    assert code == 0 and "listen" in json.loads(out)
    code, out, err = run(capsys, "agent --print-config --agent-server topo:50053 --agent-id a-2")
    shown = json.loads(out)
    assert code == 0, err
    assert shown["agent_server"] == "topo:50053" and shown["agent_id"] == "a-2" and shown["callback"] == ""


def test_parser_namespace_feeds_settings_from() -> None:
    """The deploy tests load the container's command line through `_parser()` and `settings_from`."""
    from controller.cli import settings_from

    argv = ["serve", "--log-format", "json", "--listen", "0.0.0.0:50051", "--insecure"]
    parsed = _parser().parse_args(argv)
    assert parsed.log_format == "json" and parsed.config is None
    settings = settings_from(parsed)
    assert settings.listen == "0.0.0.0:50051" and settings.insecure is True


# --- db, certs, plugins, inventory, sink, simulators ------------------------------------------------
def test_db_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    code, out, _ = run(capsys, f"db status --database-url {url} --json")
    assert code == 1 and json.loads(out)["up_to_date"] is False
    code, out, _ = run(capsys, f"--json db upgrade --database-url {url}")
    assert code == 0 and json.loads(out)["after"]
    code, out, _ = run(capsys, f"db upgrade --database-url {url}")
    assert code == 0 and "schema" in out
    code, out, _ = run(capsys, f"db status --database-url {url}")
    assert code == 0 and "up to date" in out
    config = tmp_path / "c.toml"
    config.write_text(f'database_url = "{url}"\n')
    code, out, _ = run(capsys, f"db status --config {config} -o json")
    assert code == 0 and json.loads(out)["up_to_date"] is True
    days = "--journal-days 1 --outbox-days 2 --dead-letter-days 3 --audit-days 4"
    code, out, _ = run(capsys, f"db prune --database-url {url} {days} --json")
    assert code == 0 and set(json.loads(out)["deleted"]) >= {"requests", "outbox"}
    code, out, _ = run(capsys, f"db prune --config {config}")
    assert code == 0 and "deleted" in out
    code, _, err = run(capsys, f"db status --database-url sqlite:///{tmp_path}/no/such/x.db")
    assert code == 2 and "does not exist" in one_line(err)


def test_certs_init(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, f"certs init --dir {tmp_path / 'a'} --name alpha --name beta --json")
    assert code == 0 and set(json.loads(out)["clients"]) == {"alpha", "beta"}
    code, out, _ = run(capsys, f"certs --dir {tmp_path / 'c'} --json init")  # flags before the action
    assert code == 0 and set(json.loads(out)["clients"]) == {"topology", "operator", "admin"}
    code, out, _ = run(capsys, f"certs init --dir {tmp_path / 'b'}")
    assert code == 0 and "serve with: --tls-cert" in out


def test_plugins_and_plugin_commands(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plugins --json")
    assert code == 0 and {"redfish", "nvml"} <= {p["name"] for p in json.loads(out)}
    code, out, _ = run(capsys, "plugins")
    assert code == 0 and "redfish" in out
    code, _, err = run(capsys, "plugin serve no_such_plugin_anywhere")
    assert code == 2 and one_line(err).startswith("error: ")
    code, _, err = run(capsys, "plugin launch --address unix:/nonexistent/p.sock --timeout 0.5 info")
    assert code == 1 and one_line(err).startswith("error: ")
    code, _, err = run(capsys, "plugin launch --address unix:/nonexistent/p.sock --timeout 0.5 --json schema")
    assert code == 1 and one_line(err).startswith("error: ")


def test_inventory_fingerprint_stats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inventory = tmp_path / "inventory.toml"
    inventory.write_text(MEMORY_INVENTORY)
    code, out, err = run(capsys, f"inventory check --inventory {inventory} --json")
    assert code == 0, err
    assert json.loads(out)["devices"][0]["device"] == "node001"
    code, out, err = run(capsys, f"-o json inventory check --inventory {inventory} --login --timeout 5")
    assert code == 0, err
    assert json.loads(out)["devices"][0]["login"].startswith("ok")
    code, out, _ = run(capsys, f"inventory check --inventory {inventory}")
    assert code == 0 and "node001" in out
    missing = tmp_path / "secrets-inventory.toml"
    missing.write_text(
        '[[device]]\nid = "n1"\nplugin = "redfish"\nmodel = "DGX_GB200"\n'
        '[device.redfish]\nurl = "https://127.0.0.1:1"\nsecret = "nope"\n'
    )
    (tmp_path / "secrets").mkdir()
    for line in (
        f"fingerprint --inventory {missing} --secrets-dir {tmp_path / 'secrets'} --timeout 5",
        f"stats --inventory {missing} --secrets-dir {tmp_path / 'secrets'} --interval 0.1 --samples 1 --json",
    ):
        code, _, err = run(capsys, line)
        assert code == 1 and "nope" in one_line(err), line


def test_topology_sink_reads_its_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "routes.json"
    code, _, err = run(
        capsys, f"topology-sink --listen 127.0.0.1:0 --record {tmp_path / 'r.jsonl'} --routes {missing}"
    )
    assert code == 2 and "routes.json" in one_line(err)


def test_simulators_own_their_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for line in (
        "bmc-sim --count 1 --duration 0.1",
        "--json bmc-sim --count 1 --duration 0.1",
        "bmc-sim --count 1 --duration 0.1 --json",
    ):
        code, _, err = run(capsys, line)
        assert code == 0, (line, err)
    code, _, _ = run(capsys, f"bmc-sim --model capture:{tmp_path / 'nothing'} --count 1")
    assert code == 2
    code, _, _ = run(capsys, "bmc-capture")  # its own required flags
    assert code == 2


# --- send: each form builds the same request --------------------------------------------------------
SEND_REQUESTS: list[tuple[str, dict[str, Any]]] = [
    ("send ping --device d --retry-count 2", {"ping": {"retryCount": 2}}),
    ("send ping --device d --timeout 9 --trace-id t", {"ping": {}, "timeoutSeconds": "9", "traceId": "t"}),
    ("send --device d ping", {"ping": {}}),
    ("send gpu-metrics --device d --gpu-id 0 --gpu-id 3", {"gpuMetrics": {"gpuIds": [0, 3]}}),
    ("send raw-metrics --device d", {"rawMetrics": {}}),
    ("send std-metrics --device d", {"stdMetrics": {}}),
]


def _request(line: str) -> dict[str, Any]:
    msg = build_request(_parser().parse_args(shlex.split(line)))
    out = json_format.MessageToDict(msg)
    assert out.pop("device") == "d" and out.pop("requestId")
    return out


@pytest.mark.parametrize(("line", "expected"), SEND_REQUESTS)
def test_send_builds_the_request(line: str, expected: dict[str, Any]) -> None:
    assert _request(line) == expected


def test_send_kinds_build_their_members() -> None:
    gpu = _request("send gpu-policies --device d --gpu 0=500 --gpu 1=80% --gpu 2=none --resource-group rg")
    assert set(gpu) == {"gpuPoliciesUpdate"}
    assert json.dumps(gpu).count("500") == 1 and "80" in json.dumps(gpu) and "rg" in json.dumps(gpu)
    rg = _request("send rg-activate --device d --resource-group rg --node 900 --enable 3 --no-verify")
    assert set(rg) == {"resourceGroupActivate"} and "900" in json.dumps(rg)
    for kind, member in (
        ("rg-update", "resourceGroupUpdate"),
        ("rg-deactivate", "resourceGroupDeactivate"),
    ):
        assert set(_request(f"send {kind} --device d --resource-group rg --unset")) == {member}
    assert set(_request("send topology-activate --device d --node 900")) == {"topologyActivate"}
    assert set(_request("send topology-deactivate --device d --unset")) == {"topologyDeactivate"}
    for kind in ("profiles-enable", "profiles-disable", "profiles-update"):
        assert len(_request(f"send {kind} --device d --enable 1 --disable 2")) == 1
    entity = _request("send modify-entity --device d --phase 2 --resource-group rg")
    assert len(entity) == 1 and "2" in json.dumps(entity)


# --- what Click adds: per-kind flags, output anywhere (last wins), YAML, --debug, completion --------
def test_each_kind_lists_only_its_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "send ping --help")
    assert code == 0 and "--retry-count" in out and "--device" in out
    assert "--gpu " not in out and "--resource-group" not in out and "--node" not in out
    code, out, _ = run(capsys, "send rg-activate --help")
    resource_group = next(line for line in out.splitlines() if "--resource-group" in line)
    assert code == 0 and "[required]" in resource_group
    code, out, _ = run(capsys, "send --help")
    assert code == 0 and all(kind in out for kind in ("gpu-policies", "modify-entity", "std-metrics"))


def test_flags_before_the_kind_warn_and_still_send(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, f"--server {CLOSED} send --device d --retry-count 2 ping")
    warning, error = err.strip().splitlines()
    assert warning.startswith("warning: flags before the kind are deprecated: write `devicectl send ping")
    assert code == 1 and error.startswith("error: controller not running")
    code, _, err = run(capsys, f"--server {CLOSED} send --json ping --device d")  # output flags: anywhere
    assert code == 1 and "warning" not in err
    assert _request("send --device d --retry-count 3 ping") == {"ping": {"retryCount": 3}}


def test_another_kinds_flag_at_its_default_is_dropped_with_a_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """argparse let every kind take every flag at its default (a script passing `--resource-group
    "$RG"` to each kind); a real value for a flag the kind does not use is refused."""
    line = "send ping --device d --resource-group '' --policy-name=cli --phase 0 --retry-count 1"
    assert _request(line) == {"ping": {"retryCount": 1}}
    code, _, err = run(capsys, f"--server {CLOSED} {line}")
    *warnings, error = err.strip().splitlines()
    assert code == 1 and error.startswith("error: controller not running")
    assert warnings == [
        "warning: --resource-group '' is deprecated here: send ping does not use it",
        "warning: --policy-name 'cli' is deprecated here: send ping does not use it",
        "warning: --phase '0' is deprecated here: send ping does not use it",
    ]
    code, _, err = run(capsys, "send ping --device d --resource-group rg")
    assert code == 2 and "send ping: --resource-group not used by this kind" in one_line(err)


def test_send_file_subcommand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "req.json"
    path.write_text(json.dumps({"device": "x", "requestId": "f-9", "stdMetrics": {}}))
    for line in (f"send file --file {path} --device d", f"send --file {path} --device d"):
        msg = build_request(_parser().parse_args(shlex.split(line)))
        assert (msg.device, msg.request_id, msg.WhichOneof("request")) == ("d", "f-9", "std_metrics")
    code, _, err = run(capsys, "send file")
    assert code == 2 and "send file: --file is required" in one_line(err)
    msg = build_request(_parser().parse_args(["send", "ping", "--file", str(path)]))  # argparse: file wins
    assert msg.WhichOneof("request") == "std_metrics"
    code, _, err = run(capsys, f"--server {CLOSED} send ping --file {path}")
    warning, error = err.strip().splitlines()
    assert code == 1 and warning.startswith("warning: `send ping --file F` is deprecated")
    assert error.startswith("error: controller not running")


@pytest.mark.parametrize(
    ("line", "json_out"),
    [
        ("plugins --json -o table", False),
        ("plugins -o table --json", True),
        ("--json plugins -o table", False),
        ("-o table plugins --json", True),
        ("-o json plugins", True),
        ("plugins -ojson", True),
    ],
)
def test_the_last_output_flag_wins(line: str, json_out: bool, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, line)
    assert code == 0
    assert out.lstrip().startswith("[") is json_out, out


def test_yaml_output_is_the_json_as_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    yaml = pytest.importorskip("yaml")
    for line in ("plugins", f"certs init --dir {tmp_path / 'pki'} --name 'a b' --name yes"):
        _, as_json, _ = run(capsys, f"{line} -o json")
        code, as_yaml, _ = run(capsys, f"-o yaml {line}")
        assert code == 0 and not as_yaml.lstrip().startswith(("[", "{"))
        assert yaml.safe_load(as_yaml) == json.loads(as_json), as_yaml


def test_errors_are_one_line_unless_debug(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, f"--server {CLOSED} status --debug")
    assert code == 1 and "Traceback" in err and "StatusCode.UNAVAILABLE" in err
    code, _, err = run(capsys, f"--server {CLOSED} status")
    assert code == 1 and "Traceback" not in err
    code, _, err = run(capsys, "send ping --device d --gpu 0=1")
    assert (
        code == 2
        and one_line(err) == "error: send ping: --gpu not used by this kind (devicectl send ping --help)"
    )
    code, _, err = run(capsys, "requests list --limit many")
    assert code == 2 and "'many' is not a valid integer" in one_line(err)


def test_main_returns_instead_of_exiting(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["send", "--help"], ["bmc-capture", "--help"], ["--version"]):
        assert main(argv) == 0, argv
    assert main(["no-such-command"]) == 2
    assert main(["bmc-capture"]) == 2  # a usage error (its required flags), returned


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_the_script(shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, f"completion {shell}")
    assert code == 0 and "_DEVICECTL_COMPLETE" in out
    assert {"bash": "complete -o nosort -F", "zsh": "compdef", "fish": "complete --no-files"}[shell] in out


def _complete(words: str) -> list[str]:
    """What bash completion offers after `words` (Click's protocol, through the real entry point)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "_DEVICECTL_COMPLETE": "bash_complete",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
    }
    result = subprocess.run(
        [sys.executable, "-m", "controller"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return [line.split(",", 1)[1] for line in result.stdout.splitlines()]


def test_completion_offers_commands_kinds_and_flags() -> None:
    assert _complete("devicectl se") == ["serve", "send"]
    kinds = _complete("devicectl send ")
    assert {"ping", "gpu-policies", "rg-activate", "modify-entity", "file"} <= set(kinds)
    flags = _complete("devicectl send ping --")
    assert "--retry-count" in flags and "--device" in flags and "--gpu" not in flags
    assert _complete("devicectl status -o ") == ["table", "wide", "json", "yaml", "name", "csv"]
    assert "upgrade" in _complete("devicectl db ")


def test_abbreviated_flags_still_work_with_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse took a unique prefix of a long flag; scripts may have used one."""
    code, _, err = run(capsys, f"--server {CLOSED} requests list --undel --lim 3")
    lines = err.strip().splitlines()
    assert code == 1 and lines[-1].startswith("error: controller not running")
    assert lines[:2] == [
        "warning: --undel is deprecated (an abbreviation): write --undelivered",
        "warning: --lim is deprecated (an abbreviation): write --limit",
    ]
    code, out, _ = run(capsys, "serve --print-config --list 127.0.0.1:7009 --log-f json")
    assert (
        code == 0
        and json.loads(out)["listen"] == "127.0.0.1:7009"
        and json.loads(out)["log_format"] == "json"
    )
    assert _request("send ping --dev d --retry 4") == {"ping": {"retryCount": 4}}
    code, _, err = run(capsys, "send ping --d x")  # --device, --debug, --dry-run: ambiguous, refused
    assert code == 2 and one_line(err).startswith("error: send ping: No such option") and "--d" in err


def test_a_prefix_is_expanded_only_where_it_is_a_flag_of_that_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Click expands a prefix per command: the simulator's words reach it as written (the root's
    `--debug` does not swallow `--de`), a short flag stays short, a choice stays a choice, and only
    what was abbreviated warns."""
    assert _parser().parse_args(["bmc-sim", "--de", "--ser", "x"]).passed == ["--de", "--ser", "x"]
    parsed = _parser().parse_args(["serve", "--log-format", "json", "--role", "all", "-ojson"])
    assert (parsed.log_format, parsed.role, parsed.output) == ("json", "all", "json")
    assert "warning" not in capsys.readouterr().err
    parsed = _parser().parse_args(["--out", "yaml", "status"])
    assert parsed.output == "yaml" and "write --output" in capsys.readouterr().err


def test_bmc_capture_takes_only_its_own_insecure() -> None:
    """`devicectl --insecure` (plaintext to the controller) does not turn off the BMC's certificate
    check in `bmc-capture`; its own `--insecure` does."""
    needed = ["--url", "https://bmc", "--secret", "s", "--out", "o"]
    assert _parser().parse_args(["--insecure", "bmc-capture", *needed]).skip_tls_verify is False
    assert _parser().parse_args(["bmc-capture", *needed, "--insecure"]).skip_tls_verify is True
