"""`devicectl support-bundle` against a real `devicectl serve` (PostgreSQL, a simulated GB200 BMC over
HTTPS): every source in the archive with a manifest of results; a canary secret placed in the
inventory's credentials, the environment, the config and a log line appears nowhere in it; with
serve down, the archive is still written and the manifest says which sources failed and why."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tarfile
from pathlib import Path

from sqlalchemy.engine import URL

from bmcsim import SimulatorFleet
from controller.delivery.sink import TopologySink
from controller.observability.redact import Scrubber, redact_document
from tests.controller.terminal import pipe
from tests.serve_process import ROOT, free_port, start_serving

CANARY = "CANARY-7f3a9c1e-d00d-4bad-sekret"
PEM = f"-----BEGIN PRIVATE KEY-----\nMIIEv{CANARY[:6]}QIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive, "r:gz") as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def _raw(archive: Path) -> bytes:
    import gzip

    return gzip.decompress(archive.read_bytes())


async def test_a_support_bundle_holds_every_source_and_no_secret(
    tmp_path: Path, sink: TopologySink, pg_database: URL
) -> None:
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        inventory = tmp_path / "inventory.toml"
        secrets = fleet.write_inventory(inventory, tmp_path / "secrets")
        # the canary as a BMC's credentials: its secret file, and a password in its URL
        (secrets / "canary-bmc").write_text(json.dumps({"username": "admin", "password": CANARY}))
        (secrets / "canary-bmc").chmod(0o600)
        with inventory.open("a") as fh:
            fh.write(
                '\n[[device]]\nid = "canary01"\nplugin = "redfish"\n'
                f'[device.redfish]\nurl = "https://admin:{CANARY}@192.0.2.10"\nsecret = "canary-bmc"\n'
            )
        # ... in the config (the database password; trust authentication ignores it) and a comment
        database = pg_database.set(password=CANARY).render_as_string(hide_password=False)
        config = tmp_path / "devicectl.toml"
        port, metrics = free_port(), free_port()
        config.write_text(
            f"# the old password was {CANARY}\n[devicectl]\n"
            f'database_url = "{database}"\nlisten = "127.0.0.1:{port}"\n'
            f'metrics_listen = "127.0.0.1:{metrics}"\n'
            f'callback = "{sink.address}"\ninventory = "{inventory}"\nsecrets_dir = "{secrets}"\n'
        )
        # ... in the environment
        env = {**os.environ, "PYTHONPATH": str(ROOT), "BMC_ADMIN_PASSWORD": CANARY, "SITE_API_TOKEN": CANARY}
        log = tmp_path / "serve.log"
        serve = [sys.executable, "-m", "controller", "serve", "--config", str(config), "--auto-upgrade"]
        proc = await start_serving(serve, env, log, port, 300)
        server = f"127.0.0.1:{port}"
        bundle = ["support-bundle", "--config", str(config), "--log-file", str(log), "--server", server]
        try:
            sent = await asyncio.to_thread(
                pipe,
                "--server",
                server,
                "send",
                "ping",
                "--device",
                "node001",
                "--request-id",
                "p-1",
                "--wait",
            )
            assert sent.code == 0, sent.out + sent.err
            # ... and in log lines: bare, as a header, a password pair, a bearer token, a private key
            with log.open("a") as fh:
                fh.write(f"WARNING retry with {CANARY}\nX-Auth-Token: {CANARY}\npassword={CANARY}\n")
                fh.write(f"Authorization: Bearer {CANARY}\n{PEM}\n")
            archive = tmp_path / "up.tar.gz"
            made = await asyncio.to_thread(
                pipe, *bundle, "-o", str(archive), "--json", env={"BMC_ADMIN_PASSWORD": CANARY}
            )
            assert made.code == 0, made.out + made.err
        finally:
            proc.terminate()
            proc.wait(15)
        members = _members(archive)
        manifest = json.loads(members["manifest.json"])
        assert {s["source"]: s["result"] for s in manifest["sources"]} == {
            "config": "ok",
            "inventory": "ok",
            "logs": "ok",
            "status": "ok",
            "metrics": "ok",
            "schema": "ok",
            "requests": "ok",
        }, manifest
        assert json.loads(made.out)["archive"] == str(archive)
        assert "summary.txt" in members and "version.json" in members
        assert json.loads(members["status.json"])["journal_ok"] is True
        assert (
            b"devicectl_requests" in members["metrics.txt"]
            and b"devicectl_shadow_mode 0.0" in members["metrics.txt"]
        )
        schema = json.loads(members["schema.json"])
        assert schema["up_to_date"] is True and schema["current"] == schema["head"]
        assert [r["request_id"] for r in json.loads(members["requests/list.json"])] == ["p-1"]
        assert json.loads(members["requests/recent-with-receipts.json"])[0]["outcome"] == "ok"
        inventory_doc = json.loads(members["inventory.json"])
        canary_entry = next(d for d in inventory_doc["device"] if d["id"] == "canary01")
        assert canary_entry["redfish"]["url"] == "https://admin:***@192.0.2.10"
        assert canary_entry["redfish"]["secret"] == "canary-bmc"  # a secret's name is no secret
        config_doc = json.loads(members["config.json"])
        assert "***" in config_doc["database_url"] and config_doc["metrics_listen"] == f"127.0.0.1:{metrics}"
        log_text = next(v for k, v in members.items() if k.startswith("logs/")).decode()
        assert "WARNING retry with ***" in log_text and "PRIVATE KEY REDACTED" in log_text
        # the canary (and any part of the key) nowhere: in no member, in no byte of the archive
        raw = _raw(archive)
        assert CANARY.encode() not in raw and b"MIIEv" not in raw
        for name, data in members.items():
            assert CANARY.encode() not in data, name

        # serve down: the archive is still written; the manifest says what failed and why
        down = tmp_path / "down.tar.gz"
        again = await asyncio.to_thread(pipe, *bundle, "-o", str(down), "--json")
        assert again.code == 0, again.out + again.err
        results = {s["source"]: s for s in json.loads(_members(down)["manifest.json"])["sources"]}
        assert {k for k, s in results.items() if s["result"] == "failed"} == {"status", "metrics", "requests"}
        assert all(results[k]["reason"] for k in ("status", "metrics", "requests"))
        assert results["config"]["result"] == results["schema"]["result"] == "ok"
        assert "status" in again.out and "failed" in again.out
        assert CANARY.encode() not in _raw(down)


def test_sources_not_configured_are_skipped_with_why(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'[devicectl]\ndatabase_url = "sqlite:///{tmp_path}/none.db"\n')
    out = tmp_path / "b.tar.gz"
    made = pipe(
        "support-bundle", "--config", str(config), "-o", str(out), "--server", f"127.0.0.1:{free_port()}"
    )
    assert made.code == 0, made.err
    results = {s["source"]: s for s in json.loads(_members(out)["manifest.json"])["sources"]}
    assert (
        results["inventory"]["result"]
        == results["logs"]["result"]
        == results["metrics"]["result"]
        == "skipped"
    )
    assert "no SQLite database" in results["schema"]["reason"] and results["schema"]["result"] == "failed"
    assert "skipped" in made.out and "failed" in made.out


def test_redaction_by_structure_value_and_pattern() -> None:
    doc = redact_document(
        {"device": [{"redfish": {"password": "hunter22", "token": "t0ken-value", "url": "https://u:pw12@h"}}]}
    )
    assert doc == {"device": [{"redfish": {"password": "***", "token": "***", "url": "https://u:***@h"}}]}
    scrub = Scrubber(["s3cr3t-value"])
    text = scrub.text('x s3cr3t-value y {"api_key": "abcd1234"} Bearer eyJhbGciOiJI.abc.def')
    assert "s3cr3t-value" not in text and "abcd1234" not in text and "eyJhbGciOiJI" not in text
    assert scrub.text("ok: nothing secret here") == "ok: nothing secret here"


def test_single_quoted_headers_and_passwords_are_masked_too() -> None:
    """A Python `repr` of a header or credential dict in a log line (single quotes) is masked like
    its JSON form: a Redfish session token is never among the known secret values."""
    scrub = Scrubber([])
    for line in (
        "{'X-Auth-Token': 'a1b2c3d4e5f6a7b8'}",
        "{'Password': 'hunter22x', 'UserName': 'root'}",
        '{"X-Auth-Token": "a1b2c3d4e5f6a7b8"}',
        "Authorization: Basic cm9vdDpodW50ZXIyMng=",
    ):
        out = scrub.text(line)
        assert "a1b2c3d4e5f6a7b8" not in out and "hunter22x" not in out and "cm9vdDpod" not in out, out
    assert "'UserName': 'root'" in scrub.text("{'Password': 'hunter22x', 'UserName': 'root'}")
