"""`devicectl requests|devices|verifications|plugins`: operator views through the admin API."""

from __future__ import annotations

import functools
import json
from typing import Any

import click
import grpc
from google.protobuf import empty_pb2

from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller._proto.devicecontroller.v1 import admin_pb2_grpc as agrpc
from controller.cli._channel import channel
from controller.cli._click import Group, call, client_options, output_options
from controller.cli._devices import device_dict, devices_table, health_table, limits_table, show_in_force
from controller.cli._errors import NotFoundError, UsageError
from controller.cli._lists import ALL, fetch, follow, list_options, page_rows, show
from controller.cli._options import Options
from controller.cli._render import (
    clip_cell,
    console,
    print_json,
    short_id,
    table,
    when,
    when_short,
)
from controller.cli._status import status_show
from controller.cli._writes import render_desired, render_writes


def register(cli: click.Group) -> None:
    @cli.group("requests", cls=Group)
    @output_options
    def requests() -> None:
        """Inspect the request journal."""

    @requests.command("list")
    @click.option("--device", multiple=True, help="only this device's requests (repeatable)")
    @click.option(
        "--status",
        type=click.Choice(["queued", "running", "completed", "ok", "failed"]),
        help="where it is (queued, running, completed) or how it ended (ok, failed)",
    )
    @click.option("--kind", help="only requests of this kind (gpu_policies_update, ping, ...)")
    @click.option("--trace-id", help="only requests with this trace id")
    @click.option("--undelivered", is_flag=True, default=False, help="responses not delivered yet, with why")
    @click.option(
        "--dead-letter", is_flag=True, default=False, help="responses the receiver refused for good"
    )
    @list_options(50)
    @click.option("--wide", is_flag=True, default=False, help="full ids and errors (tables shorten them)")
    @output_options
    @client_options
    def _list(**_: Any) -> int:
        """Recent requests, newest first."""
        return call(requests_list)

    @requests.command("show")
    @click.argument("request_id")
    @output_options
    @client_options
    def _show(**_: Any) -> int:
        """One request with its response: REQUEST_ID is the id, or a unique prefix of a recent one."""
        return call(requests_show)

    @cli.group("devices", cls=Group)
    @output_options
    def devices() -> None:
        """Inspect devices and their state."""

    @devices.command("list")
    @list_options(None, since=False)
    @click.option("--wide", is_flag=True, default=False, help="full ids and errors (tables shorten them)")
    @output_options
    @client_options
    def _devices(**_: Any) -> int:
        """Known devices (-o wide: caps, resource groups and drift); -l rack=r12 selects by label."""
        return call(devices_list, limits=False)

    @devices.command("limits")
    @list_options(None, since=False)
    @output_options
    @client_options
    def _limits(**_: Any) -> int:
        """What is in force on every inventory node, one row per device and component: requested,
        enforced (read back), allowed range, drift; a node with no limit known is one row saying
        `unknown` and why. `-o csv --no-headers` for scripts."""
        return call(devices_list, limits=True)

    @devices.command("health")
    @click.argument("device", required=False)
    @click.option("--unreachable", is_flag=True, default=False, help="only devices whose last access failed")
    @list_options(1000, since=False)
    @click.option("--wide", is_flag=True, default=False, help="full errors (tables shorten them)")
    @output_options
    @client_options
    def _health(**_: Any) -> int:
        """Each BMC's reachability, as `dpsctl check status`: last success, inaccessible since, last
        error, sync in progress, certificate expiry (DEVICE: only that one)."""
        return call(devices_health)

    @devices.command("show")
    @click.argument("device")
    @output_options
    @client_options
    def _device(**_: Any) -> int:
        """One device with its state JSON and desired vs enforced limits."""
        return call(devices_show)

    @cli.command("verifications")
    @click.option("--device", help="only this device's verifications")
    @click.option("--id", "verification_id", help="only this verification")
    @list_options(50)
    @output_options
    @client_options
    def _verifications(**_: Any) -> int:
        """Asynchronous profile verifications."""
        return call(verifications_list)

    @cli.command("status")
    @output_options
    @client_options
    def _status(**_: Any) -> int:
        """Journal and callback health, responses waiting and dead-lettered.

        Exits 1 when the journal or the topology callback is down (JSON: "healthy": false).
        """
        return call(lambda args: status_show(args, _call(args, "GetStatus", empty_pb2.Empty())))

    @cli.command("plugins")
    @output_options
    def _plugins(**_: Any) -> int:
        """Plugins installed (entry-point group devicectl.plugins)."""
        return call(plugins_list)


def _admin(args: Options) -> tuple[grpc.Channel, agrpc.DeviceControllerAdminStub]:
    chan = channel(args)
    return chan, agrpc.DeviceControllerAdminStub(chan)


def _call(args: Options, method: str, request: Any) -> Any:
    """One admin call; a gRPC error goes to the CLI's one-line error handler (exit 1)."""
    channel, stub = _admin(args)
    with channel:
        return getattr(stub, method)(request, timeout=30)


