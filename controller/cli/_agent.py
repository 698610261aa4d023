"""`devicectl agent` (the controller dialing out to a topology server) and `devicectl sink agents`
(the agents a topology sink knows). See docs/architecture.md, "Two transports"."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from controller.cli._channel import add_client_flags
from controller.cli._errors import UsageError
from controller.cli._render import console, print_json


def add_parsers(sub: Any, settings_flags: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        "agent",
        help="run the controller in agent mode: dial out to the topology server, no inbound port needed",
    )
    settings_flags(p)
    p.add_argument("--print-config", action="store_true", help="print the effective settings and exit")
    p.set_defaults(func=cmd_agent)

    sink = sub.add_parser("sink", help="ask a topology sink (devicectl topology-sink)").add_subparsers(
        dest="action", required=True
    )
    p = sink.add_parser("agents", help="the agents the sink knows: id, connected, devices, last seen, queued")
    p.add_argument("--sink", default="127.0.0.1:50052", help="the sink's address")
    add_client_flags(p)
    p.set_defaults(func=cmd_sink_agents)


def settings_flags(p: argparse.ArgumentParser) -> None:
    """The agent flags `serve` shares (serve --agent-server runs both transports, one journal)."""
    p.add_argument("--agent-server", help="topology server to dial out to (AgentService); TLS: --callback-*")
    p.add_argument("--agent-id", help="agent id on a plaintext loopback stream (else the certificate's CN)")
    p.add_argument("--agent-devices", help="devices served over the agent stream (patterns, default *)")


def cmd_agent(args: argparse.Namespace) -> int:
    from controller.cli import cmd_serve, settings_from

    if args.callback is None:
        args.callback = ""  # agent mode: responses go back on the stream, not to a callback
    if not settings_from(args).agent_server:
        raise UsageError("devicectl agent needs --agent-server (or agent_server in the config file)")
    return cmd_serve(args)


def cmd_sink_agents(args: argparse.Namespace) -> int:
    from controller._proto.devicecontroller.v1 import agent_pb2 as apb
    from controller._proto.devicecontroller.v1 import agent_pb2_grpc as agrpc
    from controller.cli._channel import client_tls
    from controller.tls import sync_channel

    with sync_channel(args.sink, client_tls(args), what="sink") as channel:
        listing = agrpc.AgentAdminStub(channel).ListAgents(apb.ListAgentsRequest(), timeout=10)
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
