"""Per-login cost of the identity's record of Redfish sessions (`plugins.base.identity`), with
500 / 2,000 / 10,000 BMC origins in it: what the caller's thread (the event loop) spends, and the
whole process's CPU (the record's writer thread included).

    python -m bench.session_record                      # this tree
    python -m bench.session_record --against 2bbb083    # and a ref's `identity.py`, alternating

A login notes its new session (and the one it replaced) and waits until the line is written. The
figures are CPU time (`time.thread_time`, `time.process_time`), not wall time: they hold on a
shared host. Nothing here is asserted by tests (tests/plugins/test_identity.py checks what the
record holds, never how fast).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.util import ROOT

SIZES = (500, 2_000, 10_000)
LOGINS = 400


def _module(ref: str | None) -> ModuleType:
    """`plugins.base.identity` of this tree, or of git `ref` (loaded under another name)."""
    if ref is None:
        from plugins.base import identity

        return identity
    for path in ("plugins/base/identity.py", "plugins/base/_identity.py"):  # its name before 2026-12
        shown = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{ref}:{path}"], capture_output=True, text=True, check=False
        )
        if shown.returncode == 0:
            source = shown.stdout
            break
    else:
        raise SystemExit(f"{ref}: no plugins/base/identity.py")
    spec = importlib.util.spec_from_loader(f"_identity_{ref}", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, f"{ref}:{path}", "exec"), module.__dict__)
    return module


def _wait(result: Any) -> None:
    if result is not None and hasattr(result, "result"):
        result.result()


def per_login(module: ModuleType, origins: int, logins: int = LOGINS) -> dict[str, float]:
    """Microseconds of CPU per login with `origins` BMCs in the record."""
    with tempfile.TemporaryDirectory() as tmp:
        os.environ[module.RUN_DIR_ENV] = tmp
        identity = module.ProcessIdentity("bench").acquire()
        try:
            for i in range(origins):
                _wait(identity.note_created(f"https://bmc{i}:443", "/redfish/v1/SessionService/Sessions/a"))
            if hasattr(identity, "flush"):
                identity.flush()
            thread0, process0 = time.thread_time(), time.process_time()
            for k in range(logins):
                origin = f"https://bmc{(k * 7919) % origins}:443"
                identity.note_deleted(origin, "/redfish/v1/SessionService/Sessions/a")
                _wait(identity.note_created(origin, "/redfish/v1/SessionService/Sessions/a"))
            thread_s, process_s = time.thread_time() - thread0, time.process_time() - process0
            record_bytes = sum(p.stat().st_size for p in Path(tmp).rglob("*.json*"))
        finally:
            identity.release()
    return {
        "caller_us": thread_s / logins * 1e6,
        "process_us": process_s / logins * 1e6,
        "record_bytes": float(record_bytes),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.session_record", description=__doc__.split("\n\n")[0])
    p.add_argument("--against", metavar="REF", help="also measure this git ref's record, alternating")
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help="BMC origins in the record")
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds of each side")
    args = p.parse_args(argv)
    sides = {"tree": _module(None)}
    if args.against:
        sides[args.against] = _module(args.against)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    best: dict[tuple[str, int], dict[str, float]] = {}
    for _ in range(args.rounds):
        for n in sizes:
            for name, module in sides.items():
                row = per_login(module, n, LOGINS if name == "tree" else max(50, LOGINS * 500 // n))
                kept = best.get((name, n))
                if kept is None or row["process_us"] < kept["process_us"]:
                    best[(name, n)] = row  # the least disturbed round (a shared host adds, never removes)
    print(f"{'side':<10} {'BMCs':>7} {'caller CPU/login':>17} {'process CPU/login':>18} {'record':>10}")
    for (name, n), row in sorted(best.items(), key=lambda kv: (kv[0][0] != "tree", kv[0][1])):
        print(
            f"{name:<10} {n:>7} {row['caller_us']:>14.1f} us {row['process_us']:>15.1f} us "
            f"{row['record_bytes'] / 1024:>7.0f} KiB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