_STATUS = {"queued": apb.QUEUED, "running": apb.RUNNING, "completed": apb.COMPLETED}
#: `--status` values that are outcomes of finished requests
_OUTCOMES = ("ok", "failed")


def _status(record: apb.RequestRecord) -> str:
    return apb.RequestStatus.Name(record.status).lower()


def requests_list(args: Options) -> int:
    devices = list(args.device or [""])

    def get(limit: int) -> list[apb.RequestRecord]:
        rows: list[apb.RequestRecord] = []
        for device in devices:  # one filter per call: several devices are merged, newest first
            query = apb.ListRequestsRequest(
                device=device,
                status=_STATUS.get(args.status or "", apb.REQUEST_STATUS_UNSPECIFIED),
                undelivered_only=args.undelivered,
                page_size=page_rows(limit),
                dead_letter_only=args.dead_letter,
                outcome=args.status if args.status in _OUTCOMES else "",
                kind=args.kind or "",
                trace_id=args.trace_id or "",
                selector=args.selector or "",
            )
            ask = functools.partial(_page, args, "ListRequests", query, field="requests")
            rows.extend(follow(ask, limit))
        rows.sort(key=lambda r: (r.accepted_at.seconds, r.accepted_at.nanos), reverse=True)
        return rows[:limit]

    return show(
        args,
        lambda: fetch(args, get, lambda r: r.accepted_at),
        kind="request",
        name=lambda r: r.request_id,
        render=lambda rows: _requests_table(args, rows),
        what="requests",
    )


def _page(args: Options, method: str, query: Any, token: str, *, field: str) -> tuple[list[Any], str]:
    """One page of a list: its rows and the next page's token ("" after the last)."""
    query.page_token = token
    answer = _call(args, method, query)
    return list(getattr(answer, field)), answer.next_page_token


def _requests_table(args: Options, rows: list[apb.RequestRecord]) -> None:
    wide = args.wide
    at = when if wide else when_short
    # waiting or refused responses: why is what an operator looks for
    delivery = args.undelivered or args.dead_letter
    table(
        "requests",
        ("request_id", "device", "kind", "status", "outcome", "accepted", "finished", "delivered", "error")
        + (("delivery error",) if delivery else ()),
        (
            (
                short_id(r.request_id, wide),
                r.device,
                r.kind,
                _status(r),
                r.outcome or _status(r),
                at(r.accepted_at),
                at(r.finished_at),
                at(r.delivered_at)
                or ("dead-lettered" if r.HasField("dead_lettered_at") else "")
                or (f"pending ({r.delivery_attempts} tries)" if r.outcome else ""),
                clip_cell(r.error, wide),
            )
            + ((clip_cell(r.delivery_error, wide),) if delivery else ())
            for r in rows
        ),
        wide_columns=("status", "finished"),
        cut_first=("error", "delivery error", "kind"),
    )


def _by_prefix(args: Options, prefix: str) -> apb.RequestRecord:
    """The request `prefix` names: exactly, or as the unique prefix of a recent request's id."""
    try:
        return _call(args, "GetRequest", apb.GetRequestRequest(request_id=prefix))
    except grpc.RpcError as exc:
        if exc.code() is not grpc.StatusCode.NOT_FOUND:
            raise
    if len(prefix) < 4:  # too short to look up as a prefix
        raise NotFoundError(f"request {prefix!r}: no such request (a prefix needs 4 characters at least)")
    recent = _call(args, "ListRequests", apb.ListRequestsRequest(page_size=1000)).requests
    found = {r.request_id for r in recent if r.request_id.startswith(prefix)}
    if not found:
        raise NotFoundError(f"request {prefix!r}: no such request")
    if len(found) > 1:
        raise UsageError(f"request {prefix!r}: {len(found)} recent requests start with it; give the full id")
    return _call(args, "GetRequest", apb.GetRequestRequest(request_id=found.pop()))


def requests_show(args: Options) -> int:
    from controller.cli._responses import SHADOW_OK, is_shadow, render_response  # a response's kinds

    r = _by_prefix(args, args.request_id)
    if args.json:
        print_json(r)
        return 0
    table(
        f"request {r.request_id}",
        ("field", "value"),
        [
            ("device", r.device),
            ("kind", r.kind),
            ("trace_id", r.trace_id),
            ("status", _status(r)),
            ("outcome", f"{r.outcome} ({SHADOW_OK})" if r.outcome == "ok" and is_shadow(r) else r.outcome),
            ("error", r.error),
            ("attempts", r.attempts),
            ("accepted", when(r.accepted_at)),
            ("started", when(r.started_at)),
            ("finished", when(r.finished_at)),
            ("deadline", when(r.deadline_at)),
            ("delivered", when(r.delivered_at)),
            ("delivery attempts", _delivery_attempts(r)),
            ("delivery error", r.delivery_error),
            ("dead-lettered", when(r.dead_lettered_at) if r.HasField("dead_lettered_at") else ""),
        ],
    )
    if r.writes:
        render_writes(r.writes)
    if r.HasField("response"):
        render_response(r.response, shadow=is_shadow(r))
    return 0


