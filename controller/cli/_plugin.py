"""`devicectl plugin serve|launch`: serve an installed plugin out of process, or talk to one directly.

`launch` plays the host's part without a controller (like Nomad's plugin launcher): it starts or
dials the plugin, negotiates, sends the config, then runs one action. Streams print each update
as it arrives: a table per update by default, one JSON object per line with `--json` (or
`-o json`, anywhere on the line, like every devicectl command).
"""

from __future__ import annotations

import asyncio
import json
import logging
import shlex
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from controller.cli._click import Command, Group, call, output_options
from controller.cli._options import Options
from controller.cli._render import console, print_item, table
from plugins.base import (
    DeviceContext,
    DeviceControllerError,
    DeviceTarget,
    Endpoint,
    FingerprintResponse,
    StatsResponse,
)
from plugins.base.kinds import KINDS, kind_of


class _Action(Command):
    """One `plugin launch` action; `what` names it for the handler."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.defaults = {"what": self.name}


def _launch(**_: Any) -> int:
    return call(cmd_launch)


def register(cli: click.Group) -> None:
    @cli.group("plugin", cls=Group)
    @output_options
    def plugin() -> None:
        """Serve or drive out-of-process device plugins."""

    @plugin.command("serve")
    @click.argument("name")
    @click.option("--address", help='"unix:PATH" or "HOST:PORT" (default: a fresh Unix socket)')
    @click.option("--manual", is_flag=True, default=False, help="run without the magic cookie a host sets")
    @output_options
    def _serve(**_: Any) -> int:
        """Serve an installed plugin as its own process (go-plugin/Nomad protocol).

        NAME: installed plugin name (e.g. redfish, nvml, filedevices) or module:Class.
        """
        return call(cmd_serve)

    @plugin.group("launch", cls=_Launch)
    @click.option(
        "--command", help='command that serves the plugin, e.g. "devicectl plugin serve filedevices"'
    )
    @click.option("--address", help="dial a plugin served elsewhere (unix:PATH or HOST:PORT)")
    @click.option("--config", default="{}", help="plugin config: JSON object, or @FILE")
    @click.option(
        "--timeout", type=float, default=10.0, show_default=True, help="handshake and call timeout, s"
    )
    @output_options
    def launch(**_: Any) -> None:
        """Start (--command) or dial (--address) a plugin and drive it without a controller."""

    def action(name: str, helptext: str, *params: click.Parameter) -> None:
        command = _Action(name, callback=_launch, params=list(params), help=helptext)
        launch.add_command(output_options(command))  # type: ignore[arg-type]

    count = click.Option(
        ["--count"], type=int, default=0, help="stop after this many updates (0: until Ctrl-C)"
    )
    action("info", "plugin info and negotiated API version")
    action("schema", "the plugin's config schema")
    action("config", "negotiate and send --config, report whether it was accepted")
    action("fingerprint", "print device groups as they stream", count)
    action(
        "stats",
        "print statistics at an interval",
        click.Option(["--interval"], type=float, default=1.0, show_default=True, help="seconds between them"),
        click.Option(["--count"], type=int, default=0, help="stop after this many updates (0: until Ctrl-C)"),
    )
    action(
        "reserve",
        "reserve devices: environment, mounts, device nodes",
        click.Argument(["device_ids"], nargs=-1, required=True),
    )
    action(
        "op",
        "run one power operation: KIND on --device",
        click.Argument(["kind"], type=click.Choice(list(KINDS.names()))),
        click.Option(["--device"], required=True, help="the device to run it on"),
        click.Option(["--request"], default="{}", help="the kind's request: JSON object, or @FILE"),
        click.Option(["--model"], default="{}", help="device model JSON object, or @FILE"),
        click.Option(["--state"], default="{}", help="device state JSON object, or @FILE"),
        click.Option(["--url"], default="", help="device endpoint URL"),
        click.Option(["--options"], default="{}", help="endpoint options JSON object, or @FILE"),
    )


class _Launch(Group):
    """`plugin launch` needs exactly one of --command and --address (checked before the action)."""

    def invoke(self, ctx: click.Context) -> Any:
        if bool(ctx.params.get("command")) == bool(ctx.params.get("address")):
            raise click.UsageError("give one of --command and --address", ctx)
        return super().invoke(ctx)


def cmd_serve(args: Options) -> int:
    from controller.process import runtime
    from plugins import registry
    from plugins.base import serve

    # the plugin process holds the BMC connections now: it needs the controller's tuning (GC, TLS buffers)
    runtime.tune_process()
    try:
        plugin = registry.load_class(args.name)()
    except DeviceControllerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    runtime.freeze_startup_objects()
    return serve(plugin, address=args.address, manual=args.manual)


def _json_arg(text: str, what: str) -> dict[str, Any]:
    try:
        raw = Path(text[1:]).read_text() if text.startswith("@") else text
        value = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{what}: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{what}: must be a JSON object")
    return value


def cmd_launch(args: Options) -> int:
    from controller.plugin_host.launch import ExternalPlugin
    from controller.plugin_host.remote import RemotePlugin

    # the plugin's own output (stderr, stdout, go-plugin's stdio stream) goes to our stderr
    host_log = logging.getLogger(ExternalPlugin.__module__)
    if not any(getattr(h, "plugin_launch", False) for h in host_log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler.plugin_launch = True  # type: ignore[attr-defined]
        host_log.addHandler(handler)
        host_log.setLevel(logging.INFO)
    spec = ExternalPlugin(
        name="",  # messages name the plugin by its PluginInfo once it answers
        command=tuple(shlex.split(args.command)) if args.command else (),
        address=args.address or "",
        config=_json_arg(args.config, "--config"),
        handshake_timeout=args.timeout,
    )

    async def main() -> int:
        # SIGTERM (and SIGHUP) cancel the action so that `finally` shuts the plugin process down:
        # the default handler ended this process at once and left the plugin running, orphaned.
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        caught: list[int] = []

        def stop(signum: int) -> None:
            caught.append(signum)
            task.cancel()

        for signum in (signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(signum, stop, signum)
        plugin = RemotePlugin(spec)
        started = False
        try:
            try:
                await plugin.start(supervise=False)
            except DeviceControllerError as exc:
                print(f"error: {exc}", file=sys.stderr)  # one line: no wrapping, no markup
                return 1
            started = True
            try:
                return await _act(plugin, args)
            except DeviceControllerError as exc:
                print(f"error: {exc}", file=sys.stderr)  # one line: no wrapping, no markup
                return 1
            finally:
                await plugin.close()
        except asyncio.CancelledError:
            if not caught:
                raise
            if not started:
                await plugin.close()  # a start cut short may have left a process
            return 128 + caught[0]

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        return 130
    except asyncio.CancelledError:  # SIGTERM
        return 143


def _emit(value: Mapping[str, Any]) -> None:
    print_item(value)


async def _act(plugin: Any, args: Options) -> int:
    from controller.plugin_host.remote import RemotePlugin
    from plugins._proto.nomad.plugins.base import base_pb2
    from plugins.base import nomad
    from plugins.base.codec import decode, encode

    assert isinstance(plugin, RemotePlugin)
    conn = plugin.connection
    assert conn is not None
    if args.what in ("info", "config"):
        info = {
            "name": conn.info.name,
            "version": conn.info.plugin_version,
            "api_versions": list(conn.info.plugin_api_versions),
            "negotiated": conn.api_version,
            "config": "accepted",
        }
        if args.json:
            _emit(info)
        else:
            table("plugin", ["field", "value"], info.items())
        return 0
    if args.what == "schema":
        reply = await conn.base.ConfigSchema(base_pb2.ConfigSchemaRequest(), timeout=args.timeout)
        rows = nomad.hcl_to_rows(reply.spec)
        if args.json:
            _emit({"attributes": rows})
        else:
            table(
                "config schema",
                ["name", "type", "required", "default"],
                [(r["name"], r["type"], r["required"], r["default"]) for r in rows],
            )
        return 0
    if args.what == "fingerprint":
        seen = 0
        async for update in plugin.fingerprint(()):
            _show_fingerprint(args, update)
            if update.error is not None:
                return 1
            seen += 1
            if args.count and seen >= args.count:
                return 0
        return 0
    if args.what == "stats":
        seen = 0
        async for stats in plugin.stats((), args.interval):
            _show_stats(args, stats)
            if stats.error is not None:
                return 1
            seen += 1
            if args.count and seen >= args.count:
                return 0
        return 0
    if args.what == "reserve":
        res = await plugin.reserve(args.device_ids)
        if args.json:
            _emit(encode(res))
        else:
            table("environment", ["name", "value"], sorted(res.envs.items()))
            table(
                "mounts",
                ["task path", "host path", "read only"],
                [(m.task_path, m.host_path, m.read_only) for m in res.mounts],
            )
            table(
                "device nodes",
                ["task path", "host path", "permissions"],
                [(d.task_path, d.host_path, d.cgroup_perms) for d in res.devices],
            )
        return 0
    # a power operation
    kind = kind_of(args.kind)
    request = decode(kind.request, _json_arg(args.request, "--request"), "--request")
    target = DeviceTarget(
        device_id=args.device,
        model=_json_arg(args.model, "--model"),
        endpoint=Endpoint(url=args.url, options=_json_arg(args.options, "--options")),
    )
    ctx = DeviceContext(
        device_id=target.device_id,
        model=target.model,
        endpoint=target.endpoint,
        request_id=f"launch-{int(time.time())}",
        deadline=time.monotonic() + args.timeout,
        state=_json_arg(args.state, "--state"),
    )
    outcome = await plugin.operate(kind, ctx, request)
    out = {
        "result": encode(outcome.result),
        "state": encode(outcome.state),
        "reach_error": outcome.reach_error,
    }
    if args.json:
        _emit(out)
    else:
        table(
            f"{kind.name} on {args.device}", ["field", "value"], [(k, json.dumps(v)) for k, v in out.items()]
        )
    return 0


def _show_fingerprint(args: Options, update: FingerprintResponse) -> None:
    from plugins.base.codec import encode

    if args.json:
        _emit(encode(update))
        return
    if update.error is not None:
        print(f"fingerprint error: {update.error}", file=sys.stderr)
        return
    rows = [
        (
            f"{g.vendor}/{g.type}/{g.name}",
            d.id,
            "healthy" if d.healthy else f"unhealthy: {d.health_description}",
        )
        for g in update.groups
        for d in g.devices
    ]
    table("fingerprint", ["group", "device", "health"], rows)


def _show_stats(args: Options, stats: StatsResponse) -> None:
    from plugins.base.codec import encode

    if args.json:
        _emit(encode(stats))
        return
    if stats.error is not None:
        print(f"stats error: {stats.error}", file=sys.stderr)
        return
    rows = []
    for g in stats.groups:
        for device, st in sorted(g.instance_stats.items()):
            s = st.summary
            value = next(
                v for v in (s.int_numerator, s.float_numerator, s.string, s.boolean, "") if v is not None
            )
            rows.append(
                (
                    f"{g.vendor}/{g.type}/{g.name}",
                    device,
                    f"{value} {s.unit}".strip(),
                    st.timestamp.isoformat(),
                )
            )
    table("stats", ["group", "device", "summary", "at"], rows)
    console.print()
