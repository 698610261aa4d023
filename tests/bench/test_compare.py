"""`python -m bench --compare REF` at tiny size against HEAD: the ref runs from its own checkout,
the sides alternate, and the table has every row with a value on both sides."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import main
from bench.compare import check_imports, check_plotting, checkout, metrics, probe_args, render, resolve
from bench.util import ROOT


def test_the_ref_runs_from_its_own_checkout(tmp_path: Path) -> None:
    head = resolve("HEAD")
    with checkout(head, tmp_path) as tree:
        assert (tree / "bench" / "compare.py").exists() or (tree / "bench" / "__main__.py").exists()
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True, check=True
        )
        assert rev.stdout.strip() == head
        check_imports(tree)  # its bench, controller and plugins, not the working tree's
    assert not tree.exists()
    listed = subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert str(tree) not in listed.stdout


def test_without_matplotlib_compare_stops_before_any_run_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    with pytest.raises(SystemExit) as stopped:
        check_plotting()
    assert "matplotlib is not installed" in str(stopped.value) and "make bench" in str(stopped.value)


def test_an_unknown_ref_is_one_clear_line() -> None:
    with pytest.raises(SystemExit, match="names no commit"):
        resolve("no-such-ref-anywhere")


def test_compare_against_head_prints_the_ratio_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "compare"
    argv = ["--compare", "HEAD", "--quick", "--only", "fanout", "--rounds", "1", "--compare-out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "compare.json").read_text())
    rows = {row[0]: row[1:] for row in summary["table"][1:]}
    assert "steady state" in printed and "tree ÷ ref" in printed
    table = render(summary["table"])
    assert table in printed
    assert max(len(line) for line in table.splitlines()) <= 100, "the table fits a terminal"
    for metric in (
        "fan-out first contact s",
        "fan-out steady state s",
        "CPU ms/BMC call, first contact",
        "CPU ms/BMC call, steady state",
        "calls per activation, steady state",
        "fan-out peak RSS MB",
    ):
        ref, tree, ratio = rows[metric]
        assert ref != "-" and tree != "-" and float(ratio) > 0, metric
    # each side ran once, its own results: the ref's run is of HEAD's commit
    ref_results = json.loads((out / "round1-ref" / "results.json").read_text())
    assert ref_results["fanout"]["code"].startswith(summary["commit"][:7])
    assert all(phase["problems"] == [] for phase in ref_results["fanout"]["result"]["sizes"][0]["phases"])


def test_a_benchmark_left_out_reads_as_no_value() -> None:
    """`--compare REF --only ingest`: the fan-out rows read no value (a dash), not a KeyError."""
    ingest_only: dict[str, object] = {"ingest": {"result": {"backends": {"sqlite": {"skipped": "x"}}}}}
    assert all(metric.read(ingest_only) is None for metric in metrics(["sqlite"]))


def test_no_probes_goes_to_each_side_that_takes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--compare REF --no-probes`: a side whose benchmark takes the flag gets it; a side whose
    benchmark sends probes and cannot be told not to is named; without the flag, neither gets it."""
    asked, not_asked = argparse.Namespace(no_probes=True), argparse.Namespace(no_probes=False)
    assert probe_args(asked, ROOT) == ["--no-probes"]
    assert probe_args(not_asked, ROOT) == []
    older = tmp_path / "older"
    (older / "bench").mkdir(parents=True)
    (older / "bench" / "__main__.py").write_text("# no such flag\n")
    (older / "bench" / "fanout.py").write_text("from bench import prober\n")
    assert probe_args(asked, older) == []
    assert "sends ack probes and has no --no-probes" in capsys.readouterr().out


def test_a_run_without_probes_reads_no_probe_ack() -> None:
    """A phase that sent no probes has no probe ack p99 (a dash), not 0 ms."""
    phase = {"phase": "first contact", "probe_acks": 0, "probe_ack_p99_ms": 0.0}
    results: dict[str, object] = {"fanout": {"result": {"sizes": [{"n": 1, "phases": [phase]}]}}}
    (row,) = [m for m in metrics([]) if m.label == "probe ack p99 ms, first contact"]
    assert row.read(results) is None
    assert (
        row.read(
            {
                "fanout": {
                    "result": {
                        "sizes": [{"n": 1, "phases": [{**phase, "probe_acks": 5, "probe_ack_p99_ms": 7.5}]}]
                    }
                }
            }
        )
        == 7.5
    )
