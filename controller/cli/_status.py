"""`devicectl status`: the journal and the topology callback, as the processes that deliver see
them (a `serve --workers` front end combines its executors': each one's callback, the backlog
once), with exit 1 when anything is down."""

from __future__ import annotations

import argparse

from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller.cli._render import as_dict, print_json, table, when


def status_show(args: argparse.Namespace, s: apb.ControllerStatus) -> int:
    # exit 1 when anything is down, for scripts and monitoring: the journal or the callback
    healthy = s.journal_ok and s.callback_ok
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
    table("controller status", ("field", "value"), rows)
    return 0 if healthy else 1


_SHADOW = "SHADOW: requests planned, recorded and answered; no device write is sent"


def _warmup(w: apb.WarmupStatus) -> str:
    """Devices logged in and discovered at start (controller/execution/warmup.py)."""
    extra = ", ".join(f"{n} {what}" for n, what in ((w.failed, "failed"), (w.skipped, "skipped: busy")) if n)
    where = "done" if w.finished else "in progress"
    return f"{where}: {w.done} of {w.total} devices ready" + (f" ({extra})" if extra else "")


def _callback(s: apb.ControllerStatus) -> str:
    if s.callback_ok:
        return "ok" if not s.processes else f"ok (all {len(s.processes)} executors)"
    down = sum(not p.callback_ok for p in s.processes)
    since = f" since {when(s.callback_error_since)}" if s.HasField("callback_error_since") else ""
    return f"DOWN{since}" + (f" ({down} of {len(s.processes)} executors)" if s.processes else "")


def _process(p: apb.ProcessStatus) -> str:
    if p.callback_ok:
        return f"ok ({p.delivered} delivered)"
    since = f" since {when(p.callback_error_since)}" if p.HasField("callback_error_since") else ""
    return f"DOWN{since}: {p.callback_error}"
