"""`devicectl send KIND ...`: build any request kind from its flags (or a JSON file) and send it.
The command line itself is in _send_cli."""

from __future__ import annotations

import argparse
import contextlib
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
from controller.cli._errors import UsageError
from controller.cli._render import as_dict, console, err_console, print_json
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


def _policy(args: argparse.Namespace) -> Policy | None:
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


def _gpu_policies(args: argparse.Namespace) -> tuple[GpuPolicy, ...]:
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


def check_kind_flags(name: str, kind: RequestKind, args: argparse.Namespace) -> None:
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
    if name.startswith("rg-") and not args.resource_group:
        raise UsageError(f"send {name}: --resource-group is required")
    if kind is RequestKind.GPU_POLICIES_UPDATE and not args.gpu and not args.unset:
        raise UsageError(f"send {name}: give --gpu ID=WATTS (repeatable), or --unset")
    if name.startswith("profiles-") and not (args.enable or args.disable):
        raise UsageError(f"send {name}: give --enable ID and/or --disable ID")


def build_request(args: argparse.Namespace) -> pb.DeviceControllerRequest:
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


def run(args: argparse.Namespace) -> int:
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


def _cannot_wait(args: argparse.Namespace, request_id: str, reason: str) -> int:
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


def _dry_run(args: argparse.Namespace, msg: pb.DeviceControllerRequest) -> int:
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
