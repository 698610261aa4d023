"""BENCHMARKS.md's fleet fan-out section and its plot (time versus fleet size), from the results of
`bench.fanout`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.report_cells import fmt, run_line, table
from bench.util import say


def fanout_section(section: Mapping[str, Any], plot: str) -> list[str]:
    result = section["result"]
    cfg = result["config"]
    sizes = result["sizes"]
    lines = [
        "## 2. Fleet fan-out",
        "",
        run_line(section),
        "",
        f"Simulated GB200 BMCs (`bmcsim`, HTTPS, {cfg['latency'] * 1000:.0f} ms added "
        "to every "
        f"call, up to {cfg['per_process']:,} BMCs per simulator process), the controller on "
        f"{cfg['backend']} with "
        "`--max-concurrency` = max(fleet size, 1024) and the Redfish plugin's default per-BMC "
        "concurrency of "
        f"{cfg['concurrency']}. One resource-group activation per BMC: the node policy (2 superchip-module "
        "caps), 4 GPU caps and 2 CPU caps, i.e. 8 writes, each a GET, a PATCH and a read-back GET (in "
        "steady state no GET before the PATCH: the controller's own read-back of the first activation "
        "is still valid and stands in for it, docs/redfish.md). "
        "Time: first "
        "send to the last response at the topology sink.",
        "",
        "- *first contact*: the controller has never talked to these BMCs: each activation also logs in "
        "and discovers the Redfish service.",
        "- *steady state*: a second activation (another resource group, other values) once the controller "
        "holds a session and the discovery for every BMC — the normal case in production.",
        "- calls per activation = calls/BMC (one activation per BMC).",
        f"- *baseline*: the same calls made by a script with the synchronous DMTF `redfish` client in a "
        f"`ThreadPoolExecutor` ({cfg['baseline_workers']} threads), one BMC per thread start to finish: "
        "log in, (first contact: the same discovery walk), GET/PATCH/GET per cap, log out (a script "
        "keeps no read-back: it reads before every write).",
        f"- *floor* = calls per BMC x latency ÷ per-BMC concurrency ({cfg['concurrency']}), calls "
        "counted by the "
        "simulator for the phase (login and discovery included in first contact). The BMCs are independent, "
        "so the fleet's floor is the largest per-BMC floor. It is a lower bound: dependent calls (a "
        "read-back after its PATCH, discovery's walk down the resource tree) cannot overlap; in steady state "
        "it is exact (8 independent 2- or 3-call chains on 2 slots = 4 rounds x 2 or 3 x latency).",
        "",
    ]
    rows = []
    for size in sizes:
        for layout_index, layout in enumerate(layouts_of(size)):
            baseline = size.get("baseline", []) if layout_index == 0 else []
            for index, phase in enumerate(layout["phases"]):
                base = baseline[index] if index < len(baseline) else None
                rows.append(
                    [
                        f"{size['n']:,}",
                        layout.get("layout", "one process"),
                        phase["phase"],
                        f"{phase['calls_per_bmc_max']}",
                        fmt(phase["floor"], 2),
                        fmt(phase["elapsed"], 2),
                        fmt(phase["ratio_to_floor"], 1) + "x",
                        fmt(base["elapsed"], 2) if base else "-",
                        (fmt(phase.get("speedup"), 2) + "x") if base else "-",
                        fmt(phase["cpu_ms_per_call"], 2),
                        fmt(phase.get("cpu_ms_per_activation"), 2),
                        fmt(phase.get("ack_p50_ms"), 0),
                        fmt(phase.get("ack_p99_ms"), 0),
                        _in_server(phase.get("ack_in_server")),
                        _probes(phase),
                        fmt(phase.get("gc_cpu_s"), 2),
                        f"{layout['peak_rss_mb']:.0f}",
                        "ok" if not phase["problems"] and not (base and base["problems"]) else "**problems**",
                    ]
                )
    lines += table(
        [
            "BMCs",
            "phase",
            "calls/BMC (= per activation)",
            "floor s",
            "devicectl s",
            "÷ floor",
            "baseline s",
            "speed-up",
            "controller CPU ms/call",
            "controller CPU ms/activation",
            "ack p50 ms",
            "ack p99 ms",
            "in the server: p50 ≤, p99 ≤ ms",
            "probe acks while executing: p50, p99 ms (count)",
            "collector CPU s",
            "peak RSS MB",
            "checks",
        ],
        rows,
    )
    lines += [
        "",
        "*layout*: one `serve` process on the backend above, or `serve --workers N` on PostgreSQL (a "
        "front end that acks, N executors; controller CPU summed over all of them). *ack p50/p99*: "
        "send to acknowledgement of each activation, measured by the sender while the wave runs "
        "(the sender shares the host's cores); *in the server*: receipt to journal commit in the acking "
        "process, its `devicectl_ack_duration_seconds` bucket bounds holding the p50 and p99. "
        "*probe acks*: once the wave is acked, single requests sent one at a time (50 ms after "
        "each ack) from a process of their own until the last response: 16 pings for devices in no "
        "inventory, journaled and answered before the first wave and sent again (a repeated "
        "request_id takes the whole ack path, plus one journal read, and is never run twice): the "
        "ack path's latency while execution holds the CPU. *collector CPU s*: the cyclic garbage "
        "collector's share of the executing processes' CPU in the phase "
        "(`devicectl_gc_cpu_seconds_total`). "
        "*after restart*: the controller stopped (SIGTERM) and started again on the same database with "
        "the warm-up at start; the wave is sent once the warm-up has finished.",
    ]
    lines += _restart_table(sizes)
    for failed in result.get("failed_sizes", []):
        lines += ["", f"**{failed['n']:,} BMCs failed**: `{failed['error'][:300]}`"]
    lines += ["", f"![time versus fleet size]({plot})", ""]
    if sizes:
        last = sizes[-1]
        lines += [
            f"Calls per BMC as the simulator counted them ({last['n']:,} BMCs; the baseline's extra calls "
            "are "
            "its per-run login and logout, which devicectl does once per BMC, not per request):",
            "",
        ]
        names = sorted(
            {k for p in last["phases"] for k in p["calls_per_bmc"]}
            | {k for p in last.get("baseline", []) for k in p["calls_per_bmc"]}
        )
        warm = layouts_of(last)[0].get("warmup") or {}
        names = sorted(set(names) | set(warm.get("calls_per_bmc", {})))
        header = ["call"] + [f"devicectl {p['phase']}" for p in last["phases"]]
        header += ["devicectl warm-up"] if warm else []
        header += [f"baseline {p['phase']}" for p in last.get("baseline", [])]
        table_rows = []
        for name in names:
            cells = [f"`{name}`"] + [fmt(p["calls_per_bmc"].get(name, 0.0), 2) for p in last["phases"]]
            cells += [fmt(warm["calls_per_bmc"].get(name, 0.0), 2)] if warm else []
            cells += [fmt(p["calls_per_bmc"].get(name, 0.0), 2) for p in last.get("baseline", [])]
            table_rows.append(cells)
        lines += table(header, table_rows)
        detail = []
        for size in sizes:
            for layout, phase in ((lay, p) for lay in layouts_of(size) for p in lay["phases"]):
                detail.append(
                    [
                        f"{size['n']:,}",
                        layout.get("layout", "one process"),
                        phase["phase"],
                        str(size["simulator_processes"]),
                        fmt(phase["acked_after"], 2),
                        str(phase.get("send_retries", 0)),
                        fmt(phase["controller_cpu_s"], 1),
                        fmt(phase["simulator_cpu_s"], 1),
                        str(phase["max_in_flight_per_bmc"]),
                        str(phase["connections_opened"]),
                        str(phase["sessions_created"]),
                        ", ".join(
                            f"{k}: {v}"
                            for k, v in phase.get("statuses", {}).items()
                            if k not in ("200", "201")
                        )
                        or "-",
                    ]
                )
        lines += [
            "",
            "Where the time went (devicectl runs): all acks were in after *acked* (sends the controller "
            "refused were retried, as a topology server would: *send retries*); CPU seconds of the "
            "controller "
            "and of the simulator processes during the phase; the most calls the simulator saw in flight on "
            "one BMC; TCP connections and Redfish sessions the BMCs saw opened; HTTP statuses other than "
            "200/201 (retried calls).",
            "",
            *table(
                [
                    "BMCs",
                    "layout",
                    "phase",
                    "sim processes",
                    "acked s",
                    "send retries",
                    "controller CPU s",
                    "simulator CPU s",
                    "max in flight/BMC",
                    "connections",
                    "sessions",
                    "other statuses",
                ],
                detail,
            ),
        ]
    return lines


def _in_server(inside: Mapping[str, Any] | None) -> str:
    if not inside or inside.get("p50_at_most_ms") is None:
        return "-"
    return f"{_bound(inside['p50_at_most_ms'])}, {_bound(inside.get('p99_at_most_ms'))}"


def _probes(phase: Mapping[str, Any]) -> str:
    if not phase.get("probe_acks"):
        return "-"
    return f"{phase['probe_ack_p50_ms']:.0f}, {phase['probe_ack_p99_ms']:.0f} ({phase['probe_acks']})"


def _bound(value: float | None) -> str:
    return "-" if value is None else ("beyond the buckets" if value == float("inf") else f"{value:g}")


def layouts_of(size: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A size's layouts; a result from before layouts were measured is one process."""
    return list(size.get("layouts") or [{"phases": size["phases"], "peak_rss_mb": size["peak_rss_mb"]}])