def _delivery_attempts(r: apb.RequestRecord) -> str:
    """Tries so far: `delivery_attempts` counts the failed ones, the delivery itself is one more."""
    failed = r.delivery_attempts
    if r.HasField("delivered_at"):
        return f"{failed + 1} ({failed} failed)" if failed else "1"
    return f"{failed} failed" if failed else "none yet"


def devices_list(args: Options) -> int:
    def get(limit: int) -> list[apb.DeviceRecord]:
        query = apb.ListDevicesRequest(page_size=page_rows(limit), selector=args.selector or "")
        return follow(functools.partial(_page, args, "ListDevices", query, field="devices"), limit)

    return show(
        args,
        lambda: fetch(args, get),
        kind="device",
        name=lambda d: d.id,
        render=lambda rows: limits_table(rows) if args.limits else devices_table(rows, wide=args.wide),
        what="devices",
        record=device_dict,
    )


def devices_health(args: Options) -> int:
    def get(limit: int) -> list[apb.BmcHealth]:
        if args.device:  # one device: its row, wherever it falls in the pages
            query = apb.ListBmcHealthRequest(page_size=page_rows(ALL), unreachable=args.unreachable)
            rows = follow(functools.partial(_page, args, "ListBmcHealth", query, field="devices"), ALL)
            return [r for r in rows if r.device == args.device]
        query = apb.ListBmcHealthRequest(
            page_size=page_rows(limit), unreachable=args.unreachable, selector=args.selector or ""
        )
        return follow(functools.partial(_page, args, "ListBmcHealth", query, field="devices"), limit)

    return show(
        args,
        lambda: fetch(args, get),
        kind="device",
        name=lambda r: r.device,
        render=lambda rows: health_table(rows, wide=args.wide),
        what="devices",
    )


def devices_show(args: Options) -> int:
    d = _call(args, "GetDevice", apb.GetDeviceRequest(id=args.device))
    if args.json:
        print_json(device_dict(d))
        return 0
    table(
        f"device {d.id}",
        ("field", "value"),
        [
            ("plugin", d.plugin),
            ("in inventory", d.in_inventory),
            ("state version", d.state_version),
            ("last request", d.last_request_id),
            ("last kind", d.last_kind),
            ("last outcome", d.last_outcome),
            ("last error", d.last_error),
            ("queued", d.queued),
            ("updated", when(d.updated_at)),
        ],
    )
    if d.HasField("health"):
        health_table([d.health], wide=True)
    show_in_force(d)
    if d.desired:
        render_desired(d.desired)
    state = json.loads(d.state_json) if d.state_json else None
    console.print_json(data=state) if state is not None else console.print("state: none")
    return 0


def verifications_list(args: Options) -> int:
    def get(limit: int) -> list[apb.VerificationRecord]:
        query = apb.ListVerificationsRequest(
            device=args.device or "",
            verification_id=args.verification_id or "",
            page_size=page_rows(limit),
            selector=args.selector or "",
        )
        ask = functools.partial(_page, args, "ListVerifications", query, field="verifications")
        return follow(ask, limit)

    return show(
        args,
        lambda: fetch(args, get, lambda v: v.created_at),
        kind="verification",
        name=lambda v: v.verification_id,
        render=lambda rows: _verifications_table(args, rows),
        what="verifications",
    )


def _verifications_table(args: Options, rows: list[apb.VerificationRecord]) -> None:
    at = when if args.wide else when_short
    table(
        "verifications",
        ("verification_id", "device", "request_id", "kind", "status", "created", "finished", "detail"),
        (
            (
                short_id(v.verification_id, args.wide),
                v.device,
                short_id(v.request_id, args.wide),
                v.kind,
                v.status,
                at(v.created_at),
                at(v.finished_at),
                clip_cell(v.detail, args.wide),
            )
            for v in rows
        ),
        cut_first=("detail",),
    )


def plugins_list(args: Options) -> int:
    """Installed plugins, read locally from the entry-point group (no server needed)."""
    from plugins import registry

    rows = []
    for source in registry.available():
        try:
            info = registry.load_class(source.name).info
            rows.append(
                {"name": source.name, "version": info.version, "vendor": info.vendor, "source": source.target}
            )
        except Exception as exc:  # a broken third-party plugin must not hide the others
            rows.append(
                {"name": source.name, "version": f"unloadable: {exc}", "vendor": "", "source": source.target}
            )
    if args.json:
        print_json(rows)
        return 0
    table(
        "plugins",
        ("name", "version", "vendor", "source"),
        ((r["name"], r["version"], r["vendor"], r["source"]) for r in rows),
    )
    return 0
