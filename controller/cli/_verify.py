"""`devicectl verify NODE... | --all | --model M`, `verify list`, `verify show ID`: readiness
verification of devices before production caps (docs/operations.md "Before production").

The controller journals and runs the verification (it survives a restart: resumed, or reported
interrupted); the command waits for it with a progress line unless `--no-wait`, then shows one row per
device (and, for one device, every check). Exit 1 when a check failed or a verification could not
finish; warnings alone exit 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import click

from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller.cli._click import Group, call, client_options, output_options
from controller.cli._errors import UsageError
from controller.cli._lists import ALL, fetch, follow, list_options, page_rows, selector_option, show
from controller.cli._options import Options
from controller.cli._query import _call
from controller.cli._render import clip_cell, err_console, print_json, table, when_short
from controller.cli._writes import render_writes
from controller.verify import render

#: how often a waiting `verify` reads the progress
POLL_SECONDS = 0.5


class VerifyGroup(Group):
    """`verify list` and `verify show ID` are subcommands; anything else is a verification to start."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h")):
            args = ["run", *args]
        return super().parse_args(ctx, args)


def register(cli: click.Group) -> None:
    @cli.group("verify", cls=VerifyGroup)
    def verify() -> None:
        """Is a node ready for power management? Read-only checks, or a write cycle of every cap.

        \b
        devicectl verify node001 node002      these nodes (the same as `verify run ...`)
        devicectl verify --all                every inventory node
        devicectl verify --model GB200        every node of a model
        devicectl verify -l rack=r12          the nodes with these labels
        devicectl verify --write-cycle NODE   set, read back and restore every cap (admin)
        devicectl verify list | show ID       the history, or one verification
        `devicectl verify run --help` lists every option.
        """

    @verify.command("run")
    @click.argument("devices", nargs=-1)
    @click.option("--all", "all_devices", is_flag=True, help="every device of the inventory")
    @click.option("--model", default="", help="every device of this model")
    @selector_option
    @click.option("--write-cycle", is_flag=True, help="set, read back and restore every writable cap (admin)")
    @click.option("--force", is_flag=True, help="write-cycle a node even while a resource group is active")
    @click.option("--latency-samples", type=int, default=0, help="GETs of a limit resource  [default: 20]")
    @click.option("--latency-p95-ms", type=float, default=0.0, help="p95 latency threshold  [default: 1000]")
    @click.option(
        "--telemetry-interval-ms", type=int, default=0, help="between telemetry reads  [default: 500]"
    )
    @click.option("--samples-per-telemetry", type=int, default=0, help="telemetry reads  [default: 2]")
    @click.option(
        "--write-resolution-timeout-ms",
        type=int,
        default=0,
        help="read-back window per write  [default: 1000]",
    )
    @click.option("--no-wait", is_flag=True, help="return once journaled (follow with `verify show BATCH`)")
    @click.option("--wait-timeout", type=float, default=3600.0, show_default=True, help="seconds to wait")
    @output_options
    @client_options
    def _run(**_: Any) -> int:
        """Verify devices: NODE..., --all, --model M or -l KEY=VALUE (one of them)."""
        return call(verify_run)

    @verify.command("list")
    @click.option("--device", help="only this device's verifications")
    @click.option("--status", help="queued, running, done, failed or interrupted")
    @list_options(50)
    @click.option("--wide", is_flag=True, default=False, help="nothing cut (tables shorten long cells)")
    @output_options
    @client_options
    def _list(**_: Any) -> int:
        """The verification history, newest first."""
        return call(verify_list)

    @verify.command("show")
    @click.argument("check_id")
    @output_options
    @client_options
    def _show(**_: Any) -> int:
        """One verification with every check, or every verification of a run (its batch id)."""
        return call(verify_show)


def verify_run(args: Options) -> int:
    if args.force and not args.write_cycle:
        raise UsageError("--force applies to --write-cycle only")
    given = [name for name, on in _CHOICES.items() if on(args)]
    if len(given) != 1:
        what = " and ".join(given) if given else "none"
        raise UsageError(f"verify: give one of NODE..., --all, --model or -l (given: {what})")
    request = apb.StartVerifyRequest(
        devices=list(args.devices),
        all=args.all_devices,
        model=args.model,
        selector=args.selector,
        samples_per_telemetry=args.samples_per_telemetry,
        telemetry_interval_ms=args.telemetry_interval_ms,
        write_resolution_timeout_ms=args.write_resolution_timeout_ms,
        latency_samples=args.latency_samples,
        latency_p95_ms=args.latency_p95_ms,
        force=args.force,
    )
    started = _call(args, "StartWriteCycle" if args.write_cycle else "StartVerify", request)
    batch = started.batch_id or (started.checks[0].batch_id if started.checks else "")
    if args.no_wait:
        return _show(args, _whole_run(args, batch, started), f"verification {batch} queued")
    _wait(args, batch)
    return _show(args, _whole_run(args, batch), f"verification {batch}")


