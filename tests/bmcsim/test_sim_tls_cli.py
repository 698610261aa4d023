"""Certificates, the inventory/secrets writer and the command line."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import stat
import tomllib
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509

from bmcsim import (
    InventoryEntry,
    SimulatorFleet,
    device_id,
    ensure_tls_files,
    render_inventory,
    write_inventory,
)
from bmcsim.cli import main


def test_tls_files_are_created_and_reused(tmp_path: Path) -> None:
    files = ensure_tls_files(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {"ca.pem", "ca-key.pem", "server.pem", "server-key.pem"}
    assert stat.S_IMODE(files.key.stat().st_mode) == 0o600
    cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert set(san.get_values_for_type(x509.IPAddress)) == {
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    }
    ca_bytes, cert_bytes = files.ca.read_bytes(), files.cert.read_bytes()
    again = ensure_tls_files(tmp_path)
    assert (again.ca.read_bytes(), again.cert.read_bytes()) == (ca_bytes, cert_bytes)
    # a lost server certificate is re-issued by the same CA, so existing bundles keep working
    files.cert.unlink()
    reissued = ensure_tls_files(tmp_path)
    assert reissued.ca.read_bytes() == ca_bytes
    assert reissued.cert.read_bytes() != cert_bytes
    x509.load_pem_x509_certificate(reissued.cert.read_bytes()).verify_directly_issued_by(
        x509.load_pem_x509_certificate(ca_bytes)
    )


async def test_verification_by_hostname_and_rejection_without_ca(cert_dir: Path) -> None:
    async with SimulatorFleet(n=1, cert_dir=cert_dir) as fleet:
        port = fleet.bmcs[0].port
        connector = aiohttp.TCPConnector(ssl=fleet.client_ssl_context())
        async with aiohttp.ClientSession(connector=connector) as http:
            async with http.get(f"https://localhost:{port}/redfish/v1/") as resp:
                assert resp.status == 200
        async with aiohttp.ClientSession() as untrusting:
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await untrusting.get(f"https://127.0.0.1:{port}/redfish/v1/")


def test_inventory_rendering_escapes_and_round_trips(tmp_path: Path) -> None:
    entries = [
        InventoryEntry(
            id=device_id("node", i, 3),
            url=f"https://127.0.0.1:{40001 + i}",
            model="DGX_GB200",
            secret="bmc-sim",
            ca_bundle='/tmp/we"ird\\dir/ca.pem',
            username="admin",
            password="s3cret",
        )
        for i in range(3)
    ]
    text = render_inventory(entries)
    assert "s3cret" not in text
    parsed = tomllib.loads(text)
    assert [d["id"] for d in parsed["device"]] == ["node001", "node002", "node003"]
    assert parsed["device"][0]["redfish"]["ca_bundle"] == '/tmp/we"ird\\dir/ca.pem'
    assert parsed["device"][2]["redfish"]["url"] == "https://127.0.0.1:40003"
    assert device_id("node", 1999, 2000) == "node2000"

    secrets = write_inventory(entries, tmp_path / "inv" / "inventory.toml")
    assert secrets == tmp_path / "inv" / "secrets"
    assert json.loads((secrets / "bmc-sim").read_text()) == {"username": "admin", "password": "s3cret"}
    assert stat.S_IMODE((secrets / "bmc-sim").stat().st_mode) == 0o600
    clash = [*entries, InventoryEntry("x", "https://h", "m", "bmc-sim", "/ca", "admin", "other")]
    with pytest.raises(ValueError, match="different credentials"):
        write_inventory(clash, tmp_path / "clash.toml")


def test_cli_writes_inventory_secrets_and_ready_file(tmp_path: Path, cert_dir: Path) -> None:
    inventory = tmp_path / "fleet" / "inventory.toml"
    ready = tmp_path / "ready.json"
    argv = ["--count", "3", "--model", "gb200,dmtf", "--cert-dir", str(cert_dir), "--password", "pw-1"]
    argv += ["--inventory-out", str(inventory), "--ready-file", str(ready), "--duration", "0"]
    argv += ["--control-port", "0", "--log-level", "WARNING"]
    assert main(argv) == 0
    devices = tomllib.loads(inventory.read_text())["device"]
    assert [d["model"] for d in devices] == ["DGX_GB200", "GENERIC_DMTF", "DGX_GB200"]
    assert all(d["plugin"] == "redfish" and d["redfish"]["secret"] == "bmc-sim" for d in devices)
    assert Path(devices[0]["redfish"]["ca_bundle"]) == (cert_dir / "ca.pem").resolve()
    assert devices[1]["redfish"]["url"].startswith("https://127.0.0.1:")
    secret = json.loads((inventory.parent / "secrets" / "bmc-sim").read_text())
    assert secret == {"username": "admin", "password": "pw-1"}
    info = json.loads(ready.read_text())
    assert [d["redfish"]["url"] for d in devices] == info["urls"]
    assert info["control_url"].startswith("http://127.0.0.1:")


def test_cli_unique_passwords_and_errors(tmp_path: Path, cert_dir: Path) -> None:
    inventory = tmp_path / "inventory.toml"
    secrets = tmp_path / "k8s"
    argv = [
        "--count",
        "2",
        "--cert-dir",
        str(cert_dir),
        "--unique-passwords",
        "--inventory-out",
        str(inventory),
    ]
    argv += ["--secrets-dir", str(secrets), "--duration", "0", "--log-level", "WARNING"]
    assert main(argv) == 0
    devices = tomllib.loads(inventory.read_text())["device"]
    names = [d["redfish"]["secret"] for d in devices]
    assert names == ["bmc-sim-node001", "bmc-sim-node002"]
    passwords = {json.loads((secrets / n).read_text())["password"] for n in names}
    assert len(passwords) == 2
    assert main(["--model", "cray", "--duration", "0"]) == 2


async def test_cli_runs_inside_a_thread_until_duration(cert_dir: Path, tmp_path: Path) -> None:
    # the CLI owns its event loop; from async code it must run in a worker thread
    ready = tmp_path / "ready.json"
    argv = ["--count", "1", "--cert-dir", str(cert_dir), "--ready-file", str(ready), "--duration", "0.2"]
    assert await asyncio.to_thread(main, [*argv, "--log-level", "WARNING"]) == 0
    assert ready.exists()
