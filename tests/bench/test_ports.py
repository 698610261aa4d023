"""bench.ports: ports no outgoing connection is given, and disjoint between pytest-xdist workers."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from bench.ports import _ephemeral_low, _outside_ephemeral, free_port, free_port_run
from tests.serve_process import ROOT


def test_ports_are_below_the_ephemeral_range_free_and_never_handed_out_twice() -> None:
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert all(1024 <= port < _ephemeral_low() for port in ports)
    with socket.socket() as server:
        server.bind(("127.0.0.1", ports[-1]))  # free when handed out


def test_a_run_is_consecutive_and_whole() -> None:
    base = free_port_run(4)
    after = {free_port() for _ in range(20)}
    assert not after & {base, base + 1, base + 2, base + 3}


def test_two_xdist_workers_of_one_run_draw_from_disjoint_slices() -> None:
    script = "import json; from bench.ports import _ports; print(json.dumps([_ports.start, _ports.stop]))"
    slices = []
    for worker in ("gw0", "gw1", "gw2"):
        env = {"PYTEST_XDIST_WORKER": worker, "PYTEST_XDIST_WORKER_COUNT": "3", "PATH": "/usr/bin:/bin"}
        out = subprocess.run(
            [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, check=True
        )
        slices.append(range(*json.loads(out.stdout)))
    assert all(len(s) > 1000 for s in slices)
    for i, one in enumerate(slices):
        for other in slices[i + 1 :]:
            assert not set(one) & set(other)


def test_a_host_whose_ephemeral_range_starts_low_gets_ports_above_it() -> None:
    assert _outside_ephemeral(32768, 60999) == (20768, 32768)
    assert _outside_ephemeral(1024, 60999) == (61000, 65536)  # nothing below: above it
    assert _outside_ephemeral(2048, 65535)[1] - _outside_ephemeral(2048, 65535)[0] == 1024