def _wait(args: Options, batch: str) -> None:
    """Until no verification of the run is queued or running (counted by the server over the whole
    run, however many pages it holds), or --wait-timeout."""
    until = time.monotonic() + args.wait_timeout
    shown = ""
    while True:
        got = _call(args, "GetBmcCheck", apb.GetBmcCheckRequest(id=batch, progress_only=True))
        progress = got.progress if got.HasField("progress") else render.counted(got.checks)
        line = render.progress(progress)
        if line != shown and not args.json:
            err_console.print(f"{batch}: {line}", highlight=False)
            shown = line
        if not render.unfinished(progress) or time.monotonic() > until:
            return
        time.sleep(POLL_SECONDS)


def _whole_run(args: Options, batch: str, first: apb.VerifyBatch | None = None) -> list[apb.BmcCheckRecord]:
    """Every verification of the run, page after page (`first`: a page already in hand)."""

    def page(token: str) -> tuple[list[apb.BmcCheckRecord], str]:
        if first is not None and not token:
            return list(first.checks), first.next_page_token
        answer = _call(args, "GetBmcCheck", apb.GetBmcCheckRequest(id=batch, page_token=token))
        return list(answer.checks), answer.next_page_token

    return follow(page, ALL)


#: the ways to say which devices to verify: exactly one is given
_CHOICES: dict[str, Callable[[Options], bool]] = {
    "NODE...": lambda a: bool(a.devices),
    "--all": lambda a: bool(a.all_devices),
    "--model": lambda a: bool(a.model),
    "-l": lambda a: bool(a.selector),
}


def verify_list(args: Options) -> int:
    def get(limit: int) -> list[apb.BmcCheckRecord]:
        """Pages sized by the rows asked for (`--all`: the largest page), not by `--limit`'s default."""

        def page(token: str) -> tuple[list[apb.BmcCheckRecord], str]:
            query = apb.ListBmcChecksRequest(
                device=args.device or "",
                status=args.status or "",
                page_size=page_rows(limit),
                page_token=token,
                selector=args.selector or "",
            )
            answer = _call(args, "ListBmcChecks", query)
            return list(answer.checks), answer.next_page_token

        return follow(page, limit)

    return show(
        args,
        lambda: fetch(args, get, lambda c: c.created_at),
        kind="verification",
        name=lambda c: c.check_id,
        render=lambda rows: _table(args, rows, "verifications"),
        what="verifications",
        record=render.as_json,
    )


def verify_show(args: Options) -> int:
    first = _call(args, "GetBmcCheck", apb.GetBmcCheckRequest(id=args.check_id))
    if not first.batch_id:  # one verification
        return _show(args, list(first.checks), "")
    return _show(args, _whole_run(args, first.batch_id, first), "")


def _show(args: Options, checks: list[apb.BmcCheckRecord], title: str) -> int:
    if args.json:
        print_json([render.as_json(c) for c in checks])
    else:
        _table(args, checks, title)
        if len(checks) == 1:
            table("", ("check", "result", "detail"), _detail_rows(args, checks[0]), cut_first=("detail",))
            if checks[0].writes:
                render_writes(list(checks[0].writes))
    bad = [c for c in checks if c.verdict == "fail" or c.status in ("failed", "interrupted")]
    return 1 if bad else 0


def _table(args: Options, checks: list[apb.BmcCheckRecord], title: str) -> None:
    rows = render.summary_rows(checks)
    table(
        title,
        ("id", "device", "status", "verdict", "finished", "not passed"),
        (
            (r[0], r[1], r[2], r[3], when_short(c.finished_at), clip_cell(r[4], args.wide))
            for r, c in zip(rows, checks, strict=True)
        ),
        cut_first=("not passed",),
    )


def _detail_rows(args: Options, check: apb.BmcCheckRecord) -> list[list[str]]:
    return [
        [name, status, clip_cell(detail, args.wide, 160)] for name, status, detail in render.check_rows(check)
    ]
