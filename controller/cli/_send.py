"""`devicectl send KIND ...`: build any request kind from its flags (or a JSON file) and send it.

The command group has one subcommand per request kind with only the flags that kind uses (required
ones marked required), plus `send file` for a request written as protobuf JSON (`register`). The
forms scripts used with the argparse CLI keep working: `send --file F` (no kind) is `send file
--file F`; with a warning (deprecated), flags before the kind (`send --device d ping`) are moved
after it, `send KIND --file F` sends the file, and another kind's flag given at its default value
(`--resource-group ""` on a ping) is dropped.

`--device ID` sends to one node (`run`); `-l rack=r12` sends one request per inventory node the label
selector picks (`send`). The node count comes first, on every path: a dry run plans each node
(nothing written) and says so before anything else; a real send journals one request per node
(`REQUEST_ID-NODE` when `--request-id` is given) and, with `--wait`, shows one row per node with how
it ended.
"""

from __future__ import annotations

import contextlib
import copy
import json
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import grpc
from google.protobuf import json_format

from controller import translate
from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller._proto.devicecontroller.v1 import admin_pb2_grpc as agrpc
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc
from controller.cli._channel import channel as client_channel
from controller.cli._click import Command, Group, call, client_options, output_options
from controller.cli._errors import UsageError
from controller.cli._lists import ALL, follow, selector_option
from controller.cli._options import Options
from controller.cli._render import as_dict, console, err_console, print_json, table
from controller.cli._responses import is_shadow, render_response
from controller.cli._writes import render_plan
from plugins.base import (
    Allocation,
    ElementType,
    Empty,
    EntityModification,
    GpuMetricsQuery,
    GpuPoliciesChange,
    GpuPolicy,
    Ping,
    Policy,
    PolicyAction,
    PolicyChange,
    PolicyLimit,
    PowerLimit,
    ProfileChange,
    RequestKind,
)

#: CLI names of request kinds
KINDS: dict[str, RequestKind] = {
    "rg-activate": RequestKind.RESOURCE_GROUP_ACTIVATE,
    "rg-update": RequestKind.RESOURCE_GROUP_UPDATE,
    "rg-deactivate": RequestKind.RESOURCE_GROUP_DEACTIVATE,
    "topology-activate": RequestKind.TOPOLOGY_ACTIVATE,
    "topology-deactivate": RequestKind.TOPOLOGY_DEACTIVATE,
    "gpu-policies": RequestKind.GPU_POLICIES_UPDATE,
    "profiles-enable": RequestKind.ENABLE_WORKLOAD_PROFILE,
    "profiles-disable": RequestKind.DISABLE_WORKLOAD_PROFILE,
    "profiles-update": RequestKind.UPDATE_WORKLOAD_PROFILE,
    "ping": RequestKind.PING,
    "gpu-metrics": RequestKind.GPU_METRICS,
    "raw-metrics": RequestKind.RAW_METRICS,
    "std-metrics": RequestKind.STD_METRICS,
    "modify-entity": RequestKind.MODIFY_ENTITY_MODEL,
}


def _read(path: str | None) -> bytes:
    return Path(path).read_bytes() if path else b""


def whole_watts(text: str) -> float:
    """Watts as the devices take them: whole. A fraction is refused, not rounded: 500.7 would be
    written as 501 W, a cap above the one asked for."""
    value = float(text)
    if value != int(value):
        raise ValueError(f"{text} W: give whole watts (devices take whole watts; {value:g} would be rounded)")
    return value


class Watts(click.ParamType):
    name = "WATTS"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            return whole_watts(str(value))
        except ValueError as exc:
            message = str(exc) if "whole watts" in str(exc) else f"{value!r} is not a number of watts"
            self.fail(message, param, ctx)


def _limit(text: str) -> PowerLimit | None:
    text = text.strip().lower()
    if text in ("none", "unset", ""):
        return None
    if text.endswith("%"):
        return PowerLimit(percent=float(text[:-1]))
    return PowerLimit(watts=whole_watts(text.removesuffix("w")))


