"""The baseline: the same BMC work scripted the way an operator would without devicectl.

    BENCH_BMC_PASSWORD=... python -m bench.baseline --plan plan.json

One synchronous DMTF `redfish.redfish_client` per BMC, BMCs spread over a `ThreadPoolExecutor`,
each BMC handled start to finish by one thread: log in (a Redfish session), optionally walk the
service the way the Redfish plugin's discovery does (first contact), then for each component the
same GET / PATCH (only if the value differs) / read-back GET the plugin makes, and log out.
Prints one JSON object: wall time, CPU seconds of this process, and per-BMC failures.

The plan file is JSON: {"urls": [...], "ca_bundle": path, "username": str, "workers": int,
"discover": bool, "watts": {"module": W, "gpu": W, "cpu": W}}. The password comes from the
environment (`BENCH_BMC_PASSWORD`), never from a file or the command line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

import redfish

PASSWORD_ENV = "BENCH_BMC_PASSWORD"

#: The GB200 NVL tray's cap resources, as an operator's script for that platform hard-codes them.
SYSTEM = "/redfish/v1/Systems/HGX_Baseboard_0"
GB200_CAPS: dict[str, tuple[str, ...]] = {
    "module": tuple(f"/redfish/v1/Chassis/HGX_ProcessorModule_{n}/EnvironmentMetrics" for n in range(2)),
    "gpu": tuple(f"{SYSTEM}/Processors/GPU_{n}/EnvironmentMetrics" for n in range(4)),
    "cpu": tuple(f"{SYSTEM}/Processors/CPU_{n}/EnvironmentMetrics" for n in range(2)),
}


@dataclass(frozen=True)
class BmcOutcome:
    """What happened on one BMC."""

    url: str
    ok: bool
    writes: int = 0
    error: str = ""


def _members(client: Any, path: str) -> list[str]:
    body = client.get(path).dict
    return [str(m["@odata.id"]) for m in body.get("Members", [])]


def _discover(client: Any) -> dict[str, tuple[str, ...]]:
    """Walk the service like the plugin's first-contact discovery; returns the cap resources.

    The plugin reads the service root (again), the BMC's manager (firmware version), every
    system and its processors, the chassis collection, and each limit resource (the evidence
    that it carries a limit); so does this.
    """
    root = client.get("/redfish/v1").dict
    managers = _members(client, root["Managers"]["@odata.id"])
    managers.sort(key=lambda m: (not m.rstrip("/").endswith("/BMC"), m))
    if managers:
        client.get(managers[0])
    processors: list[dict[str, Any]] = []
    systems = _members(client, root["Systems"]["@odata.id"])
    systems.sort(key=lambda s: ("Baseboard" not in s, s))
    for system_path in systems:
        system = client.get(system_path).dict
        link = system.get("Processors", {}).get("@odata.id")
        if link:
            processors += [client.get(p).dict for p in _members(client, link)]
    chassis = _members(client, root["Chassis"]["@odata.id"])

    def metrics(kind: str) -> tuple[str, ...]:
        return tuple(
            str(p["EnvironmentMetrics"]["@odata.id"])
            for p in processors
            if str(p.get("ProcessorType", "")).upper() == kind and "EnvironmentMetrics" in p
        )

    found = {
        "module": tuple(f"{c}/EnvironmentMetrics" for c in chassis if "ProcessorModule" in c),
        "gpu": metrics("GPU"),
        "cpu": metrics("CPU"),
    }
    # evidence before any write, as the plugin's write gate wants it: each limit resource is read
    # once at discovery to see that it carries the limit (and what scope its evidence proves)
    for uris in found.values():
        for uri in uris:
            client.get(uri)
    return found


def _set_cap(client: Any, uri: str, watts: int) -> bool:
    """GET, PATCH if needed (with If-Match, as the plugin does), read back. Returns True if written."""
    reply = client.get(uri)
    if reply.status != 200:
        raise RuntimeError(f"GET {uri}: HTTP {reply.status}")
    doc = reply.dict
    if doc["PowerLimitWatts"]["SetPoint"] == watts:
        return False
    headers = {"If-Match": doc["@odata.etag"]} if "@odata.etag" in doc else None
    reply = client.patch(uri, body={"PowerLimitWatts": {"SetPoint": watts}}, headers=headers)
    if reply.status not in (200, 204):
        raise RuntimeError(f"PATCH {uri}: HTTP {reply.status}")
    after = client.get(uri).dict["PowerLimitWatts"]["SetPoint"]
    if after != watts:
        raise RuntimeError(f"{uri}: asked for {watts} W, the BMC reports {after} W")
    return True


def configure_bmc(
    url: str, username: str, password: str, ca_bundle: str, watts: Mapping[str, int], discover: bool
) -> BmcOutcome:
    """Everything one BMC needs, start to finish, in the calling thread."""
    try:
        client = redfish.redfish_client(
            base_url=url, username=username, password=password, cafile=ca_bundle, timeout=30, max_retry=3
        )
        client.login(auth="session")
    except Exception as exc:
        return BmcOutcome(url, False, error=f"login: {type(exc).__name__}: {exc}")
    writes = 0
    try:
        caps = _discover(client) if discover else GB200_CAPS
        for kind, uris in caps.items():
            for uri in uris:
                writes += _set_cap(client, uri, int(watts[kind]))
    except Exception as exc:
        return BmcOutcome(url, False, writes, f"{type(exc).__name__}: {exc}")
    finally:
        try:
            client.logout()
        except Exception:  # a failed logout leaves a session behind; the work itself is done
            pass
    return BmcOutcome(url, True, writes)


def run(plan: Mapping[str, Any], password: str) -> dict[str, Any]:
    """Configure every BMC of the plan through the thread pool; returns the JSON-friendly result."""
    urls: Sequence[str] = plan["urls"]
    cpu_before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.monotonic()
    outcomes: list[BmcOutcome] = []
    with ThreadPoolExecutor(max_workers=int(plan["workers"])) as pool:
        futures = [
            pool.submit(
                configure_bmc,
                url,
                plan["username"],
                password,
                plan["ca_bundle"],
                plan["watts"],
                bool(plan["discover"]),
            )
            for url in urls
        ]
        outcomes = [f.result() for f in as_completed(futures)]
    elapsed = time.monotonic() - started
    cpu_after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    failed = [o for o in outcomes if not o.ok]
    return {
        "bmcs": len(urls),
        "workers": int(plan["workers"]),
        "elapsed": elapsed,
        "cpu_seconds": cpu,
        "writes": sum(o.writes for o in outcomes),
        "failed": len(failed),
        "errors": [f"{o.url}: {o.error}" for o in failed[:5]],
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.baseline", description=__doc__.split("\n\n")[0])
    p.add_argument("--plan", required=True, help="plan JSON file (see the module docstring)")
    args = p.parse_args(argv)
    with open(args.plan) as fh:
        plan = json.load(fh)
    password = os.environ.get(PASSWORD_ENV)
    if not password:
        print(f"baseline: set {PASSWORD_ENV}", file=sys.stderr)
        return 2
    result = run(plan, password)
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0 if not result["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
