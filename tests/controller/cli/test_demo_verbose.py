"""`devicectl demo --verbose`: the per-component table, with the node's real limit before."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from controller.cli import main


async def test_verbose_demo_shows_the_node_limit_before(tmp_path: Path, capsys) -> None:
    code = await asyncio.to_thread(main, ["demo", "--nodes", "1", "--workdir", str(tmp_path), "--verbose"])
    out = capsys.readouterr().out
    assert code == 0, out
    rows = [re.split(r"\s{2,}", line) for line in out.splitlines() if re.match(r"node001\s+node\s", line)]
    # the GB200 tray offers no node limit: the cap is shown refused with the BMC's own reason
    why = (
        "refused: no resource of this BMC carries a node power limit: no processor module and no chassis "
        "EnvironmentMetrics, power Control or Power PowerLimit of the node offers one"
    )
    assert rows == [["node001", "node", "no limit offered", "5000 W", why, "no limit offered"]], out
    gpu0 = [re.split(r"\s{2,}", line) for line in out.splitlines() if re.match(r"node001\s+GPU 0\s", line)]
    assert gpu0 == [["node001", "GPU 0", "1200 W", "900 W", "900 W", "1200 W"]], out
    assert not re.search(r"^\s+node001: GPUs", out, re.M)  # the table replaces the one-line summary


async def test_the_demo_prints_a_table_without_verbose(tmp_path: Path, capsys) -> None:
    """README: the demo "prints a table of requested vs applied vs restored values"; it used to
    print one line per node unless --verbose was given."""
    code = await asyncio.to_thread(main, ["demo", "--nodes", "2", "--workdir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("node "))
    assert re.split(r"\s{2,}", lines[header]) == ["node", "GPUs", "node limit"], out
    rows = [re.split(r"\s{2,}", line) for line in lines[header + 1 : header + 3]]
    assert [r[0] for r in rows] == ["node001", "node002"]
    assert all(r[2] == "no limit offered -> refused -> no limit offered" for r in rows), out
    assert not re.search("[\u2500-\u257f]", out)  # no bars or rules drawn into a pipe


async def test_json_demo_prints_only_json(tmp_path: Path, capsys) -> None:
    import json

    code = await asyncio.to_thread(main, ["demo", "--nodes", "1", "--workdir", str(tmp_path), "--json"])
    out = capsys.readouterr().out
    assert code == 0
    summary = json.loads(out)  # nothing but the JSON document on stdout
    assert summary["ok"] is True
    node = [c for c in summary["components"] if c["component"] == "node"]
    assert [(c["before"], c["requested"], c["after_deactivate"]) for c in node] == [
        ("no limit offered", "5000 W", "no limit offered")
    ]
    assert node[0]["applied"].startswith("refused: no resource of this BMC carries a node power limit")
    gpus = [c for c in summary["components"] if c["component"].startswith("GPU ")]
    assert [(c["before"], c["applied"], c["after_deactivate"]) for c in gpus] == [
        ("1200 W", w, "1200 W") for w in ("900 W", "850 W", "800 W", "750 W")
    ]