def _policy(args: Options) -> Policy | None:
    limits = [
        PolicyLimit(element, PowerLimit(watts=value))
        for element, value in (
            (ElementType.NODE, args.node),
            (ElementType.GPU, args.gpu_total),
            (ElementType.CPU, args.cpu),
            (ElementType.MEMORY, args.memory),
        )
        if value is not None
    ]
    return Policy(args.policy_name, tuple(limits)) if limits else None


def _gpu_policies(args: Options) -> tuple[GpuPolicy, ...]:
    out = []
    for item in args.gpu:
        gpu, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--gpu {item}: expected ID=WATTS, e.g. 0=500")
        if not gpu.strip().isdigit():
            raise UsageError(f"--gpu {item}: the GPU id must be a whole number >= 0")
        try:
            float(value.strip().lower().removesuffix("%").removesuffix("w") or "0")
        except ValueError:
            if value.strip().lower() not in ("none", "unset"):
                raise UsageError(f"--gpu {item}: WATTS must be a number, N%, or none") from None
        try:
            limit = _limit(value)
        except ValueError as exc:
            raise UsageError(f"--gpu {item}: {exc}") from None
        out.append(GpuPolicy(int(gpu), limit))
    return tuple(out)


_POLICY_FLAGS = {"node", "gpu_total", "cpu", "memory", "policy_name"}
_RG_FLAGS = {"resource_group", "unset", "gpu", "enable", "disable", "no_verify", *_POLICY_FLAGS}
#: per kind, the flags that mean something for it; anything else is refused (it used to be ignored)
KIND_FLAGS: dict[RequestKind, set[str]] = {
    RequestKind.RESOURCE_GROUP_ACTIVATE: _RG_FLAGS,
    RequestKind.RESOURCE_GROUP_UPDATE: _RG_FLAGS,
    RequestKind.RESOURCE_GROUP_DEACTIVATE: _RG_FLAGS,
    RequestKind.TOPOLOGY_ACTIVATE: {"unset", *_POLICY_FLAGS},
    RequestKind.TOPOLOGY_DEACTIVATE: {"unset", *_POLICY_FLAGS},
    RequestKind.GPU_POLICIES_UPDATE: {"resource_group", "unset", "gpu", *_POLICY_FLAGS},
    RequestKind.ENABLE_WORKLOAD_PROFILE: {"enable", "disable", "no_verify"},
    RequestKind.DISABLE_WORKLOAD_PROFILE: {"enable", "disable", "no_verify"},
    RequestKind.UPDATE_WORKLOAD_PROFILE: {"enable", "disable", "no_verify"},
    RequestKind.PING: {"retry_count"},
    RequestKind.GPU_METRICS: {"gpu_id"},
    RequestKind.RAW_METRICS: set(),
    RequestKind.STD_METRICS: set(),
    RequestKind.MODIFY_ENTITY_MODEL: {"phase", "old_model", "new_model", "resource_group"},
}
#: flags with a default that is not "unset"
_DEFAULTS = {"policy_name": "cli", "resource_group": "", "retry_count": 0, "phase": 0}


def check_kind_flags(name: str, kind: RequestKind, args: Options) -> None:
    """Refuse flags the kind ignores and insist on the ones it needs (exit 2)."""
    given = {
        flag
        for flag in set().union(*KIND_FLAGS.values())
        if getattr(args, flag, None) not in (None, False, [], _DEFAULTS.get(flag))
    }
    extra = sorted(given - KIND_FLAGS[kind])
    if extra:
        flags = ", ".join("--" + f.replace("_", "-") for f in extra)
        raise UsageError(f"send {name}: {flags} not used by this kind")
    if name.startswith("rg-") and not (args.resource_group or "").strip():
        raise UsageError(f"send {name}: --resource-group is required")
    if args.resource_group and not args.resource_group.strip():
        raise UsageError(f"send {name}: --resource-group must be a name, got only blanks")
    if kind is RequestKind.GPU_POLICIES_UPDATE and not args.gpu and not args.unset:
        raise UsageError(f"send {name}: give --gpu ID=WATTS (repeatable), or --unset")
    if name.startswith("profiles-") and not (args.enable or args.disable):
        raise UsageError(f"send {name}: give --enable ID and/or --disable ID")


