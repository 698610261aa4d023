"""What the `bmcweb` profile and a BMC proxy change: body-hash ETags, task monitors, an allow-list.

Modelled on OpenBMC bmcweb (read from its public source, not copied):

- the ETag of a 200 reply is a hash of the whole JSON body, printed as `"%08X"`; a resource with
  live readings therefore gets a new ETag between any two reads. `If-Match` is answered by running
  the GET again and comparing the hashes exactly; `*` matches anything;
- a write that runs as a task answers 202 with `Location: /redfish/v1/TaskService/TaskMonitors/{id}`
  and `Retry-After: 30`; the monitor answers 202 (the task) while it runs, 204 exactly once after it
  ended, whatever the outcome, and 404 after that. The outcome is on `TaskService/Tasks/{id}`;
- NVIDIA's DPS deployments put a proxy in front of the BMC that lets only an allow-list of
  `(method, path)` through and answers 403 to everything else (dps.md §7).
"""

from __future__ import annotations

import json
import re
import zlib
from functools import cache
from typing import TYPE_CHECKING, Any

from bmcsim import _errors, _messages
from bmcsim._routing import Reply, Route, SimRequest
from bmcsim._tasks import MONITORS_PATH

if TYPE_CHECKING:
    from bmcsim._routing import Bmc

RETRY_AFTER = 30
_P = "/redfish/v1/Systems/HGX_Baseboard_0/Processors"
_WPPS = "Oem/Nvidia/WorkloadPowerProfile"
#: the DPS proxy's allow-list for NVIDIA BMCs (dps.md §7); `*` matches one path segment
DPS_ALLOW_LIST: tuple[tuple[str, str], ...] = (
    ("GET", "/redfish/v1"),
    ("POST", "/redfish/v1/SessionService/Sessions"),
    ("DELETE", "/redfish/v1/SessionService/Sessions/*"),
    ("GET", "/redfish/v1/Systems"),
    ("GET", "/redfish/v1/Systems/HGX_Baseboard_0"),
    ("GET", _P),
    ("GET", f"{_P}/CPU_*"),
    ("GET,PATCH", f"{_P}/CPU_*/EnvironmentMetrics"),
    ("GET", f"{_P}/GPU_*"),
    ("GET,PATCH", f"{_P}/GPU_*/EnvironmentMetrics"),
    ("GET", f"{_P}/GPU_*/{_WPPS}"),
    ("POST", f"{_P}/GPU_*/{_WPPS}/Actions/NvidiaWorkloadPower.EnableProfiles"),
    ("POST", f"{_P}/GPU_*/{_WPPS}/Actions/NvidiaWorkloadPower.DisableProfiles"),
    ("GET", "/redfish/v1/Chassis"),
    ("GET", "/redfish/v1/Chassis/Chassis_0"),
    ("GET", "/redfish/v1/Chassis/Chassis_0/EnvironmentMetrics"),
    ("GET", "/redfish/v1/Chassis/HGX_Chassis_0"),
    ("GET", "/redfish/v1/Chassis/HGX_Chassis_0/EnvironmentMetrics"),
    ("GET,PATCH", "/redfish/v1/Chassis/HGX_ProcessorModule_*/EnvironmentMetrics"),
    ("GET", "/redfish/v1/Chassis/HGX_ProcessorModule_*/Assembly"),
    ("GET", "/redfish/v1/Managers"),
    ("GET", "/redfish/v1/Managers/BMC"),
    ("GET", "/redfish/v1/TaskService/Tasks/*"),
)


def body_etag(body: Any) -> str:
    """bmcweb's ETag: a hash of the serialized body (here CRC-32, printed the same way)."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return f'"{zlib.crc32(text.encode()):08X}"'


def if_match_ok(bmc: Bmc, route: Route, req: SimRequest, header: str) -> bool:
    """bmcweb's check: GET the resource again and compare its body hash with the header, exactly."""
    if header.strip() == "*" or route.get is None:
        return True
    current = route.get(bmc, SimRequest("GET", req.path, req.params))
    if not isinstance(current, Reply) or current.body is None:
        return True
    return body_etag(current.body) == header.strip()


def allowed(allow_list: tuple[tuple[str, str], ...], method: str, path: str) -> bool:
    """Whether a proxy with this allow-list lets `method path` through (HEAD counts as GET)."""
    method = "GET" if method == "HEAD" else method
    return any(
        method in methods.split(",") and _pattern(pattern).fullmatch(path) for methods, pattern in allow_list
    )


def forbidden(method: str, path: str) -> _errors.RedfishError:
    """The proxy's refusal."""
    return _errors.RedfishError(
        403,
        [
            _messages.message(
                _messages.BASE + "InsufficientPrivilege",
                f"There are insufficient privileges for the account or credentials associated with the "
                f"current session to perform the requested operation ({method} {path} is not on the "
                "BMC proxy's allow-list).",
                severity="Critical",
                resolution="Either abandon the operation or change the associated access rights and "
                "resubmit the request if the operation failed.",
            )
        ],
    )


def _task_monitor(bmc: Bmc, req: SimRequest) -> Reply:
    task = bmc.tasks.get(req.params["id"])
    if task is None or task.gave_204:
        raise _errors.resource_not_found(req.path)
    if task.state == "Running":
        headers = {"Location": task.monitor, "Retry-After": str(RETRY_AFTER)}
        return Reply(status=202, body=task.document(), headers=headers)
    task.gave_204 = True
    return Reply(status=204)


def monitor_routes() -> list[Route]:
    """`TaskService/TaskMonitors/{id}`, served by every model (used by the bmcweb profile)."""
    return [Route(f"{MONITORS_PATH}/{{id}}", get=_task_monitor)]


@cache
def _pattern(pattern: str) -> re.Pattern[str]:
    return re.compile("[^/]*".join(re.escape(part) for part in pattern.split("*")))
