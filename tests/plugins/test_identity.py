"""Identity leases (plugins.base._identity): unique among live processes, taken back after a death,
with the record of what the holders created."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from plugins.base._identity import RUN_DIR_ENV, ProcessIdentity
from tests.serve_process import ROOT

#: a process that holds an identity, records a session and waits to be killed
_HOLD = (
    "import sys; from plugins.base._identity import ProcessIdentity as P; i = P(sys.argv[1]).acquire(); "
    "i.note_created('https://bmc', '/redfish/v1/SessionService/Sessions/9'); "
    "print(i.client_id, flush=True); sys.stdin.read()"
)


@pytest.fixture
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "run"
    monkeypatch.setenv(RUN_DIR_ENV, str(path))
    return path


def test_live_holders_never_share_an_identity_and_a_released_one_is_taken_back(run_dir: Path) -> None:
    first = ProcessIdentity("ctl").acquire()
    second = ProcessIdentity("ctl").acquire()
    assert (first.client_id, second.client_id) == ("ctl", "ctl~1") and first.held and second.held
    first.note_created("https://bmc", "/s/1")
    assert first.inherited("https://bmc") == []  # this process's own: live, never a leftover
    first.release()
    third = ProcessIdentity("ctl").acquire()
    assert third.client_id == "ctl" and third.boot != first.boot
    assert third.inherited("https://bmc") == ["/s/1"]  # the record of the holder before
    third.note_deleted("https://bmc", "/s/1")
    spelled = ProcessIdentity("ctl~1").acquire()
    assert spelled.client_id == "ctl~1~1"  # "ctl~1" is held, as a slot of "ctl"
    assert third.inherited("https://bmc") == []
    for identity in (second, third, spelled):
        identity.release()


def test_a_killed_holders_identity_and_record_go_to_the_next_process(run_dir: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLD, "ctl"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None
    try:
        assert child.stdout.readline().strip() == b"ctl"
        alive = ProcessIdentity("ctl").acquire()
        assert alive.client_id == "ctl~1" and alive.inherited("https://bmc") == []
        alive.release()
    finally:
        child.kill()
        child.wait()
    after = ProcessIdentity("ctl").acquire()
    assert after.client_id == "ctl"
    assert after.inherited("https://bmc") == ["/redfish/v1/SessionService/Sessions/9"]
    after.release()


def test_a_run_directory_others_can_write_gives_an_identity_no_one_can_take_back(run_dir: Path) -> None:
    run_dir.mkdir(mode=0o700)
    run_dir.chmod(0o777)
    identity = ProcessIdentity("ctl").acquire()
    assert identity.client_id == f"ctl~{identity.boot}" and not identity.held
    identity.note_created("https://bmc", "/s/1")
    assert identity.inherited("https://bmc") == []
    assert not (run_dir / "identity").exists()