def _restart_table(sizes: list[Mapping[str, Any]]) -> list[str]:
    """The wave after a restart next to steady state, and the warm-up it waited for."""
    rows = []
    for size in sizes:
        for layout in layouts_of(size):
            by_name = {p["phase"]: p for p in layout["phases"]}
            steady, after = by_name.get("steady state"), by_name.get("after restart")
            warm = layout.get("warmup")
            if not (steady and after and warm):
                continue
            devices = warm.get("devices", {})
            rows.append(
                [
                    f"{size['n']:,}",
                    layout.get("layout", "one process"),
                    fmt(steady.get("cpu_ms_per_activation"), 2),
                    fmt(after.get("cpu_ms_per_activation"), 2),
                    fmt(steady.get("calls_per_activation"), 1),
                    fmt(after.get("calls_per_activation"), 1),
                    str(after.get("sessions_created", "-")),
                    fmt(warm["ready_s"], 1),
                    fmt(warm["warmup_cpu_s"], 1),
                    fmt(warm["calls"] / size["n"] if size["n"] else 0.0, 1),
                    f"{devices.get('done', 0)}/{devices.get('failed', 0)}/{devices.get('skipped', 0)}",
                ]
            )
    if not rows:
        return []
    return [
        "",
        "After a restart: the wave on a warmed inventory next to steady state, and the warm-up it "
        "waited for (*ready*: from the start to the end of the warm-up; *warm-up CPU*: the restarted "
        "controller's CPU until then, less that of the first start, which had no warm-up).",
        "",
        *table(
            [
                "BMCs",
                "layout",
                "CPU ms/activation steady",
                "after restart",
                "BMC calls/activation steady",
                "after restart",
                "sessions created after restart",
                "warm-up: ready s",
                "warm-up CPU s",
                "warm-up calls/BMC",
                "devices done/failed/skipped",
            ],
            rows,
        ),
    ]