def build_request(args: Options) -> pb.DeviceControllerRequest:
    if args.file:
        try:
            msg = json_format.Parse(Path(args.file).read_text(), pb.DeviceControllerRequest())
        except json_format.ParseError as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise UsageError(
                f"--file {args.file}: not a DeviceControllerRequest in protobuf JSON: {reason}"
            ) from None
        if args.device:
            msg.device = args.device
        if not msg.request_id:
            msg.request_id = args.request_id or str(uuid.uuid4())
        return msg
    if not args.kind or not args.device:
        raise UsageError("send: give a kind and --device (or --file)")
    kind = KINDS[args.kind]
    check_kind_flags(args.kind, kind, args)
    action = PolicyAction.UNSET if args.unset else PolicyAction.SET
    policy = _policy(args)
    profiles = ProfileChange(tuple(args.enable), tuple(args.disable), verify=not args.no_verify)
    request: Any
    if kind in (
        RequestKind.RESOURCE_GROUP_ACTIVATE,
        RequestKind.RESOURCE_GROUP_UPDATE,
        RequestKind.RESOURCE_GROUP_DEACTIVATE,
    ):
        gpus = _gpu_policies(args)
        request = Allocation(
            resource_group=args.resource_group,
            policy=PolicyChange(action, policy) if policy or args.unset else None,
            gpu_policies=GpuPoliciesChange(args.resource_group, action, policy, gpus)
            if gpus or args.unset
            else None,
            profiles=profiles if args.enable or args.disable else None,
        )
    elif kind in (RequestKind.TOPOLOGY_ACTIVATE, RequestKind.TOPOLOGY_DEACTIVATE):
        request = PolicyChange(action, policy)
    elif kind is RequestKind.GPU_POLICIES_UPDATE:
        request = GpuPoliciesChange(args.resource_group, action, policy, _gpu_policies(args))
    elif kind in (
        RequestKind.ENABLE_WORKLOAD_PROFILE,
        RequestKind.DISABLE_WORKLOAD_PROFILE,
        RequestKind.UPDATE_WORKLOAD_PROFILE,
    ):
        request = profiles
    elif kind is RequestKind.PING:
        request = Ping(args.retry_count)
    elif kind is RequestKind.GPU_METRICS:
        request = GpuMetricsQuery(tuple(args.gpu_id))
    elif kind is RequestKind.MODIFY_ENTITY_MODEL:
        request = EntityModification(
            args.phase,
            json.loads(_read(args.old_model) or b"{}"),
            json.loads(_read(args.new_model) or b"{}"),
            resource_group=args.resource_group,
        )
    else:
        request = Empty()
    return translate.request_to_proto(
        kind,
        request,
        device=args.device,
        request_id=args.request_id or str(uuid.uuid4()),
        timeout_seconds=args.timeout,
        trace_id=args.trace_id,
        device_model_json=_read(args.model_json),
        device_state_json=_read(args.state_json),
    )


