"""`bmc_health` on every real capture (tests/corpus/redfish): the expected pass / warn / fail of each
check, nothing written by the read-only checks, and a write cycle that sets and restores exactly every
cap where one is writable (refused where none is), writing only the caps' own resources."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import pytest

from plugins.base import HealthQuery, WriteLog, recording
from tests.plugins.redfish.corpus.cases import (
    CASES,
    CORPUS,
    Case,
    allowed_writes,
    model_json,
    written_outside,
)

#: checks every capture passes (served by the simulator on loopback, verified TLS) or skips
COMMON = {"reachability": "pass", "tls": "pass", "login": "pass", "sessions": "pass", "latency": "pass"}


def _names(spec: str) -> list[str]:
    """'cap gpu/0..3, telemetry' -> cap gpu/0, ..., cap gpu/3, telemetry."""
    out: list[str] = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        m = re.fullmatch(r"(.*/)(\d+)\.\.(\d+)", item)
        out += [f"{m[1]}{i}" for i in range(int(m[2]), int(m[3]) + 1)] if m else [item]
    return out


def _expect(ok: str = "", warn: str = "", fail: str = "", skip: str = "") -> dict[str, str]:
    statuses = {**COMMON, "inband": "skip"}
    for status, spec in (("pass", ok), ("warn", warn), ("fail", fail), ("skip", skip)):
        statuses.update(dict.fromkeys(_names(spec), status))
    return statuses


# Static captures: telemetry never moves between reads (warn "stale"); firmware warns where the BMC
# shows no version; a cap warns where it is refused or its range is not fully published; `caps` fails
# where the node has no writable limit at all.
EXPECTED: dict[str, dict[str, str]] = {
    "cray-ex235a": _expect(
        ok="cap node", warn="firmware, cap gpu/0..7, cap cpu/0, telemetry", skip="profiles"
    ),
    "cray-ex425[Node0]": _expect(ok="cap node", warn="firmware, cap cpu/0..1, telemetry", skip="profiles"),
    "cray-ex425[Node1]": _expect(ok="cap node", warn="firmware, cap cpu/0..1, telemetry", skip="profiles"),
    "cray-ex425": _expect(warn="firmware, cap node, telemetry", fail="caps", skip="profiles"),
    "cray-ex235n[Node1]": _expect(
        warn="firmware, cap node, cap gpu/0..3, cap cpu/0, telemetry", fail="caps", skip="profiles"
    ),
    "hpe-dl325-gen10plus": _expect(ok="firmware", warn="cap node, cap cpu/0, telemetry", skip="profiles"),
    "hpe-xl675d-a100": _expect(ok="firmware", warn="cap node, cap cpu/0..1, telemetry", skip="profiles"),
    "hpe-dl380a-gen11": _expect(
        ok="firmware", warn="cap node, cap gpu/0..1, cap cpu/0..1, telemetry", fail="caps", skip="profiles"
    ),
    "hpe-dl380a-gen12": _expect(
        ok="firmware", warn="cap node, cap gpu/0..3, cap cpu/0..1, telemetry", skip="profiles"
    ),
    "gigabyte-ami": _expect(ok="firmware, cap node", warn="cap cpu/0..1, telemetry", skip="profiles"),
    "openbmc-stock": _expect(ok="firmware", warn="cap node, telemetry", fail="caps", skip="profiles"),
    "intel-s2600bp": _expect(
        ok="firmware", warn="cap node, cap cpu/0..1, telemetry", fail="caps", skip="profiles"
    ),
    "nvidia-gb300-nvl": _expect(
        ok="firmware, cap module/0..1, cap gpu/0..3, cap cpu/0..1, cap group/0", warn="telemetry, profiles"
    ),
    "dell-xr8620t": _expect(
        ok="firmware", warn="cap node, cap cpu/0, telemetry", fail="caps", skip="profiles"
    ),
    "supermicro-x10": _expect(
        ok="firmware", warn="cap node, cap cpu/0, telemetry", fail="caps", skip="profiles"
    ),
}

#: the write cycle per capture: the caps cycled (set, read back, restored), or why it is refused
WRITES: dict[str, str] = {
    "cray-ex235a": "node",
    "cray-ex425[Node0]": "node",
    "cray-ex425[Node1]": "node",
    "hpe-dl325-gen10plus": "node",
    "hpe-xl675d-a100": "node",
    "hpe-dl380a-gen12": "node",
    "gigabyte-ami": "node",
    "nvidia-gb300-nvl": "module/0..1, gpu/0..3, cpu/0..1",
}
REFUSED = "write cycle refused: no writable power limit on this node"


def _query(**kw: Any) -> HealthQuery:
    return HealthQuery(telemetry_interval_ms=10, latency_samples=5, **kw)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_verify_gives_each_capture_its_expected_checks_and_cycles_only_its_caps(
    make_harness: Callable[..., Any], case: Case
) -> None:
    async with make_harness(n=1, model=f"mockup:{CORPUS / case.name}") as h:
        if case.system:
            h.options["system"] = case.system
        bmc = h.fleet.bmcs[0]
        state: Any = bmc.state
        out = await h.call("bmc_health", bmc, _query(), model=model_json(case))
        got = {c.name: c.status for c in out.result.checks}
        assert got == EXPECTED[case.id], [(c.name, c.status, c.detail) for c in out.result.checks]
        assert state.writes == [], "a read-only verification wrote"
        assert out.result.ok == ("fail" not in got.values())
        discovery = dict((out.state or {}).get("discovery") or {})

        before = copy.deepcopy(state.documents)
        log = WriteLog()
        with recording(log):
            out = await h.call("bmc_health", bmc, _query(skip_writes=False), model=model_json(case))
        writes = {c.name: c for c in out.result.checks if c.name.startswith("write")}
        assert state.documents == before, "the write cycle did not restore the capture exactly"
        keys = set(_names(WRITES.get(case.id, "")))
        if keys:
            assert {n: c.status for n, c in writes.items()} == {f"write {k}": "pass" for k in keys}, writes
            assert state.writes, "nothing was written"
            allowed = allowed_writes(discovery, keys | {"node"})
            assert written_outside(state.writes, allowed) == []
            # receipts: every write the BMC saw went through the plugin's choke point
            assert len(log.entries()) == len(state.writes)
        else:
            assert [(n, c.status, c.detail) for n, c in writes.items()] == [("write", "warn", REFUSED)]
            assert state.writes == [] and log.entries() == ()
