"""`devicectl agent` (the controller dialing out to a topology server) and `devicectl sink agents`
(the agents a topology sink knows). See docs/architecture.md, "Two transports"."""

from __future__ import annotations

import time
from typing import Any

import click

from controller.cli._click import Group, call, client_options, output_options
from controller.cli._errors import UsageError
from controller.cli._options import Options
from controller.cli._render import console, print_error, print_json
from controller.cli._serve import cmd_serve, settings_from, settings_options


def register(cli: click.Group) -> None:
    @cli.command("agent")
    @settings_options
    @click.option("--print-config", is_flag=True, default=False, help="print the effective settings and exit")
    @output_options
    def _agent(**_: Any) -> int:
        """Run the controller in agent mode: dial out to the topology server, no inbound port needed."""
        return call(cmd_agent)

    @cli.group("sink", cls=Group)
    @output_options
    def sink() -> None:
        """Ask a topology sink (devicectl topology-sink)."""

    @sink.command("agents")
    @click.option(
        "--sink",
        "--server",
        "sink",
        default="127.0.0.1:50052",
        show_default=True,
        help="the sink's address (--server: the same here)",
    )
    @output_options
    @client_options
    def _agents(**_: Any) -> int:
        """The agents the sink knows: id, connected, devices, last seen, queued."""
        return call(cmd_sink_agents)

    # the client flags' --server names the controller; here the sink is asked, so --server is --sink
    _agents.params[:] = [p for p in _agents.params if p.name != "server"]


def cmd_agent(args: Options) -> int:
    if args.callback is None:
        args.callback = ""  # agent mode: responses go back on the stream, not to a callback
    if not settings_from(args).agent_server:
        raise UsageError("devicectl agent needs --agent-server (or agent_server in the config file)")
    return cmd_serve(args)


def cmd_sink_agents(args: Options) -> int:
    import grpc

    from controller._proto.devicecontroller.v1 import agent_pb2 as apb
    from controller._proto.devicecontroller.v1 import agent_pb2_grpc as agrpc
    from controller.cli._channel import client_tls
    from controller.cli._errors import rpc_error, rpc_exit_code
    from controller.security.tls import sync_channel

    try:
        with sync_channel(args.sink, client_tls(args), what="sink") as channel:
            listing = agrpc.AgentAdminStub(channel).ListAgents(apb.ListAgentsRequest(), timeout=10)
    except grpc.RpcError as exc:  # about the sink, not "controller not running at" the controller
        print_error(rpc_error(exc, args.sink, what="topology sink"))
        return rpc_exit_code(exc)
    rows = [
        {
            "agent_id": a.agent_id,
            "connected": a.connected,
            "devices": list(a.devices),
            "last_seen": a.last_seen_unix,
            "queued": a.queued,
            "responses": a.responses,
            "duplicates": a.duplicates,
            "version": a.version,
        }
        for a in listing.agents
    ]
    if args.json:
        print_json(rows)
        return 0
    if not rows:
        console.print("no agents")
        return 0
    now = time.time()
    for row in rows:
        devices = row["devices"]
        shown = ", ".join(devices[:4]) + (f" (+{len(devices) - 4})" if len(devices) > 4 else "")
        console.print(
            f"{row['agent_id']}  {'connected' if row['connected'] else 'disconnected'}  "
            f"devices {len(devices)}: {shown}  last seen {now - row['last_seen']:.0f} s ago  "
            f"queued {row['queued']}  responses {row['responses']}  duplicates {row['duplicates']}",
            highlight=False,
        )
    return 0
