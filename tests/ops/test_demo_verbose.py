"""`devicectl demo --verbose`: the per-component table, with the node's real limit before."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from controller.cli import main
from controller.cli._render import console


async def test_verbose_demo_shows_the_node_limit_before(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(console, "width", 200)
    code = await asyncio.to_thread(main, ["demo", "--nodes", "1", "--workdir", str(tmp_path), "--verbose"])
    out = capsys.readouterr().out
    assert code == 0, out
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines() if "│ node " in line]
    assert rows == [["node001", "node", "5640 W", "5000 W", "5000 W", "5640 W"]], out
    assert not re.search(r"^\s+node001: GPUs", out, re.M)  # the table replaces the one-line summary


async def test_json_demo_prints_only_json(tmp_path: Path, capsys) -> None:
    import json

    code = await asyncio.to_thread(main, ["demo", "--nodes", "1", "--workdir", str(tmp_path), "--json"])
    out = capsys.readouterr().out
    assert code == 0
    summary = json.loads(out)  # nothing but the JSON document on stdout
    assert summary["ok"] is True
    node = [c for c in summary["components"] if c["component"] == "node"]
    assert node == [
        {
            "node": "node001",
            "component": "node",
            "before": "5640 W",
            "requested": "5000 W",
            "applied": "5000 W",
            "after_deactivate": "5640 W",
        }
    ]
