"""Identity leases (plugins.base.identity): unique among live processes, taken back after a death,
with the record of what the holders created."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from plugins.base.identity import RUN_DIR_ENV, ProcessIdentity, RecordWriter
from tests.serve_process import ROOT

#: a process that holds an identity, records a session and waits to be killed
_HOLD = (
    "import sys; from plugins.base.identity import ProcessIdentity as P; i = P(sys.argv[1]).acquire(); "
    "i.note_created('https://bmc', '/redfish/v1/SessionService/Sessions/9').result(); "
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


_LOGINS = (
    "import sys; from plugins.base.identity import ProcessIdentity as P; i = P('ctl').acquire(); "
    "w = None\n"
    "for k in range(int(sys.argv[1])):\n"
    "    origin = f'https://bmc{k % 50}'\n"
    "    i.note_deleted(origin, f'/s/{k - 50}'); w = i.note_created(origin, f'/s/{k}')\n"
    "w.result(); print('logged in', flush=True); sys.stdin.read()"
)


def test_the_record_keeps_one_session_per_origin_across_a_kill_and_a_torn_line(run_dir: Path) -> None:
    """Each login replaces the origin's session: a SIGKILLed holder's record names exactly the last
    session of every origin (appended lines, compacted on the way), and a torn last line (a power
    loss mid-write) is skipped."""
    child = subprocess.Popen(
        [sys.executable, "-c", _LOGINS, "5000"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None
    try:
        assert child.stdout.readline().strip() == b"logged in"
    finally:
        child.kill()
        child.wait()
    (record,) = (run_dir / "identity").glob("ctl.*.jsonl")
    lines = record.read_bytes().splitlines()
    assert len(lines) < 2 * 5000  # compacted while it ran (10,000 lines were noted)
    with record.open("ab") as f:
        f.write(b'["+","https://bmc0","/s/torn')  # a line cut short
    after = ProcessIdentity("ctl").acquire()
    try:
        for b in range(50):
            assert after.inherited(f"https://bmc{b}") == [f"/s/{4950 + b}"]
        after.note_deleted("https://bmc0", "/s/4950")
        after.flush()
    finally:
        after.release()
    again = ProcessIdentity("ctl").acquire()
    try:
        assert again.inherited("https://bmc0") == [] and again.inherited("https://bmc1") == ["/s/4951"]
        # taken at start, the record holds the live entries alone: one line per origin
        assert len(record.read_bytes().splitlines()) == 49
    finally:
        again.release()


def test_a_record_of_the_earlier_whole_file_format_is_folded_in(run_dir: Path) -> None:
    first = ProcessIdentity("ctl").acquire()
    (record,) = (run_dir / "identity").glob("ctl.*.jsonl")
    first.release()
    legacy = record.with_suffix(".json")
    legacy.write_text('{"https://bmc": ["/s/1", "/s/2"], "https://other": "not a list"}')
    second = ProcessIdentity("ctl").acquire()
    try:
        assert second.inherited("https://bmc") == ["/s/1", "/s/2"] and second.inherited("https://other") == []
        assert not legacy.exists() and len(record.read_bytes().splitlines()) == 2
    finally:
        second.release()


def test_a_waiter_that_gives_up_never_stops_the_record_writer(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller that stops waiting for its line (a cancelled `asyncio.wrap_future` cancels the
    future it wraps) leaves the line written and the writer thread running: later lines are
    recorded too. Seen: the thread died on `InvalidStateError`, and nothing was recorded after."""
    gate = threading.Event()
    write = RecordWriter._write

    def held(self: RecordWriter, lines: list[tuple[str, str, str]]) -> None:
        assert gate.wait(30), "the test never let the writer go on"
        write(self, lines)

    monkeypatch.setattr(RecordWriter, "_write", held)
    identity = ProcessIdentity("ctl").acquire()
    given_up = identity.note_created("https://bmc", "/s/1")
    assert given_up.cancel()  # still pending: the writer holds it unwritten
    gate.set()
    identity.note_created("https://bmc", "/s/2").result(timeout=30)
    assert identity.recorded("https://bmc") == ["/s/1", "/s/2"]
    identity.release()
    assert ProcessIdentity("ctl").acquire().inherited("https://bmc") == ["/s/1", "/s/2"]
