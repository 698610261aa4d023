"""`devicectl demo`: the whole system on one machine.

Starts a simulated fleet of GB200 NVL compute-tray BMCs (HTTPS, sessions, ETags) serving the sourced
mockup `gb200-nvl-gpu-caps` (bmcsim/mockups/nvidia-gb200-nvl-gpu-caps, each resource's source in its
SOURCES.md), the controller on SQLite and a topology sink, all in this process; reads each node's
limits, activates a resource group (a node policy and per-GPU caps) on every node, shows requested
vs applied per component, then deactivates and shows that the previous values came back.

The requests are what that firmware offers: its GPUs' EnvironmentMetrics carry a limit (200..1200 W),
so the GPU caps are set and restored; it offers no node limit (its processor modules carry none), so
the node cap is refused with the BMC's reason and nothing is written, which the demo shows as a
refusal. It requests no CPU cap and no workload profile: the mockup offers neither.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from google.protobuf import json_format, struct_pb2
from rich.progress import Progress

from controller import translate
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc
from controller.app import Controller
from controller.cli._render import console, print_json, table
from controller.config import Settings
from controller.delivery.sink import TopologySink
from controller.security import certs
from controller.security.tls import ClientTls, ServerTls, client_channel
from plugins.base import (
    Allocation,
    DeviceRequest,
    ElementType,
    Empty,
    GpuPoliciesChange,
    GpuPolicy,
    Policy,
    PolicyAction,
    PolicyChange,
    PolicyLimit,
    PowerLimit,
    RequestKind,
)

GPU_CAPS = {0: 900.0, 1: 850.0, 2: 800.0, 3: 750.0}
NODE_CAP = 5000.0
POLICY = Policy("demo-high", (PolicyLimit(ElementType.NODE, PowerLimit(watts=NODE_CAP)),))
#: a sourced mockup whose firmware offers GPU limits (bmcsim.MOCKUPS)
DEMO_MODEL = "gb200-nvl-gpu-caps"


def run_demo(
    nodes: int = 16,
    workdir: str = "var/demo",
    mtls: bool = False,
    verbose: bool = False,
    as_json: bool = False,
    agent: bool = False,
) -> int:
    logging.basicConfig(level=logging.WARNING)
    # NOTE: a cap the BMC offers no limit for is refused by design here; the table shows each
    # refusal with the BMC's reason, so the controller's "not applied" warning would only repeat it
    logging.getLogger("controller.changes").setLevel(logging.ERROR)
    path = Path(workdir)
    path.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):  # every demo starts from an empty database
        Path(f"{path / 'devicectl.db'}{suffix}").unlink(missing_ok=True)
    if not as_json:
        return asyncio.run(_demo(nodes, path, mtls, verbose, agent=agent))
    rows: list[Row] = []
    console.quiet = True  # --json: only the JSON summary on stdout
    try:
        code = asyncio.run(_demo(nodes, path, mtls, verbose, rows, agent=agent))
    finally:
        console.quiet = False
    columns = ("node", "component", "before", "requested", "applied", "after_deactivate")
    # a refused component is "refused: <the BMC's reason>" in "applied", never an error
    print_json({"ok": code == 0, "components": [dict(zip(columns, row, strict=True)) for row in rows]})
    return code


def port_text(ports: list[int], inventory: Path) -> str:
    """The BMCs' ports: a range only when they are one (ephemeral ports are not: "43931..41305"
    read as a range that runs backwards), else the first few and where all are listed."""
    ordered = sorted(ports)
    if len(ordered) > 1 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"ports {ordered[0]}..{ordered[-1]}"
    if len(ordered) <= 4:
        return ("port " if len(ordered) == 1 else "ports ") + ", ".join(map(str, ordered))
    return f"ports {', '.join(map(str, ordered[:3]))}, … ({len(ordered)} ports, listed in {inventory})"


async def _send_all(
    stub: dgrpc.DeviceControllerStub,
    sink: TopologySink,
    ids: list[str],
    kind: RequestKind,
    request: DeviceRequest,
    label: str,
) -> dict[str, pb.DeviceControllerResponse]:
    sent = {}
    # a bar only at a terminal; a pipe gets nothing drawn
    with Progress(console=console, transient=False, disable=not console.is_terminal) as progress:
        task = progress.add_task(label, total=len(ids))
        for device in ids:
            rid = f"{kind.value}-{device}-{uuid.uuid4().hex[:8]}"
            msg = translate.request_to_proto(kind, request, device=device, request_id=rid, timeout_seconds=60)
            await stub.SendDeviceRequest(msg)
            sent[rid] = device
        while len(set(sent) & set(sink.counts)) < len(sent):
            progress.update(task, completed=len(set(sent) & set(sink.counts)))
            await asyncio.sleep(0.05)
        progress.update(task, completed=len(sent))
    got = sink.unique()
    return {sent[rid]: got[rid] for rid in sent}


def _w(value: float | None) -> str:
    return "-" if value is None else f"{value:g} W"


def _mtls(workdir: Path) -> tuple[dict[str, Any], ServerTls, ClientTls]:
    """Controller settings, sink TLS and client TLS for a demo over mutual TLS with roles."""
    made = certs.init(workdir / "pki", ("topology", "controller"))
    ca, server = str(made.ca), (str(made.server_cert), str(made.server_key))
    settings = {
        "tls_cert": server[0],
        "tls_key": server[1],
        "tls_client_ca": ca,
        "roles": "topology=topology",
        "callback_ca_cert": ca,
        "callback_cert": str(made.clients["controller"][0]),
        "callback_key": str(made.clients["controller"][1]),
    }
    cert, key = made.clients["topology"]
    return settings, ServerTls(*server, ca), ClientTls(ca_cert=ca, cert=str(cert), key=str(key))


async def _demo(
    nodes: int,
    workdir: Path,
    mtls: bool = False,
    verbose: bool = False,
    report: list[Row] | None = None,
    *,
    agent: bool = False,
) -> int:
    from bmcsim import SimulatorFleet

    db = workdir / "devicectl.db"
    if console.is_terminal:
        console.rule("devicectl demo")
    else:
        console.print("devicectl demo")
    async with SimulatorFleet(n=nodes, model=DEMO_MODEL, cert_dir=workdir / "tls", latency=0.02) as fleet:
        fleet.write_inventory(workdir / "inventory.toml", workdir / "secrets")
        ports = port_text([int(bmc.url.rsplit(":", 1)[1]) for bmc in fleet.bmcs], workdir / "inventory.toml")
        console.print(
            f"{nodes} simulated GB200 NVL compute-tray BMCs (mockup {DEMO_MODEL}, from NVIDIA's sources) "
            f"on https://127.0.0.1 {ports}"
        )
        security, sink_tls, client = _mtls(workdir) if mtls else ({}, ServerTls(), ClientTls())
        sink = TopologySink("127.0.0.1:0", tls=sink_tls)
        await sink.start()
        # agent mode: the controller dials out to the sink, which routes requests over that stream
        transport: dict[str, Any] = {"callback": sink.address}
        if agent:
            transport = {"callback": "", "agent_server": sink.address, "agent_reconnect_max": 1.0}
            if not mtls:
                transport["agent_id"] = "demo-agent"  # under mutual TLS: the certificate's CN
        settings = Settings(
            listen="127.0.0.1:0",
            database_url=f"sqlite:///{db}",
            inventory=str(workdir / "inventory.toml"),
            secrets_dir=str(workdir / "secrets"),
            auto_upgrade=True,
            log_level="WARNING",
            metrics_listen="127.0.0.1:0",
            **security,
            **transport,
        )
        controller = Controller(settings)
        await controller.start()
        target = f"127.0.0.1:{controller.port}"
        if agent:
            assert controller.agent is not None
            while not controller.agent_transport.connected:  # noqa: ASYNC110 (a handful of polls)
                await asyncio.sleep(0.05)
            target = sink.address
            console.print(f"agent mode: agent {controller.agent.agent_id} dialed out to {sink.address}")
        console.print(
            f"controller on 127.0.0.1:{controller.port} (SQLite {db}), topology sink on {sink.address}"
            + (" (mutual TLS both ways; certificates in " + str(workdir / "pki") + ")" if mtls else "")
        )
        assert controller.metrics_server is not None
        metrics_url = f"http://127.0.0.1:{controller.metrics_server.port}/metrics"
        console.print(f"metrics on {metrics_url} (and /healthz, /readyz) while the demo runs")
        ids = sorted(controller.inventory)
        try:
            async with client_channel(target, client) as channel:
                stub = dgrpc.DeviceControllerStub(channel)
                before = await _send_all(stub, sink, ids, RequestKind.STD_METRICS, Empty(), "reading limits")
                # the node's own limit is not in the standard metrics: read the BMC's documents
                raw = await _send_all(
                    stub, sink, ids, RequestKind.RAW_METRICS, Empty(), "reading node limits"
                )
                activation = Allocation(
                    "demo-rg",
                    policy=PolicyChange(PolicyAction.SET, POLICY),
                    gpu_policies=GpuPoliciesChange(
                        "demo-rg",
                        PolicyAction.SET,
                        POLICY,
                        tuple(GpuPolicy(g, PowerLimit(watts=w)) for g, w in GPU_CAPS.items()),
                    ),
                )
                active = await _send_all(
                    stub,
                    sink,
                    ids,
                    RequestKind.RESOURCE_GROUP_ACTIVATE,
                    activation,
                    "activating resource group",
                )
                deactivation = Allocation(
                    "demo-rg",
                    policy=PolicyChange(PolicyAction.UNSET),
                    gpu_policies=GpuPoliciesChange("demo-rg", PolicyAction.UNSET),
                )
                restored = await _send_all(
                    stub, sink, ids, RequestKind.RESOURCE_GROUP_DEACTIVATE, deactivation, "deactivating"
                )
            await _metrics_summary(metrics_url)
        finally:
            await controller.stop()
            await sink.stop()
        rows = _rows(ids, before, {d: _node_limit(raw[d]) for d in ids}, active, restored)
        if report is not None:
            report.extend(rows)
        if verbose:
            table(
                "requested vs applied, and what deactivation restored",
                ("node", "component", "before", "requested", "applied", "after deactivate"),
                rows,
            )
        else:
            _summary(ids, rows)
        if mtls:
            who = ", ".join(f"{name} ({count})" for name, count in sink.peers.items()) or "nobody"
            console.print(f"responses delivered over mutual TLS by certificate: {who}")
        writes = [w for bmc in fleet.bmcs for w in getattr(bmc.state, "writes", ())]
        elsewhere = [f"{method} {path}" for method, path, *_ in writes if "/Processors/GPU_" not in path]
        console.print(
            f"BMC write log: {len(writes)} writes, {len(writes) - len(elsewhere)} to the GPUs' "
            f"EnvironmentMetrics, {len(elsewhere)} elsewhere"
            + (f" ({', '.join(elsewhere)})" if elsewhere else "")
        )
        leaked = sum(bmc.stats.open_sessions for bmc in fleet.bmcs)
        console.print(f"Redfish sessions left open on the BMCs after shutdown: {leaked}")
    failed = [d for d in ids if not _as_offered(rows, d, restored[d])]
    refused = sorted({row[1] for row in rows if row[4].startswith(REFUSED)})
    console.print(
        "[green]all nodes activated and restored[/green]"
        + (
            f"; refused where the BMCs offer no limit, nothing written: {', '.join(refused)}"
            if refused
            else ""
        )
        if not failed
        else f"[red]failed on {', '.join(failed)}[/red]"
    )
    return 1 if failed else 0


REFUSED = "refused: "


def _as_offered(rows: list[Row], device: str, restored: pb.DeviceControllerResponse) -> bool:
    """Whether every component of the node did what its BMC offers: set as requested and restored,
    or refused (nothing written) where the BMC showed no limit before; and the deactivation succeeded."""
    for _, _, before, requested, applied, after in (r for r in rows if r[0] == device):
        if applied.startswith(REFUSED):
            if before != NO_LIMIT:  # the BMC showed a limit: a refusal there is a failure
                return False
        elif applied != requested or after != before:
            return False
    return translate.success_of(restored)[0]


def _node_limit(response: pb.DeviceControllerResponse) -> float | None:
    """The node's limit before any change: the chassis-level power limits the BMC reports (on a
    GB300 tray, its processor modules), summed; None when it reports none (a GB200 tray's modules
    carry no limit)."""
    raw = struct_pb2.Struct()
    if not response.HasField("raw_metrics") or not response.raw_metrics.raw_metrics.Unpack(raw):
        return None
    docs = json_format.MessageToDict(raw)
    docs = docs.get("documents", docs)
    total, found = 0.0, False
    for uri, doc in docs.items():
        limit = doc.get("PowerLimitWatts") if isinstance(doc, dict) else None
        point = limit.get("SetPoint") if isinstance(limit, dict) else None
        if uri.startswith("/redfish/v1/Chassis/") and isinstance(point, int | float):
            total, found = total + float(point), True
    return total if found else None


Row = tuple[str, str, str, str, str, str]


def _rows(
    ids: list[str],
    before: dict[str, pb.DeviceControllerResponse],
    node_before: dict[str, float | None],
    active: dict[str, pb.DeviceControllerResponse],
    restored: dict[str, pb.DeviceControllerResponse],
) -> list[Row]:
    rows: list[Row] = []
    for device in ids:
        start = before[device].std_metrics.metrics
        act = active[device].resource_group_activate
        end = restored[device].resource_group_deactivate
        gpu_before = {int(g.id): g.set_limit for g in start.gpus}
        gpu_applied = {r.gpu_id: r for r in act.allocated_gpu_policies.results}
        gpu_restored = {r.gpu_id: r.power_cap_watts for r in end.allocated_gpu_policies.results}
        for gpu, want in GPU_CAPS.items():
            got = gpu_applied.get(gpu)
            rows.append(
                (
                    device,
                    f"GPU {gpu}",
                    _w(gpu_before.get(gpu)),
                    _w(want),
                    _w(got.power_cap_watts) if got and got.ok else f"failed: {got.diag_msg if got else '-'}",
                    _w(gpu_restored.get(gpu)),
                )
            )
        node = act.allocated_node_policy
        was = node_before.get(device)
        rows.append(
            (
                device,
                "node",
                NO_LIMIT if was is None else _w(was),
                _w(NODE_CAP),
                _w(node.power_cap_watts) if node.ok else _refusal(node.diag_msg, was),
                (NO_LIMIT if was is None else _w(end.allocated_node_policy.power_cap_watts)),
            )
        )
    return rows


#: a component whose BMC showed no limit before anything was asked
NO_LIMIT = "no limit offered"


def _refusal(diag: str, before: float | None) -> str:
    """A component that was not applied: a refusal (with the BMC's reason) when the BMC offered no
    limit before and the plugin says nothing was written ("not written; ..."), else a failure."""
    if before is None and diag.startswith("not written; "):
        reason = diag.removeprefix("not written; ")
        head, sep, rest = reason.partition("): ")
        if sep and "unsupported on this platform" in head:
            reason = rest
        return REFUSED + reason.split(" (requested ")[0]
    return f"failed: {diag}"


def _summary(ids: list[str], rows: list[Row]) -> None:
    """A row per node: each component as before -> applied -> restored (--verbose: per component)."""
    by_node: dict[str, list[Row]] = {d: [] for d in ids}
    for row in rows:
        by_node[row[0]].append(row)
    out = []
    for device, items in by_node.items():
        gpus = [r for r in items if r[1].startswith("GPU ")]
        cells = {"GPUs": " -> ".join(_joined(r[i] for r in gpus) for i in (2, 4, 5))}
        for _, component, was, _want, got, after in items:
            if not component.startswith("GPU "):
                # a refusal's reason is in --verbose; here only that it was refused
                shown = "refused" if got.startswith(REFUSED) else got
                cells[component] = f"{was} -> {shown} -> {after}"
        out.append((device, cells.get("GPUs", ""), cells.get("node", "")))
    table(
        "requested vs applied, and what deactivation restored: before -> applied -> after (--verbose: "
        "each component, with the reason of each refusal)",
        ("node", "GPUs", "node limit"),
        out,
    )


def _joined(values: Iterable[str]) -> str:
    """ "900/850 W" for per-GPU values, one value when they are all equal."""
    distinct = list(dict.fromkeys(values))
    if len(distinct) > 1 and all(v.endswith(" W") for v in distinct):
        return "/".join(v.removesuffix(" W") for v in distinct) + " W"
    return "/".join(distinct)


async def _metrics_summary(url: str) -> None:
    """A few counters read back over HTTP from the controller's /metrics, as a user would."""
    import aiohttp
    from prometheus_client.parser import text_string_to_metric_families

    async with aiohttp.ClientSession() as http, http.get(url) as reply:
        text = await reply.text()
    answered = acked = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "devicectl_requests_total":
                answered += sample.value
            elif sample.name == "devicectl_requests_accepted_total":
                acked += sample.value
    console.print(f"{url}: {acked:g} requests acknowledged, {answered:g} answered")
