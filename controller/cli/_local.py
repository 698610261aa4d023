"""Commands that work on local things: the database schema (`db`), the topology sink, test
certificates (`certs`) and the demo."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import click

from controller.cli._errors import UsageError, check_sqlite_directory
from controller.cli._options import Options
from controller.cli._render import console, print_error, print_json


def newer_schema_message(status: Any) -> str:
    from controller.store import newer_schema_message as message

    return str(message(status))


def _store(args: Options) -> Any:
    from controller.config import load_settings
    from controller.store import Store

    settings = load_settings(args.config, overrides={"database_url": args.database_url})
    check_sqlite_directory(settings.database_url, create=args.action == "upgrade")
    return Store.from_url(settings.database_url)


def cmd_db_upgrade(args: Options) -> int:
    store = _store(args)
    before = store.schema_status()
    if before.newer:  # alembic would say "Can't locate revision": say whose schema it is
        print_error(newer_schema_message(before))
        return 1
    from controller.process.writer import WriterConflictError, schema_change_lock

    try:
        # held for the whole change: a `serve` starting meanwhile is refused, not served a
        # schema being changed under it
        with schema_change_lock(store.url, f"db {args.action}", force=args.force):
            if args.action == "downgrade":
                target = _previous(before.current) if args.revision is None else args.revision
                if target == "base" and not _confirmed_base(args, store.url_for_display):
                    print_error(
                        "not downgraded: `base` drops every table and every row (confirm, or pass --yes)"
                    )
                    return 1
                store.downgrade(target)
            else:
                store.upgrade()
    except WriterConflictError as exc:
        print_error(
            f"a live devicectl serves this database ({exc}); stop it before changing the schema "
            f"(`db {args.action} --force` does it anyway, and that controller will fail under you)"
        )
        return 1
    after = store.schema_status()
    if args.json:
        print_json({"database": store.url_for_display, "before": before.current, "after": after.current})
    else:
        console.print(
            f"{store.url_for_display}: schema {before.current or 'empty'} -> {after.current or 'empty'}"
        )
    return 0


def _confirmed_base(args: Options, where: str) -> bool:
    """`downgrade base` wipes the database: ask on a terminal, refuse without one (unless --yes)."""
    if args.yes:
        return True
    import sys

    if not sys.stdin.isatty():
        return False
    return bool(click.confirm(f"{where}: drop every devicectl table and all their rows?", default=False))


def _previous(current: str | None) -> str:
    """`db downgrade` without a revision: one step back (from the first revision: empty)."""
    from controller.store import revisions

    known = revisions()
    if current is None:
        raise UsageError("the database has no schema: nothing to downgrade")
    at = known.index(current)
    return known[at - 1] if at > 0 else "base"


def cmd_db_status(args: Options) -> int:
    status = _store(args).schema_status()
    if args.json:
        print_json(
            {
                "current": status.current,
                "head": status.head,
                "up_to_date": status.up_to_date,
                "newer": status.newer,
            }
        )
    elif status.newer:
        console.print(newer_schema_message(status))
    else:
        state = "up to date" if status.up_to_date else "outdated: run `devicectl db upgrade`"
        console.print(f"schema {status.current or 'empty'} (newest {status.head}): {state}")
    return 0 if status.up_to_date else 1


def cmd_db_prune(args: Options) -> int:
    from datetime import UTC, datetime

    from controller.config import load_settings
    from controller.process.retention import retention_policy
    from controller.store import Store, prune

    overrides = {
        f"retention_{t}_days": getattr(args, f"{t}_days")
        for t in ("journal", "outbox", "dead_letter", "audit")
    }
    s = load_settings(args.config, overrides={"database_url": args.database_url, **overrides})
    check_sqlite_directory(s.database_url, create=False)
    policy = retention_policy(s)
    store = Store.from_url(s.database_url)
    store.ensure_schema()

    async def run() -> Any:
        await store.start()
        try:
            return await prune(store, policy, datetime.now(UTC))
        finally:
            await store.close()

    result = asyncio.run(run())
    if args.json:
        print_json({"deleted": result.deleted})
    else:
        console.print(", ".join(f"{table}: {n} deleted" for table, n in result.deleted.items()))
    return 0


def cmd_sink(args: Options) -> int:
    from controller import translate
    from controller.delivery.agent_server import load_routes
    from controller.delivery.sink import TopologySink
    from controller.security.tls import ServerTls

    def show(response: Any) -> None:
        ok, error = translate.success_of(response)
        kind = response.WhichOneof("response")
        text = "ok" if ok else f"FAILED: {error}"
        print(f"{response.device} {kind} {response.request_id}: {text}", flush=True)

    async def main() -> int:
        sink = TopologySink(
            args.listen,
            record=args.record,
            on_response=show,
            tls=ServerTls(args.tls_cert or "", args.tls_key or "", args.tls_client_ca or ""),
            insecure=bool(getattr(args, "insecure", False)),
            routes=load_routes(args.routes) if args.routes else None,
        )
        await sink.start()
        print(f"topology sink listening on {sink.address}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await sink.stop()
        return 0

    return asyncio.run(main())


def cmd_demo(args: Options) -> int:
    from controller.cli._demo import run_demo

    return run_demo(
        nodes=args.nodes,
        workdir=args.workdir,
        mtls=args.mtls,
        verbose=args.verbose,
        as_json=args.json,
        agent=args.agent,
    )


def cmd_certs(args: Options) -> int:
    from controller.security import certs

    if args.dir and args.directory and args.dir != args.directory:
        raise UsageError(f"certs init: two directories given ({args.directory}, --dir {args.dir}): give one")
    directory = args.dir or args.directory
    if not directory:
        raise UsageError("certs init: give the directory (certs init DIR, or --dir DIR)")
    made = certs.init(directory, tuple(args.name) if args.name else certs.DEFAULT_CLIENTS)
    if args.json:
        print_json(
            {
                "ca": str(made.ca),
                "server_cert": str(made.server_cert),
                "server_key": str(made.server_key),
                "clients": {n: {"cert": str(c), "key": str(k)} for n, (c, k) in made.clients.items()},
            }
        )
        return 0
    console.print(f"CA          {made.ca}")
    console.print(f"server      {made.server_cert} (key {made.server_key}; SAN localhost, 127.0.0.1, ::1)")
    for name, (cert, key) in made.clients.items():
        console.print(f"client      {cert} (key {key}; CN {name})")
    roles = ",".join(f"{n}={n}" for n in made.clients if n in ("topology", "operator", "admin"))
    console.print(
        f"serve with: --tls-cert {made.server_cert} --tls-key {made.server_key} --tls-client-ca {made.ca}"
        + (f' --roles "{roles}"' if roles else "")
    )
    return 0
