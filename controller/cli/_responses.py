"""Human rendering of a DeviceControllerResponse: one summary line and per-component tables."""

from __future__ import annotations

from controller import translate
from controller._proto.devicecontroller.v1 import admin_pb2 as apb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.cli._render import console, table
from plugins.base import WriteOutcome


def _w(value: float | None) -> str:
    return "" if value is None else f"{value:g} W"


def _cap(ok: bool, watts: float, diag: str) -> tuple[str, str, str]:
    """(result, power, detail) of one component: a failed one says what its write did on the device
    (written, not written, unknown), never less than what happened; a successful 0 W is no cap
    at all (a removed one: no component takes a 0 W cap)."""
    rest, write = translate.split_write(diag)
    if ok:
        return "ok", _w(watts) if watts else "no cap", rest
    if write is WriteOutcome.WRITTEN:
        return "failed", f"{_w(watts)} written" if watts else "written", rest
    if write is WriteOutcome.UNKNOWN:
        return "failed", "unknown: no answer", rest
    if write is WriteOutcome.NOT_WRITTEN:
        return "failed", f"not written ({_w(watts)} in force)" if watts else "not written", rest
    return "failed", "not applied", diag  # the plugin does not say


def energy(value: float, unit: str) -> str:
    """Energy readable at a glance: joules as kWh (`11.0 kWh`, not `3.96004e+07 Joules`)."""
    if unit.strip().lower() in ("joules", "joule", "j") and value >= 3600:
        return f"{value / 3.6e6:,.{3 if value < 3.6e7 else 1}f} kWh"
    text = f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:g}"
    return f"{text} {unit}".strip()


#: what a request answered in shadow mode says where a live one says "ok"
SHADOW_OK = "shadow: acknowledged, nothing written"


def is_shadow(record: apb.RequestRecord) -> bool:
    """Whether a recorded request ran in shadow mode (its receipts or its note say so)."""
    return any(w.status == "shadow" for w in record.writes) or record.error.startswith("shadow mode")


def render_response(response: pb.DeviceControllerResponse, *, shadow: bool = False) -> None:
    """The response as a line and a table; `shadow`: a request answered in shadow mode, whose
    components were planned and not written (never shown as applied)."""
    ok, error = translate.success_of(response)
    kind = response.WhichOneof("response") or "?"
    status = "[green]ok[/green]" if ok else f"[red]failed[/red]: {error}"
    if shadow:
        status = f"[yellow]{SHADOW_OK}[/yellow]" if ok else f"[red]failed[/red] (shadow mode): {error}"
    console.print(f"{response.device} {kind} request_id={response.request_id}: {status}")
    if response.device_ping_error:
        console.print(f"  device unreachable: {response.device_ping_error}")
    member = getattr(response, kind) if kind != "?" else None
    if member is None:
        return
    rows: list[tuple[str, str, str, str]] = []
    if isinstance(member, pb.DeviceControllerResponse.AllocationResponse):
        for name in ("node", "cpu", "memory"):
            field = f"allocated_{name}_policy"
            if member.HasField(field):
                comp = getattr(member, field)
                rows.append((name, *_cap(comp.ok, comp.power_cap_watts, comp.diag_msg)))
        if member.HasField("allocated_gpu_policies"):
            for gpu in member.allocated_gpu_policies.results:
                rows.append((f"GPU {gpu.gpu_id}", *_cap(gpu.ok, gpu.power_cap_watts, gpu.diag_msg)))
        if member.HasField("workload_profile_result"):
            _profiles(member.workload_profile_result, rows)
    elif isinstance(member, pb.DeviceControllerResponse.GPUPoliciesUpdateResponse):
        for gpu in member.results:
            rows.append((f"GPU {gpu.gpu_id}", *_cap(gpu.ok, gpu.power_cap_watts, gpu.diag_msg)))
    elif isinstance(member, pb.DeviceControllerResponse.PowerProfileResponse):
        _profiles(member, rows)
    elif isinstance(member, pb.DeviceControllerResponse.GPUMetricsResponse):
        for m in member.metrics:
            rows.append((f"GPU {m.gpu_id}", "", _w(m.usage), "power usage"))
    elif isinstance(member, pb.DeviceControllerResponse.StdMetricsResponse) and member.HasField("metrics"):
        node = member.metrics
        rows.append(("node", "", _w(node.power_usage), f"{node.num_gpus} GPUs, {node.num_cpus} CPUs"))
        for label, items in (("GPU", node.gpus), ("CPU", node.cpus)):
            for d in items:
                rows.append(
                    (
                        f"{label} {d.id}",
                        "",
                        _w(d.power_usage),
                        f"limit {d.set_limit:g} W ({d.min_limit:g}..{d.max_limit:g}), "
                        f"{energy(d.energy_usage, d.energy_usage_unit)}, {d.temperature_celsius:g} °C",
                    )
                )
    elif isinstance(member, pb.DeviceControllerResponse.BMCHealthResponse):
        # every check the answer carries, as `devicectl verify` shows them: "ok" alone says nothing
        verdict = member.verdict or ("pass" if member.success else "fail")
        table(
            f"readiness checks: {verdict}",
            ("check", "status", "detail"),
            [(c.name, c.status, c.detail) for c in member.checks],
        )
    if rows and shadow:  # planned, not written: the power is what a live run would have set
        rows = [
            (c, "shadow" if r == "ok" else r, f"{p} not written" if r == "ok" and p else p, d)
            for c, r, p, d in rows
        ]
    if rows:
        table("", ("component", "result", "power", "detail"), rows)


def _profiles(
    member: pb.DeviceControllerResponse.PowerProfileResponse, rows: list[tuple[str, str, str, str]]
) -> None:
    for st in member.gpu_statuses:
        enforced = ",".join(str(i) for i in st.enforced_workload_profile_ids) or "none"
        rows.append(
            (
                f"GPU {st.gpu_id} profiles",
                "ok" if st.success else "failed",
                "",
                f"enforced {enforced} {st.diag_msg}".strip(),
            )
        )
    if member.verification_id:
        rows.append(("verification", "pending", "", member.verification_id))
