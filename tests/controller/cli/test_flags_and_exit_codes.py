"""Flags (help on every one, a single-valued flag given twice refused, fractional watts refused) and
the documented exit codes, with what an operator types around them: node ranges, demo ports,
the sink's agents, certs init, long cells in a pipe."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import click
import pytest

from bench.ports import free_port as _closed_port  # nothing listens there
from controller.cli import cli, main
from controller.cli._demo import port_text
from controller.cli._render import set_output
from controller.delivery.sink import TopologySink
from tests.controller.cli.test_in_force import gb200_site
from tests.controller.cli.test_operator import Site
from tests.controller.terminal import ROOT, pipe


@pytest.fixture
async def site(tmp_path: Path, sink: TopologySink, start_controller: Any) -> AsyncIterator[Site]:
    async with gb200_site(tmp_path, sink, start_controller) as started:
        yield started


async def _cli(site: Site, *args: str) -> Any:
    return await asyncio.to_thread(pipe, *site.cli(*args))


def _options(command: click.Command, path: str) -> list[tuple[str, click.Option]]:
    out = [(path, p) for p in command.params if isinstance(p, click.Option) and not p.hidden]
    if isinstance(command, click.Group):  # as help lists them: a lazily loaded command too
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, f"{path} {name}"
            out += _options(sub, f"{path} {name}")
    return out


def test_every_flag_has_help() -> None:
    options = _options(cli, "devicectl")
    assert len(options) > 200  # the walk sees every command
    missing = [f"{path} {option.opts[0]}" for path, option in options if not (option.help or "").strip()]
    assert not missing, f"flags without help: {missing}"


async def test_the_node_range_is_the_bmcs_not_the_models(site: Site) -> None:
    # the GB200 tray's two modules allow 450..2820 W each: 900..5640 W, not the model's 1000..6667 W
    for watts in ("7000", "6000"):  # the first request on the node already knows, and every one after
        over = await _cli(site, "send", "topology-activate", "--device", "node001", "--node", watts, "--wait")
        text = " ".join((over.out + over.err).split())
        assert over.code == 1 and "allowed 900..5640 W" in text and "6667" not in text, text
    within = await _cli(site, "send", "topology-activate", "--device", "node001", "--node", "5000", "--wait")
    assert within.code == 0, within.out + within.err


async def test_fractional_watts_are_refused_not_rounded(site: Site) -> None:
    before = site.bmc.state.set_points().get("GPU_0")
    for args in (("--gpu", "0=500.7"), ("--node", "5000.5")):
        run = await _cli(site, "send", "gpu-policies", "--device", "node001", *args, "--wait")
        assert run.code == 2 and "give whole watts" in run.err, run.err  # it used to write 501 W
    assert site.bmc.state.set_points().get("GPU_0") == before
    whole = await _cli(site, "send", "gpu-policies", "--device", "node001", "--gpu", "0=500.0", "--wait")
    assert whole.code == 0 and site.bmc.state.set_points().get("GPU_0") == 500


@pytest.mark.parametrize(
    "args",
    [
        ["send", "ping", "--device", "a", "--device", "b"],
        ["send", "gpu-policies", "--device=a", "--gpu", "0=500", "--device", "b"],
        ["verifications", "--device", "a", "--device", "b"],
    ],
)
def test_a_single_valued_flag_given_twice_is_refused(args: list[str], capsys: Any) -> None:
    assert main(["--server", f"127.0.0.1:{_closed_port()}", *args]) == 2  # it kept only "b"
    err = capsys.readouterr().err
    assert "--device given twice ('a', 'b'): give it once" in err


async def test_unknown_requests_exit_1_with_one_line(site: Site) -> None:
    for rid in ("0f9c1f7e-0000-4000-8000-000000000000", "abc", "zzzz"):
        run = await _cli(site, "requests", "show", rid)
        lines = run.err.strip().splitlines()
        assert run.code == 1, run  # a full id exited 2, a short prefix printed a raw NOT_FOUND
        assert len(lines) == 1 and lines[0].startswith(f"error: request '{rid}': no such request"), lines


async def test_sink_agents_dials_the_address_it_is_given(sink: TopologySink, capsys: Any) -> None:
    closed = f"127.0.0.1:{_closed_port()}"
    for flag in ("--server", "--sink"):
        code = await asyncio.to_thread(main, ["sink", "agents", flag, sink.address, "-o", "json"])
        out = capsys.readouterr()
        assert code == 0 and out.out.strip() == "[]", out  # --server dialed :50052 whatever it said
        code = await asyncio.to_thread(main, ["sink", "agents", flag, closed])
        err = capsys.readouterr().err
        assert code == 1 and f"topology sink not running at {closed}" in err, err


def test_certs_init_takes_the_directory_as_the_systemd_header_writes_it(tmp_path: Path, capsys: Any) -> None:
    header = (ROOT / "deploy" / "systemd" / "devicectl.service").read_text()
    assert "`devicectl certs init DIR`" in header
    assert main(["certs", "init", str(tmp_path / "a")]) == 0  # --dir was required
    assert (tmp_path / "a" / "ca.pem").exists()
    assert main(["certs", "init", "--dir", str(tmp_path / "b")]) == 0 and (tmp_path / "b" / "ca.pem").exists()
    assert main(["certs", "init"]) == 2 and "give the directory" in capsys.readouterr().err


def test_demo_ports_are_never_a_backwards_range(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.toml"
    assert port_text([43931, 41305], inventory) == "ports 41305, 43931"  # it said "43931..41305"
    assert port_text([7001, 7000, 7002], inventory) == "ports 7000..7002"
    assert port_text([9], inventory) == "port 9"
    many = port_text([5, 50, 9, 3, 70], inventory)
    assert many == f"ports 3, 5, 9, … (5 ports, listed in {inventory})"


def test_make_demo_says_it_is_installing_before_it_installs(tmp_path: Path) -> None:
    run = subprocess.run(
        ["make", "-n", f"VENV={tmp_path / 'venv'}", "demo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    lines = run.stdout.splitlines()
    said = next(
        i for i, line in enumerate(lines) if line.startswith("echo") and "installing devicectl" in line
    )
    pip = next(i for i, line in enumerate(lines) if "pip install" in line)
    assert said < pip


async def test_long_cells_are_whole_in_a_pipe(site: Site) -> None:
    args = ("send", "gpu-policies", "--device", "node001", "--gpu", "0=5000", "--gpu", "1=6000", "--wait")
    run = await _cli(site, *args)
    assert run.code == 1, run.out + run.err
    listed = await _cli(site, "requests", "list")
    row = next(line for line in listed.lines if "gpu_policies_update" in line)
    assert "…" not in row and len(row) > 120, row  # the error was cut at 80 characters with "…"
    set_output("table")


@pytest.mark.parametrize("command", ["fingerprint", "stats"])
def test_fingerprint_and_stats_run_the_inventorys_plugin_tables(tmp_path: Path, command: str) -> None:
    files = tmp_path / "files"
    files.mkdir()
    (files / "only-here.txt").write_text("x\n")
    inventory = tmp_path / "inventory.toml"

    def write(folder: str) -> None:
        serve = [sys.executable, "-m", "controller", "plugin", "serve", "filedevices"]
        inventory.write_text(
            f'[[plugin]]\nname = "files"\ncommand = {json.dumps(serve)}\n'
            f"config = {{ dir = {json.dumps(folder)} }}\n"
            '\n[[device]]\nid = "files-1"\nplugin = "files"\n'
        )

    write(str(files))
    run = pipe(command, "--inventory", str(inventory), "-o", "json", timeout=120)
    assert run.code == 0, run.err
    assert "only-here.txt" in run.out and "pyproject.toml" not in run.out  # it listed the current directory
    write("/nonexistent")
    run = pipe(command, "--inventory", str(inventory), timeout=120)
    assert run.code == 1 and "'/nonexistent' is not a directory" in run.err, run.err  # it exited 0


async def test_profile_writes_name_their_component(site: Site) -> None:
    planned = await _cli(
        site, "send", "profiles-enable", "--device", "node001", "--enable", "5", "--dry-run", "-o", "json"
    )
    plan = json.loads(planned.out)  # (a dry run cannot read a profile back: it plans, then "would fail")
    rows = [w for w in plan["writes"] if "ProfileMask" in w["body_json"]]
    assert rows and all(w["component"].startswith("GPU ") for w in rows), rows  # they named none
    sent = await _cli(
        site, "send", "profiles-enable", "--device", "node001", "--enable", "5", "--request-id", "prof-1",
        "--wait", "--no-verify",
    )  # fmt: skip
    assert sent.code == 0, sent.out + sent.err
    shown = await _cli(site, "requests", "show", "prof-1", "-o", "json")
    writes = [w for w in json.loads(shown.out)["writes"] if "ProfileMask" in w["body_json"]]
    assert writes and all(w["component"].startswith("GPU ") for w in writes), writes
    table = await _cli(site, "requests", "show", "prof-1")
    assert any(line.split()[:2] in (["GPU", "0"], ["1", "GPU"]) for line in table.lines), table.out


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_log_lines_of_one_of_several_processes_carry_its_instance_id(fmt: str) -> None:
    import io
    import logging

    from controller.observability import logs

    out = io.StringIO()
    log = logging.getLogger("devicectl.test.instance")
    log.addHandler(logs.handler(out, fmt, instance="wk-w2"))
    log.addHandler(logs.handler(out, fmt))  # a single process: no instance
    log.propagate, log.level = False, logging.INFO
    log.info("hello")
    tagged, plain = out.getvalue().splitlines()
    if fmt == "json":
        assert json.loads(tagged)["instance"] == "wk-w2" and "instance" not in json.loads(plain)
    else:
        assert " INFO instance=wk-w2 devicectl.test.instance " in tagged and "instance=" not in plain


async def test_send_through_the_sink_to_an_agent(sink: TopologySink, start_controller: Any) -> None:
    from tests.controller.conftest import memory_inventory

    agent = {"callback": "", "agent_server": sink.address, "agent_id": "t-agent", "agent_reconnect_max": 1.0}
    h = await start_controller(memory_inventory(1), **agent)

    async def send(*args: str) -> Any:
        return await asyncio.to_thread(pipe, "--server", sink.address, "send", "ping", *args)

    try:
        while not h.controller.agent_transport.connected:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        sent = await send("--device", "node000", "--request-id", "via-1")
        # it said "not a devicectl controller" and sent nothing
        assert sent.code == 0 and "accepted request_id=via-1" in sent.out, sent.out + sent.err
        await sink.wait_for({"via-1"}, timeout=15)  # the agent ran it and answered the sink
        waited = await send("--device", "node000", "--request-id", "via-2", "--wait")
        assert waited.code == 1 and "accepted request_id=via-2" in waited.out
        assert "sent through the topology sink to its agent" in " ".join(waited.err.split())
        await sink.wait_for({"via-2"}, timeout=15)
        unknown = await send("--device", "nosuch")
        assert unknown.code != 0 and "no agent owns device 'nosuch'" in unknown.err, unknown.err
    finally:
        await h.controller.stop()


async def test_exit_codes_are_the_documented_ones(site: Site) -> None:
    """0 ok, 1 not found or unhealthy, 2 usage (docs/operations.md, "Command-line conventions")."""
    doc = " ".join((ROOT / "docs" / "operations.md").read_text().split())
    assert "**0** ok; **1** not found or unhealthy" in doc and "**2** usage and input problems" in doc
    cases = [
        (0, ("status",)),
        (0, ("devices", "list", "-o", "name")),
        (1, ("devices", "show", "no-such-node")),
        (1, ("requests", "show", "no-such-request")),
        (2, ("requests", "list", "--limit", "0")),
        (2, ("requests", "list", "--since", "soon")),
        (2, ("requests", "list", "--kind", "a", "--kind", "b")),
        (2, ("send", "gpu-policies", "--device", "node001", "--gpu", "0=1.5")),
        (2, ("devices", "list", "-o", "xml")),
    ]
    for code, args in cases:
        run = await _cli(site, *args)
        assert run.code == code, (args, run.out, run.err)
        if code:
            assert len(run.err.strip().splitlines()) == 1 and "Traceback" not in run.err, (args, run.err)