def run(args: Options) -> int:
    msg = build_request(args)
    if args.dry_run:
        return _dry_run(args, msg)
    with client_channel(args) as channel:
        via_sink = _check_device(channel, msg)
        try:
            dgrpc.DeviceControllerStub(channel).SendDeviceRequest(msg, timeout=30)
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED):
                err_console.print(f"[red]rejected[/red] ({exc.code().name}): {exc.details()}", soft_wrap=True)
                return 2
            raise  # not running, journal down, ...: the one-line error handler says which
        if via_sink and args.wait:  # the agent answers the sink, which keeps no journal to wait on
            return _cannot_wait(
                args,
                msg.request_id,
                "sent through the topology sink to its agent, whose response goes to "
                "the sink (its output, or --record), not here",
            )
        if not args.wait:
            if args.json:
                print_json({"request_id": msg.request_id, "accepted": True})
            else:
                console.print(f"accepted request_id={msg.request_id}")
            return 0
        admin = agrpc.DeviceControllerAdminStub(channel)
        record = None
        wait = apb.WaitRequestRequest(request_id=msg.request_id, wait_for_delivery=args.wait_delivery)
        limit = args.wait_timeout if args.wait_timeout is not None else max(args.timeout, 600) + 30
        stream = admin.WaitRequest(wait, timeout=limit)
        interrupted = threading.Event()
        try:
            with _ctrl_c_cancels(stream, interrupted):
                with console.status(f"waiting for {msg.request_id}...") if not args.json else _null():
                    for update in stream:
                        record = update  # the last update is the completed record
        except grpc.RpcError as exc:
            if interrupted.is_set():
                return _interrupted(msg.request_id)
            if exc.code() in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
                reason = f"this certificate may not wait on it ({exc.code().name}: {exc.details()})"
                return _cannot_wait(args, msg.request_id, reason)
            if exc.code() is not grpc.StatusCode.DEADLINE_EXCEEDED:
                raise
            what = "delivered" if args.wait_delivery else "answered"
            err_console.print(
                f"[red]error[/red]: request {msg.request_id} accepted but not {what} within {limit:g} s "
                f"(devicectl requests show {msg.request_id})",
                soft_wrap=True,
            )
            return 1
        if interrupted.is_set() and (record is None or not record.outcome):
            return _interrupted(msg.request_id)
    if record is None:
        return 1
    if args.json:
        print_json(record)
    else:
        render_response(record.response, shadow=is_shadow(record))
    return 0 if record.outcome == "ok" else 1


@contextlib.contextmanager
def _ctrl_c_cancels(stream: Any, interrupted: threading.Event) -> Iterator[None]:
    """While waiting, Ctrl-C cancels the wait and sets the event, instead of a KeyboardInterrupt
    that may land anywhere: inside grpc's or the spinner's own code, where it became another error
    (exit 1) now and then. The cancel runs off the signal handler (grpc's call is not re-entrant)."""

    def on_ctrl_c(_signum: int, _frame: Any) -> None:
        interrupted.set()
        threading.Thread(target=stream.cancel, name="ctrl-c", daemon=True).start()

    # not where Ctrl-C is ignored (a background job inherits SIGINT ignored, as Python does)
    in_main = threading.current_thread() is threading.main_thread()
    in_main = in_main and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
    previous = signal.signal(signal.SIGINT, on_ctrl_c) if in_main else None
    try:
        yield
    finally:
        if in_main:
            signal.signal(signal.SIGINT, previous)


def _interrupted(request_id: str) -> int:
    """Ctrl-C stops the waiting, not the request: say which one it was and how to follow it."""
    err_console.print(
        f"interrupted: request {request_id} was accepted and runs on; follow it with "
        f"`devicectl requests show {request_id}`",
        soft_wrap=True,
        highlight=False,
        markup=False,
    )
    return 130


def _cannot_wait(args: Options, request_id: str, reason: str) -> int:
    """The request was accepted but cannot be waited on from here (a topology-only certificate
    may send, not read the journal; a sink keeps no journal): say so with the id, so nobody sends
    it again."""
    if args.json:
        print_json({"request_id": request_id, "accepted": True, "waited": False, "error": reason})
    else:
        console.print(f"accepted request_id={request_id}", highlight=False)
        err_console.print(
            f"error: request {request_id} was accepted and runs on, but cannot be waited on: {reason}; "
            f"do not send it again (devicectl requests show {request_id} with an operator certificate, "
            "against the controller)",
            soft_wrap=True,
            highlight=False,
            markup=False,
        )
    return 1


