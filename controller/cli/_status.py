"""`devicectl status`: the journal and the topology callback, as the processes that deliver see
them (a `serve --workers` front end combines its executors': each one's callback, the backlog
once), with exit 1 when anything is down."""

from __future__ import annotations

from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller.cli._options import Options
from controller.cli._render import as_dict, print_json, table, when


def status_show(args: Options, s: apb.ControllerStatus) -> int:
    # exit 1 when anything is down, for scripts and monitoring: the journal, the callback, or an
    # executor process
    healthy = s.journal_ok and s.callback_ok and not any(p.not_running for p in s.processes)
    if args.json:
        print_json({**as_dict(s), "healthy": healthy})
        return 0 if healthy else 1
    rows: list[tuple[str, object]] = [
        ("mode", _SHADOW if s.shadow else "live (device writes sent)"),
        ("journal", "ok" if s.journal_ok else f"FAILING since {when(s.journal_error_since)}"),
        ("journal error", s.journal_error),
        ("topology callback", _callback(s)),
        ("callback error", s.callback_error),
    ]
    for p in s.processes:  # a --workers front end: each executor's own view
        rows.append((f"  callback at {p.instance_id}", _process(p)))
    delivered = "delivered (its executors)" if s.processes else "delivered (this process)"
    rows += [("undelivered", s.undelivered), ("dead letters", s.dead_letters), (delivered, s.delivered)]
    if s.HasField("warmup") and s.warmup.total:
        rows.append(("warm-up", _warmup(s.warmup)))
    if s.HasField("fleet"):
        rows.append(("fleet", _fleet(s.fleet)))
    table("controller status", ("field", "value"), rows)
    return 0 if healthy else 1


_SHADOW = "SHADOW: requests planned, recorded and answered; no device write is sent"


def _warmup(w: apb.WarmupStatus) -> str:
    """Devices logged in and discovered at start (controller/execution/warmup.py)."""
    extra = ", ".join(f"{n} {what}" for n, what in ((w.failed, "failed"), (w.skipped, "skipped: busy")) if n)
    where = "done" if w.finished else "in progress"
    return f"{where}: {w.done} of {w.total} devices ready" + (f" ({extra})" if extra else "")


def _callback(s: apb.ControllerStatus) -> str:
    dead = sum(bool(p.not_running) for p in s.processes)
    gone = f"; {dead} executor(s) not running" if dead else ""
    if s.callback_ok:
        if not s.processes:
            return "ok"
        running = len(s.processes) - dead
        return (
            f"ok (all {running} running executors{gone})"
            if dead
            else f"ok (all {len(s.processes)} executors)"
        )
    down = sum(not p.callback_ok and not p.not_running for p in s.processes)
    since = f" since {when(s.callback_error_since)}" if s.HasField("callback_error_since") else ""
    return f"DOWN{since}" + (f" ({down} of {len(s.processes)} executors{gone})" if s.processes else "")


def _process(p: apb.ProcessStatus) -> str:
    if p.not_running:
        return f"NOT RUNNING: {p.not_running}"
    if p.callback_ok:
        return f"ok ({p.delivered} delivered)"
    since = f" since {when(p.callback_error_since)}" if p.HasField("callback_error_since") else ""
    return f"DOWN{since}: {p.callback_error}"


def _fleet(f: apb.FleetSummary) -> str:
    """`50 nodes: 2 drifted, 1 unreachable, 48 unverified` (`devices limits`, `devices health`,
    `verify` say which)."""
    parts = [f"{f.drifted} drifted", f"{f.unreachable} unreachable", f"{f.unverified} unverified"]
    if f.never_checked:
        parts.append(f"{f.never_checked} never checked")
    return f"{f.nodes} nodes: " + ", ".join(parts)
