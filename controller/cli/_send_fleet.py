"""`devicectl send KIND -l rack=r12 [flags]`: one request per inventory node the label selector
picks. The node count comes first, on every path: a dry run plans each node (nothing written) and
says so before anything else; a real send journals one request per node (`REQUEST_ID-NODE` when
`--request-id` is given) and, with `--wait`, shows one row per node with how it ended."""

from __future__ import annotations

import argparse
import copy
import uuid
from typing import Any

import grpc

from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller._proto.devicecontroller.v1 import admin_pb2_grpc as agrpc
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc
from controller.cli._channel import channel as client_channel
from controller.cli._errors import UsageError
from controller.cli._lists import ALL, follow
from controller.cli._render import console, err_console, print_json, table
from controller.cli._send import build_request, dry_run_result, run

#: seconds one node's answer is waited for with `--wait` (its own --timeout, when longer)
WAIT_SECONDS = 600


def send(args: argparse.Namespace) -> int:
    """`send` with `--device` (one node, `_send.run`) or `-l/--selector` (every node it picks)."""
    selector = getattr(args, "selector", "") or ""
    if not selector:
        return run(args)
    if args.device:
        raise UsageError("send: give --device ID or -l/--selector KEY=VALUE, not both")
    with client_channel(args) as channel:
        devices = _selected(channel, selector)
        if not devices:
            raise UsageError(f"selector {selector!r} selects no inventory node; nothing was sent")
        head = f"{len(devices)} node{'' if len(devices) == 1 else 's'} selected by {selector!r}"
        messages = [build_request(_for(args, device)) for device in devices]
        if args.dry_run:
            return _plan(args, channel, messages, head)
        return _send(args, channel, messages, head)


def _selected(channel: grpc.Channel, selector: str) -> list[str]:
    admin = agrpc.DeviceControllerAdminStub(channel)

    def page(token: str) -> tuple[list[str], str]:
        query = apb.ListDevicesRequest(page_size=1000, page_token=token, selector=selector)
        answer = admin.ListDevices(query, timeout=30)
        return [d.id for d in answer.devices], answer.next_page_token

    return follow(page, ALL)


def _for(args: argparse.Namespace, device: str) -> argparse.Namespace:
    one = copy.copy(args)
    one.device = device
    one.request_id = f"{args.request_id}-{device}" if args.request_id else str(uuid.uuid4())
    return one


def _plan(args: argparse.Namespace, channel: grpc.Channel, messages: list[Any], head: str) -> int:
    """Each node's plan, after the count; never a line that reads like an applied change."""
    if not args.json:
        console.print(f"DRY RUN: nothing was written. {head}:", highlight=False, markup=False)
    admin = agrpc.DeviceControllerAdminStub(channel)
    plans, rows, failing = [], [], 0
    for msg in messages:
        plan = admin.DryRun(msg, timeout=max(args.timeout, 60) + 30)
        planned = sum(1 for w in plan.writes if w.status == "planned")
        failing += not plan.ok
        plans.append(dry_run_result(plan, msg))
        rows.append((msg.device, f"{planned} write{'' if planned == 1 else 's'}", plan.error or ""))
    if args.json:
        print_json({"dry_run": True, "selected": len(messages), "nodes": plans})
    else:
        table("", ("node", "would make", "would fail because"), rows, cut_first=("would fail because",))
    return 1 if failing else 0


def _send(args: argparse.Namespace, channel: grpc.Channel, messages: list[Any], head: str) -> int:
    if not args.json:
        err_console.print(f"sending to {head}", highlight=False, markup=False, soft_wrap=True)
    stub = dgrpc.DeviceControllerStub(channel)
    accepted, rows = [], []
    for msg in messages:
        try:
            stub.SendDeviceRequest(msg, timeout=30)
            accepted.append(msg)
        except grpc.RpcError as exc:  # one node refused: the others still go, and the row says why
            rows.append(
                {
                    "device": msg.device,
                    "request_id": msg.request_id,
                    "outcome": "rejected",
                    "error": f"{exc.code().name}: {exc.details()}",
                }
            )
    admin = agrpc.DeviceControllerAdminStub(channel)
    for msg in accepted:
        row = {"device": msg.device, "request_id": msg.request_id, "outcome": "accepted", "error": ""}
        if args.wait:
            row.update(_waited(admin, msg.request_id, max(args.timeout, WAIT_SECONDS), args.wait_delivery))
        rows.append(row)
    rows.sort(key=lambda r: r["device"])
    if args.json:
        print_json({"selected": len(messages), "requests": rows})
    else:
        cells = [(r["device"], r["request_id"], r["outcome"], r["error"]) for r in rows]
        table("", ("node", "request_id", "outcome", "error"), cells, cut_first=("error",))
    good = ("ok",) if args.wait else ("accepted",)
    return 0 if all(r["outcome"] in good for r in rows) else 1


def _waited(admin: Any, request_id: str, timeout: float, delivery: bool) -> dict[str, str]:
    wait = apb.WaitRequestRequest(request_id=request_id, wait_for_delivery=delivery)
    record = None
    try:
        for update in admin.WaitRequest(wait, timeout=timeout):
            record = update
    except grpc.RpcError as exc:
        why = f"not answered: {exc.code().name} (requests show {request_id})"
        return {"outcome": "unknown", "error": why}
    if record is None or not record.outcome:
        return {"outcome": "unknown", "error": f"not answered (requests show {request_id})"}
    return {"outcome": record.outcome, "error": record.error}