def _check_device(channel: grpc.Channel, msg: pb.DeviceControllerRequest) -> bool:
    """Refuse, before sending, a device the controller cannot reach: one it has never seen (every
    inventory device is known to it) when the request brings no model saying how to reach it.
    Such a request used to be "accepted" (exit 0) and then fail. Without the operator role the
    check is skipped and the controller's answer says it. True when `--server` is a topology sink
    (it routes the request to the agent that owns the device, and refuses one none owns)."""
    if msg.device_model_json:
        return False
    try:
        agrpc.DeviceControllerAdminStub(channel).GetDevice(apb.GetDeviceRequest(id=msg.device), timeout=30)
    except grpc.RpcError as exc:
        if exc.code() is grpc.StatusCode.NOT_FOUND:
            raise UsageError(
                f"unknown device {msg.device!r}: not in the controller's inventory and never seen by it; "
                "nothing was sent (devicectl devices list)"
            ) from None
        if exc.code() in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
            return False
        if exc.code() is grpc.StatusCode.UNIMPLEMENTED and _is_sink(channel):
            return True
        raise
    return False


def _is_sink(channel: grpc.Channel) -> bool:
    from controller._proto.devicecontroller.v1 import agent_pb2, agent_pb2_grpc

    try:
        agent_pb2_grpc.AgentAdminStub(channel).ListAgents(agent_pb2.ListAgentsRequest(), timeout=10)
    except grpc.RpcError:
        return False
    return True


