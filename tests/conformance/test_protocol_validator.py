"""DMTF's redfish-protocol-validator against every simulator model, over the simulator's HTTPS.

Each model runs as its own `bmc-sim` process (one BMC) and the validator runs as a subprocess against it,
all models at once; its TSV report is parsed and any FAIL row not in the reviewed allow-list
(`protocol-allowlist.toml`, each entry with its reason) fails the test.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bmcsim import DEFAULT_PASSWORD, ensure_tls_files
from bmcsim._platforms import MOCKUPS
from tests.conformance.sims import CAPTURE, TARGETS, capture_gb200, start, stop, wait_ready

HERE = Path(__file__).parent
ALLOWLIST = HERE / "protocol-allowlist.toml"
VALIDATOR = Path(sys.executable).with_name("rf_protocol_validator")
#: all validators together (about 35 s on an idle 2-core machine; generous for a busy CI runner)
_VALIDATORS_TIMEOUT = 240.0
#: the module fixture runs inside the first test, so that test needs more than the default timeout
pytestmark = pytest.mark.timeout(300)


@dataclass(frozen=True)
class Row:
    """One row of the validator's TSV report."""

    assertion: str
    method: str
    status: str
    uri: str
    result: str
    message: str


@dataclass
class Run:
    """One validator run: its parsed rows and summary line."""

    rows: list[Row]
    summary: str


def _load_allowlist() -> list[dict[str, Any]]:
    return list(tomllib.loads(ALLOWLIST.read_text())["allow"])


def _allowed(row: Row, target: str, entries: list[dict[str, Any]]) -> bool:
    for entry in entries:
        models = entry.get("models", ["*"])
        if "*" not in models and target not in models:
            continue
        if entry["assertion"] != row.assertion:
            continue
        if entry.get("method") not in (None, row.method) or entry.get("uri") not in (None, row.uri):
            continue
        return True
    return False


def _parse(report_dir: Path) -> list[Row]:
    reports = sorted(report_dir.glob("*.tsv"))
    assert reports, f"the validator wrote no TSV report in {report_dir}"
    with reports[-1].open(newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t"))
    return [
        Row(*(r + [""] * 6)[:6])
        for r in rows
        if len(r) >= 5 and r[4] in ("PASS", "FAIL", "WARN", "NOT_TESTED")
    ]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    """Every target validated, in parallel (each validator run takes 20-30 s)."""
    assert VALIDATOR.exists(), "rf_protocol_validator is missing: pip install -e '.[dev]'"
    work = tmp_path_factory.mktemp("protocol-validator")
    cert_dir = work / "tls"
    ensure_tls_files(cert_dir)
    sims = {name: start(name, cert_dir, work) for name in TARGETS}
    validators: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    try:
        # captured before any validator runs, so its session does not count against theirs
        replay = capture_gb200(wait_ready(*sims["gb200"]), cert_dir, work)
        sims[CAPTURE] = start(CAPTURE, cert_dir, work, model=replay)
        for name, (proc, ready) in sims.items():
            url = wait_ready(proc, ready)
            report_dir = work / f"{name}-report"
            cmd = [str(VALIDATOR), "--rhost", url, "--user", "admin", "--password", DEFAULT_PASSWORD]
            cmd += ["--ca-bundle", str(cert_dir / "ca.pem"), "--report-dir", str(report_dir)]
            cmd += ["--report-type", "tsv", "--avoid-http-redirect"]
            # the validator makes some requests without its --ca-bundle; requests then reads this
            env = {**os.environ, "REQUESTS_CA_BUNDLE": str(cert_dir / "ca.pem")}
            out = (work / f"{name}.validator.log").open("wb")
            validators[name] = (
                subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env),
                report_dir,
            )
        results: dict[str, Run] = {}
        deadline = time.monotonic() + _VALIDATORS_TIMEOUT
        for name, (proc, report_dir) in validators.items():
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            log_text = (work / f"{name}.validator.log").read_text(errors="replace")
            summary = next((ln for ln in log_text.splitlines() if ln.startswith("Summary")), "")
            results[name] = Run(_parse(report_dir), summary)
        yield results
    finally:
        stop([p for p, _ in validators.values()] + [p for p, _ in sims.values()])
        shutil.rmtree(cert_dir, ignore_errors=True)


def test_allowlist_matching() -> None:
    """How an entry matches a FAIL row: assertion, then method/URI and targets when the entry names them."""
    row = Row("REQ_X", "PATCH", "400", "/redfish/v1/Systems", "FAIL", "msg")
    assert _allowed(row, "dmtf", [{"assertion": "REQ_X"}])
    assert _allowed(row, "dmtf", [{"assertion": "REQ_X", "method": "PATCH", "models": ["dmtf"]}])
    assert not _allowed(row, "gb200", [{"assertion": "REQ_X", "models": ["dmtf"]}])
    assert not _allowed(row, "dmtf", [{"assertion": "REQ_X", "method": "GET"}])
    assert not _allowed(row, "dmtf", [{"assertion": "REQ_X", "uri": "/redfish/v1"}])
    assert not _allowed(row, "dmtf", [{"assertion": "REQ_Y"}])


def test_allowlist_entries_are_reviewed() -> None:
    entries = _load_allowlist()
    assert isinstance(entries, list)
    for entry in entries:
        assert entry.get("assertion"), entry
        assert len(entry.get("reason", "").split()) >= 8, f"allow-list entry without a real reason: {entry}"
        assert set(entry.get("models", ["*"])) <= {"*", CAPTURE, *TARGETS}, entry


@pytest.mark.parametrize("target", sorted([*TARGETS, CAPTURE]))
def test_protocol_validator_has_no_unreviewed_fail(runs: dict[str, Run], target: str) -> None:
    run = runs[target]
    assert run.summary.startswith("Summary"), f"{target}: the validator did not finish"
    passed = [r for r in run.rows if r.result == "PASS"]
    # a mockup (bmcsim/mockups) serves fewer resources than a hand-written model walks
    least = 150 if target in MOCKUPS else 300
    assert len(passed) > least, f"{target}: only {len(passed)} PASS rows: did it reach the simulator?"
    entries = _load_allowlist()
    unreviewed = [r for r in run.rows if r.result == "FAIL" and not _allowed(r, target, entries)]
    assert not unreviewed, f"{target}: FAIL rows not in {ALLOWLIST.name}:\n" + "\n".join(
        f"  {r.assertion} {r.method} {r.status} {r.uri}: {r.message}" for r in unreviewed
    )


def test_protocol_checks_the_accounts_etags(runs: dict[str, Run]) -> None:
    """The account checks (roles, ETag/If-Match) ran and passed on every target: an AccountService exists."""
    wanted = (
        "SEC_PRIV_SUPPORT_PREDEFINED_ROLES",
        "PROTO_ETAG_IF_MATCH_ENFORCED",
        "SEC_ACCOUNTS_SUPPORT_ETAGS",
    )
    for target, run in runs.items():
        for assertion in wanted:
            results = {r.result for r in run.rows if r.assertion == assertion}
            assert results == {"PASS"}, f"{target}: {assertion} gave {results or 'no row'}"