def plot_fanout(results: Mapping[str, Any], path: Path) -> bool:
    """Time versus fleet size, one panel per phase. False when there is nothing to plot, or no
    matplotlib to draw it with (the `bench` extra: `make bench` installs it)."""
    sizes = results.get("fanout", {}).get("result", {}).get("sizes", [])
    if not sizes:
        return False
    try:
        import matplotlib
    except ImportError:
        say(f"fan-out plot not drawn ({path} left as it was): matplotlib is not installed (`make bench`)")
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [s["n"] for s in sizes]
    phases = [p["phase"] for p in sizes[0]["phases"]]
    fig, axes = plt.subplots(1, len(phases), figsize=(6 * len(phases), 4.5), squeeze=False)
    for index, (ax, phase) in enumerate(zip(axes[0], phases, strict=True)):
        ours = [s["phases"][index] for s in sizes]
        ax.plot(ns, [p["elapsed"] for p in ours], "o-", label="devicectl")
        ax.plot(ns, [p["floor"] for p in ours], "s--", label="floor (calls x latency ÷ concurrency)")
        if all(index < len(s.get("baseline", [])) for s in sizes):
            ax.plot(
                ns,
                [s["baseline"][index]["elapsed"] for s in sizes],
                "^-",
                label="sync redfish client, threads",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("BMCs")
        ax.set_ylabel("seconds until every response arrived")
        ax.set_title(phase)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle("One resource-group activation per BMC")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