def _dry_run(args: Options, msg: pb.DeviceControllerRequest) -> int:
    with client_channel(args) as channel:
        try:
            plan = agrpc.DeviceControllerAdminStub(channel).DryRun(msg, timeout=max(args.timeout, 60) + 30)
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED):
                err_console.print(f"[red]rejected[/red] ({exc.code().name}): {exc.details()}", soft_wrap=True)
                return 2
            raise
    kind = msg.WhichOneof("request") or "request"
    if args.json:
        print_json(dry_run_result(plan, msg))
        return 0 if plan.ok else 1
    # Only the plan: never the response's "ok" or a result table, which read like an applied change.
    planned = sum(1 for w in plan.writes if w.status == "planned")
    console.print(
        f"DRY RUN: nothing was written. {kind} on {msg.device} would make {planned} "
        f"write{'' if planned == 1 else 's'}:",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    if plan.writes:
        render_plan(plan.writes)
    else:
        console.print("  none: the device already has what this request asks for (or it only reads)")
    if plan.error:
        err_console.print(f"[red]the request would fail[/red]: {plan.error}", soft_wrap=True, highlight=False)
    return 0 if plan.ok else 1


def dry_run_result(plan: apb.DryRunResponse, msg: pb.DeviceControllerRequest) -> dict[str, Any]:
    """A dry run for scripts: `dry_run` and `outcome` say it is a plan (`planned`, or `would_fail`),
    and the response it would send is `planned_response`, never a top-level `ok`."""
    out: dict[str, Any] = {
        "dry_run": True,
        "outcome": "planned" if plan.ok else "would_fail",
        "written": 0,
        "device": msg.device,
        "request_id": msg.request_id,
        "kind": msg.WhichOneof("request") or "",
        "writes": [as_dict(w) for w in plan.writes],
        "error": plan.error,
    }
    if plan.HasField("response"):
        out["planned_response"] = as_dict(plan.response)
    return out


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# ---- every node a label selector picks ------------------------------------------------------------

#: seconds one node's answer is waited for with `--wait` (its own --timeout, when longer)
WAIT_SECONDS = 600


def send(args: Options) -> int:
    """`send` with `--device` (one node, `run`) or `-l/--selector` (every node it picks)."""
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
            return _plan_each(args, channel, messages, head)
        return _send_each(args, channel, messages, head)


def _selected(channel: grpc.Channel, selector: str) -> list[str]:
    admin = agrpc.DeviceControllerAdminStub(channel)

    def page(token: str) -> tuple[list[str], str]:
        query = apb.ListDevicesRequest(page_size=1000, page_token=token, selector=selector)
        answer = admin.ListDevices(query, timeout=30)
        return [d.id for d in answer.devices], answer.next_page_token

    return follow(page, ALL)


def _for(args: Options, device: str) -> Options:
    one = copy.copy(args)
    one.device = device
    one.request_id = f"{args.request_id}-{device}" if args.request_id else str(uuid.uuid4())
    return one


def _plan_each(args: Options, channel: grpc.Channel, messages: list[Any], head: str) -> int:
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


def _send_each(args: Options, channel: grpc.Channel, messages: list[Any], head: str) -> int:
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


# ---- the command group ---------------------------------------------------------------------------

#: each kind flag: (declaration, Click keywords); its name is the handler's attribute
_KIND_OPTIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "resource_group": ("--resource-group", {"default": "", "help": "resource group id"}),
    "node": ("--node", {"type": Watts(), "help": "node policy: node total watts"}),
    "gpu_total": ("--gpu-total", {"type": Watts(), "help": "node policy: watts across all GPUs"}),
    "cpu": ("--cpu", {"type": Watts(), "help": "node policy: watts across all CPUs"}),
    "memory": ("--memory", {"type": Watts(), "help": "node policy: watts across memory"}),
    "policy_name": ("--policy-name", {"default": "cli", "help": "name of the node policy the flags build"}),
    "unset": ("--unset", {"is_flag": True, "default": False, "help": "unset/reset instead of set"}),
    "gpu": (
        "--gpu",
        {
            "multiple": True,
            "metavar": "ID=WATTS",
            "help": "GPU-specific cap, e.g. --gpu 0=500; WATTS may be 80% (of the GPU's maximum) or "
            "'none', which removes that GPU's cap: it falls back to its share of the node policy, else to "
            "its limit from before devicectl, else to no cap (refused where the GPU's cap cannot be "
            "written); repeatable",
        },
    ),
    "enable": ("--enable", {"multiple": True, "type": int, "metavar": "ID", "help": "profile id to enable"}),
    "disable": (
        "--disable",
        {"multiple": True, "type": int, "metavar": "ID", "help": "profile id to disable"},
    ),
    "no_verify": (
        "--no-verify",
        {"is_flag": True, "default": False, "help": "disable asynchronous profile verification"},
    ),
    "retry_count": ("--retry-count", {"type": int, "default": 0, "help": "the device's ping retries"}),
    "gpu_id": ("--gpu-id", {"multiple": True, "type": int, "help": "GPU ids (default all); repeatable"}),
    "phase": ("--phase", {"type": int, "default": 0, "help": "model change phase"}),
    "old_model": ("--old-model", {"help": "file with the old device model JSON"}),
    "new_model": ("--new-model", {"help": "file with the new device model JSON"}),
}
#: what the handler reads for a flag the kind does not have
_UNSET: dict[str, Any] = {
    "file": None,
    "kind": None,
    "unset": False,
    "no_verify": False,
    "gpu": [],
    "enable": [],
    "disable": [],
    "gpu_id": [],
    "policy_name": "cli",
    "resource_group": "",
    "retry_count": 0,
    "phase": 0,
    "trace_id": "",
    "model_json": None,
    "state_json": None,
    **{name: None for name in ("node", "gpu_total", "cpu", "memory", "old_model", "new_model")},
}
_REQUIRED = {
    "rg-activate": {"resource_group"},
    "rg-update": {"resource_group"},
    "rg-deactivate": {"resource_group"},
}
_HELP = {
    RequestKind.RESOURCE_GROUP_ACTIVATE: "activate a resource group: node policy, GPU caps, profiles",
    RequestKind.RESOURCE_GROUP_UPDATE: "update a resource group's policy, GPU caps or profiles",
    RequestKind.RESOURCE_GROUP_DEACTIVATE: "deactivate a resource group (--unset clears its caps)",
    RequestKind.TOPOLOGY_ACTIVATE: "set the node policy of a topology",
    RequestKind.TOPOLOGY_DEACTIVATE: "clear or set the node policy on deactivation",
    RequestKind.GPU_POLICIES_UPDATE: "set (or --unset) per-GPU power caps",
    RequestKind.ENABLE_WORKLOAD_PROFILE: "enable workload power profiles",
    RequestKind.DISABLE_WORKLOAD_PROFILE: "disable workload power profiles",
    RequestKind.UPDATE_WORKLOAD_PROFILE: "enable and disable workload power profiles at once",
    RequestKind.PING: "check the device answers",
    RequestKind.GPU_METRICS: "read GPU power usage",
    RequestKind.RAW_METRICS: "read the device's raw metrics",
    RequestKind.STD_METRICS: "read node, GPU and CPU power, energy and limits",
    RequestKind.MODIFY_ENTITY_MODEL: "change the device's entity model (--old-model, --new-model)",
}
_ALL_KIND_FLAGS = {decl for decl, _ in _KIND_OPTIONS.values()}


