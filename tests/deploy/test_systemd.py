"""The systemd unit's install header agrees with what devicectl does: the `install` lines, run for
real (coreutils' install, into a temporary root, owners left out), lay down every file the example
config names with modes devicectl's own checks accept (secret files, the TLS key), and the
service's command line and paths are the ones the header creates."""

from __future__ import annotations

import shlex
import stat
import subprocess
from pathlib import Path

import pytest

from controller.config import load_settings
from controller.inventory import load_inventory, load_secret_rules, secret_policy
from controller.security import certs
from controller.security.secrets import SecretStore
from controller.security.tls import check_settings
from tests.deploy.test_deploy import DEPLOY

UNIT = DEPLOY / "systemd" / "devicectl.service"
REPO = DEPLOY.parent


def header_commands() -> list[list[str]]:
    """The commands of the unit's header (lines `#   cmd ...`), split as a shell would."""
    out = []
    for line in UNIT.read_text().split("[Unit]")[0].splitlines():
        if line.startswith("#   ") and not line.startswith("#     "):
            out.append(shlex.split(line[4:]))
    return out


def unit_entries() -> dict[str, list[str]]:
    entries: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            entries.setdefault(key, []).append(value)
    return entries


def test_the_header_creates_the_paths_the_service_uses() -> None:
    commands = header_commands()
    flat = [" ".join(c) for c in commands]
    exec_start = shlex.split(unit_entries()["ExecStart"][0])
    # the binary lives in the virtual environment the header creates
    assert exec_start[0] == "/opt/devicectl/bin/devicectl"
    assert any(c.startswith("python3 -m venv /opt/devicectl") for c in flat), flat
    assert any("/opt/devicectl/bin/pip install ." in c for c in flat), flat
    # the schema is upgraded as the service user, with the service's environment file
    upgrade = next(c for c in commands if "db" in c and "upgrade" in c)
    assert "--uid=devicectl" in upgrade and "EnvironmentFile=/etc/devicectl/devicectl.env" in upgrade
    assert unit_entries()["EnvironmentFile"] == ["-/etc/devicectl/devicectl.env"]
    assert unit_entries()["Environment"] == ["DEVICECTL_CONFIG=/etc/devicectl/devicectl.toml"]


def _run_installs(root: Path, sources: Path) -> list[Path]:
    """Run the header's `install` lines with /etc/devicectl under `root`, sources from `sources`
    (the repository's deploy/examples files from the repository), owners dropped (not root here
    necessarily). Returns the destination paths installed."""
    installed: list[Path] = []
    for argv in header_commands():
        if argv[0] != "install" or "/etc/systemd/system/" in argv:
            continue
        args: list[str] = []
        skip = False
        for arg in argv[1:]:
            if skip:
                skip = False
                continue
            if arg in ("-o", "-g"):
                skip = True  # ownership: asserted from the text below, not applied
                continue
            if arg.startswith("/etc/devicectl"):
                arg = str(root) + arg
            elif arg.startswith("deploy/"):
                arg = str(REPO / arg)
            args.append(arg)
        subprocess.run(["install", *args], cwd=sources, check=True, timeout=30)
        if "-d" in args:
            installed += [Path(a) for a in args if a.startswith(str(root))]
        else:
            target = Path(args[-1])
            installed += [
                target / Path(a).name for a in args[:-1] if not a.startswith("-") and not a.isdigit()
            ]
    return installed


def test_the_header_installs_every_file_the_example_config_needs_with_modes_devicectl_accepts(
    tmp_path: Path,
) -> None:
    root, sources = tmp_path / "root", tmp_path / "src"
    root.mkdir()
    made = certs.init(sources / "ca", clients=("topology",))
    for name, path in {
        "tls.crt": made.server_cert,
        "tls.key": made.server_key,
        "clients-ca.crt": made.ca,
        "topology-ca.crt": made.ca,
    }.items():
        (sources / name).write_bytes(path.read_bytes())
    for secret in ("rack1-bmc", "h100-node07"):
        (sources / secret).write_text('{"username": "admin", "password": "example"}')
    (sources / "devicectl.env").write_text("DEVICECTL_DATABASE_URL=sqlite://\n")
    installed = _run_installs(root, sources)
    assert installed

    etc = root / "etc" / "devicectl"
    example = load_settings(str(DEPLOY / "examples" / "devicectl.toml"), env={})
    # every file the example config names is installed by the header
    for setting in ("tls_cert", "tls_key", "tls_client_ca", "callback_ca_cert", "inventory"):
        path = Path(str(root) + getattr(example, setting))
        assert path.is_file(), f"{setting} = {getattr(example, setting)}: the header does not install it"
    assert Path(str(root) + example.secrets_dir).is_dir()

    # the installed config, pointed at the temporary root, passes serve's TLS checks (reads the files)
    moved = {
        k: str(root) + v
        for k, v in vars(example).items()
        if isinstance(v, str) and v.startswith("/etc/devicectl")
    }
    check_settings(load_settings(str(etc / "devicectl.toml"), env={}, overrides=moved))

    # secrets and the key are devicectl's alone; devicectl's own secret store reads them
    for path in [*(etc / "secrets").iterdir(), etc / "tls" / "tls.key", etc / "devicectl.env"]:
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path
    inventory = load_inventory(etc / "inventory.toml")
    secrets = SecretStore(
        str(etc / "secrets"), policy=secret_policy(inventory, load_secret_rules(etc / "inventory.toml"))
    )
    assert secrets.readable_by_others("rack1-bmc") == []
    assert stat.S_IMODE((etc / "secrets").stat().st_mode) == 0o700


@pytest.mark.parametrize("path", ["/etc/devicectl/secrets/", "/etc/devicectl/tls/"])
def test_private_files_are_owned_by_the_service_user(path: str) -> None:
    """Mode 0600 is only readable by the service if the service user owns the file."""
    for argv in header_commands():
        if argv[0] == "install" and argv[-1] == path and "0600" in argv:
            assert argv[argv.index("-o") + 1] == "devicectl", argv
            return
    pytest.fail(f"no 0600 install into {path}")