def _common(*, device_required: bool) -> list[click.Option]:
    return [
        click.Option(
            ["--device"],
            required=device_required,
            help="device id in the topology (or -l KEY=VALUE: every inventory node with those labels)",
        ),
        click.Option(["--request-id"], default="", help="default: a new UUID"),
        click.Option(
            ["--timeout"], type=int, default=0, help="timeout_seconds (0: the controller's default)"
        ),
        click.Option(["--wait"], is_flag=True, default=False, help="wait for the response and print it"),
        click.Option(
            ["--wait-delivery"], is_flag=True, default=False, help="with --wait: also until delivered"
        ),
        click.Option(
            ["--wait-timeout"],
            type=float,
            help="with --wait: give up after this many seconds (exit 1; default: max(--timeout, 600) + 30)",
        ),
        click.Option(
            ["--dry-run"],
            is_flag=True,
            default=False,
            help="plan only (admin DryRun): print the writes it would make; nothing is written or journaled",
        ),
    ]


class _KindCommand(Command):
    """A kind's command: a flag another kind uses is refused by name (it used to be ignored)."""

    def __init__(self, *args: Any, defaults: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.defaults = defaults

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, self._without_default_flags(ctx, args))
        except click.NoSuchOption as exc:
            if exc.option_name in _ALL_KIND_FLAGS:
                raise click.UsageError(f"{exc.option_name} not used by this kind", ctx) from None
            raise

    def _without_default_flags(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Drop another kind's flag given with its default value (`--resource-group ""` on a ping),
        which argparse accepted, with a warning; any other value is refused by parse_args."""
        mine = {opt for param in self.params for opt in param.opts}
        out: list[str] = []
        i = 0
        while i < len(args):
            flag, eq, value = args[i].partition("=")
            default = _DEFAULT_OF.get(flag)
            if default is not None and flag not in mine and (eq or i + 1 < len(args)):
                given = value if eq else args[i + 1]
                if given == default:
                    if not ctx.resilient_parsing:
                        _warn(f"{flag} {given!r} is deprecated here: send {self.name} does not use it")
                    i += 1 if eq else 2
                    continue
            out.append(args[i])
            i += 1
        return out


#: flags that take a value, with the default a script may have passed to every kind
_DEFAULT_OF = {
    _KIND_OPTIONS[name][0]: str(_UNSET[name])
    for name in ("resource_group", "policy_name", "retry_count", "phase")
}


def _run(**_: Any) -> int:
    return call(send)


def _kind_command(name: str, kind: RequestKind) -> click.Command:
    params: list[click.Parameter] = []
    for flag in sorted(KIND_FLAGS[kind], key=list(_KIND_OPTIONS).index):
        decl, options = _KIND_OPTIONS[flag]
        params.append(click.Option([decl], required=flag in _REQUIRED.get(name, ()), **options))
    params += [
        *_common(device_required=False),
        click.Option(["--trace-id"], default="", help="trace id carried through to the response"),
        click.Option(["--model-json"], help="file with device_model_json"),
        click.Option(["--state-json"], help="file with device_state_json"),
    ]
    command = _KindCommand(
        name,
        callback=_run,
        params=params,
        help=_HELP[kind][0].upper() + _HELP[kind][1:],
        defaults={k: v for k, v in _UNSET.items() if k not in KIND_FLAGS[kind]} | {"kind": name},
    )
    command = selector_option(command)
    return client_options(output_options(command))  # type: ignore[arg-type]


def _file_command() -> click.Command:
    command = _KindCommand(
        "file",
        callback=_run,
        params=[
            click.Option(
                ["--file"], required=True, help="a DeviceControllerRequest in protobuf JSON (any kind)"
            ),
            *_common(device_required=False),
        ],
        help="Send a request written as protobuf JSON (--device overrides its device).",
        defaults=dict(_UNSET),
    )
    return client_options(output_options(command))  # type: ignore[arg-type]


class _SendGroup(Group):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, self._kind_first(ctx, args))

    def _kind_first(self, ctx: click.Context, args: list[str]) -> list[str]:
        """`send --file F ...` as `send file --file F ...`; `send --device d ping` as `send ping
        --device d` (the argparse CLI took flags before the kind)."""
        valued = {
            opt
            for command in self.commands.values()
            for param in command.params
            if isinstance(param, click.Option) and not param.is_flag
            for opt in param.opts
        }
        i = 0
        while i < len(args) and args[i] != "--":
            if args[i] in self.commands:
                break
            i += 2 if args[i] in valued else 1
        else:
            if any(a == "--file" or a.startswith("--file=") for a in args):
                return ["file", *args]
            return args
        if args[i] == "file":  # `send file --file F`: the form the warning below asks for
            return args if i == 0 else [args[i], *args[:i], *args[i + 1 :]]
        if any(a == "--file" or a.startswith("--file=") for a in args):  # argparse: the file wins
            if not ctx.resilient_parsing:
                _warn(
                    f"`send {args[i]} --file F` is deprecated (the file names the kind): "
                    "write `send file --file F`"
                )
            return ["file", *args[:i], *args[i + 1 :]]
        if _beyond_output_flags(args[:i]) and not ctx.resilient_parsing:  # not while completing
            _warn(
                "flags before the kind are deprecated: "
                f"write `devicectl send {args[i]} {' '.join(args[:i])} ...`"
            )
        return [args[i], *args[:i], *args[i + 1 :]]


def _warn(message: str) -> None:
    err_console.print(f"warning: {message}", highlight=False, markup=False, soft_wrap=True)


def _beyond_output_flags(head: list[str]) -> bool:
    """Whether flags before the kind include more than the output flags (accepted anywhere)."""
    j = 0
    while j < len(head):
        token = head[j]
        if token in ("-o", "--output"):
            j += 2
            continue
        if token not in ("--json", "--debug") and not token.startswith(("--output=", "-o")):
            return True
        j += 1
    return False


def register(cli: click.Group) -> None:
    @cli.group("send", cls=_SendGroup)
    @output_options
    def send() -> None:
        """Send a request to a running controller: `devicectl send KIND --device ID [flags]`.

        Each kind takes only the flags it uses; `devicectl send KIND --help` lists them.
        `-l rack=r12` instead of --device sends to every inventory node with those labels
        (with --dry-run: the node count, then each node's plan).
        """

    for name, kind in KINDS.items():
        send.add_command(_kind_command(name, kind))
    send.add_command(_file_command())
