"""Serve a captured BMC (`--model capture:DIR`) or a DMTF-style mockup (`--model mockup:DIR`).

Both are directories with one `index.json` per resource, laid out like DMTF's public mockups:
`DIR/index.json` is `/redfish/v1`, `DIR/Chassis/1/index.json` is `/redfish/v1/Chassis/1`. A capture also
has `capture.json` (what `devicectl bmc-capture` observed; see `bmcsim/capture.py`).

The documents are served as they are, through the simulator's own pipeline, so sessions, accounts,
ETags, tasks, `$metadata`, faults and the protocol checks behave as on any simulated model; the
simulator's SessionService, AccountService and TaskService replace the captured ones. Writes:

- PATCH is allowed where the captured `Allow` header listed it (`capture.json`), or, without that
  (mockups), on resources that show a power limit (`SetPoint`, `LimitInWatts`). It changes a captured
  resource, property by property: a property the document does not have is
  `PropertyUnknown`; a `SetPoint` (or `LimitInWatts`) outside the captured `AllowableMin`/`AllowableMax`
  (or `PowerCapacityWatts`) is `PropertyValueOutOfRange`; a `ControlMode` must be one of
  `ControlMode@Redfish.AllowableValues` when the document lists them. Caps therefore stay writable
  within the captured allowable ranges; with `async_writes` the PATCH runs as a task;
- a POST to a captured action target succeeds (`Base.Success`); it changes nothing unless it is one
  of the vendor actions below;
- a link the capture has no document for answers 404 `ResourceMissingAtURI`, as the captured
  firmware did (the corpus leaves out what the firmware could not serve);
- every PATCH and POST to a captured resource, accepted or refused, is kept in the BMC's write log
  (`ReplayState.writes`, also on the control endpoint), so tests can prove what was written.

HPE Cray EX Controls, HPE Apollo 6500's accelerator power-limit action, bmcweb with power capping
disabled and `LimitException` values behave as `_vendor_writes` describes, with its sources.

Vendor write effects, as the vendor's source has them (the same as the gb200 model): a PATCH of a
limit on a resource with NVIDIA's `Oem/Nvidia` section is validated as NVIDIA bmcweb does
(`_gb200_writes.parse_patch`: `PowerLimitWatts/SetPoint` alone, the `Oem/Nvidia` keys the resource
reads, a refused value PropertyValueIncorrect) and sets the cap out-of-band
(`RequestedOneshot`/`RequestedPersistentPowerLimitWatts` and `PowerLimitPersistency` where shown, the
persistency a GPU's only; the `ControlMode` shown stays, and never `PowerMode`, the D-Bus power mode a
set point does not change: NVIDIA/bmcweb `environment_metrics.hpp`, `chassis_utils.hpp`);
`NvidiaEnvironmentMetrics.ClearOOBSetPoint` puts the default back;
`NvidiaWorkloadPower.EnableProfiles`/`DisableProfiles` set/clear `ProfileMask` bits in the requested
and enforced masks.
"""

from __future__ import annotations

import copy
import json
import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bmcsim import _errors, _messages, _vendor_writes
from bmcsim._common import common_routes
from bmcsim._gb200_writes import CHASSIS_OEM, PROCESSOR_OEM, parse_patch
from bmcsim._routing import (
    JsonDict,
    Platform,
    Reply,
    Route,
    Router,
    SimRequest,
    Write,
    is_int,
)
from bmcsim._state import PlatformState

if TYPE_CHECKING:
    from bmcsim._routing import Bmc

PREFIXES = ("capture:", "mockup:")
ROOT = "/redfish/v1"
#: resources the simulator serves itself, whatever the capture holds
SIM_OWNED = (
    f"{ROOT}/SessionService",
    f"{ROOT}/AccountService",
    f"{ROOT}/TaskService",
    f"{ROOT}/$metadata",
    f"{ROOT}/odata",
    f"{ROOT}/JsonSchemas",
)
_MAX_FILES = 20000
#: NVIDIA's HGX resources (dps.md §7), whose limits NVIDIA bmcweb serves with or without an OEM
#: section (a captured GB300's Grace CPUs show none)
_HGX = re.compile(
    rf"{ROOT}/(Systems/HGX_Baseboard_\d+/Processors/[^/]+|Chassis/HGX_[^/]+)/EnvironmentMetrics"
)


def is_replay(model: str) -> bool:
    """Whether a model name names a capture or mockup directory."""
    return model.startswith(PREFIXES)


class ReplayState(PlatformState):
    """One BMC's copy of the documents (writes change it) and their revisions (for ETags); no `caps`."""

    def __init__(self, index: int, documents: dict[str, JsonDict]) -> None:
        super().__init__(index)
        self.documents = copy.deepcopy(documents)
        self.revisions = dict.fromkeys(documents, 0)
        #: every write that reached a captured resource, accepted or not: (method, path, body)
        self.writes: list[tuple[str, str, Any]] = []

    def describe(self) -> dict[str, Any]:
        """For the control endpoint: how many resources and which were written."""
        return {
            "resources": len(self.documents),
            "written": sorted(p for p, r in self.revisions.items() if r),
            "writes": [{"method": m, "path": p, "body": b} for m, p, b in self.writes],
        }


def load_documents(directory: Path) -> dict[str, JsonDict]:
    """Every `index.json` below `directory`, by resource path; ValueError when there is none."""
    if not (directory / "index.json").is_file():
        raise ValueError(f"{directory} is not a capture or mockup: no index.json (the service root)")
    documents: dict[str, JsonDict] = {}
    for file in sorted(directory.rglob("index.json")):
        if len(documents) >= _MAX_FILES:
            raise ValueError(f"{directory} holds more than {_MAX_FILES} resources")
        relative = file.parent.relative_to(directory).as_posix()
        path = ROOT if relative == "." else f"{ROOT}/{relative}"
        try:
            body = json.loads(file.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"{file}: not JSON ({exc})") from None
        if isinstance(body, dict):
            documents[path] = body
    return documents


@cache
def load_platform(model: str) -> Platform:
    """The platform of `capture:DIR` or `mockup:DIR` (loaded once per process)."""
    kind, _, where = model.partition(":")
    directory = Path(where).expanduser()
    documents = load_documents(directory)
    meta: JsonDict = {}
    if (directory / "capture.json").is_file():
        meta = json.loads((directory / "capture.json").read_text())
    root = documents[ROOT]
    managers = [m for m in documents if m.startswith(f"{ROOT}/Managers/") and m.count("/") == 4]
    allow: dict[str, str] = meta.get("allow") or {}
    routes: list[Route] = []
    for path, body in documents.items():
        if path.startswith(SIM_OWNED):
            continue
        public = frozenset({"GET", "HEAD"}) if path == ROOT else frozenset()
        writable = "PATCH" in allow[path] if path in allow else _shows_a_limit(body)
        routes.append(Route(path, get=_get, patch=_patch if writable else None, public=public))
        routes += [Route(target, post=_action) for target in _action_targets(body)]
    captured = {r.template for r in routes}
    routes += [r for r in common_routes() if r.template not in captured]
    return Platform(
        name=kind,
        topology_model=str(meta.get("topology_model") or "auto"),
        vendor=str(root.get("Vendor") or "unknown"),
        product=str(root.get("Product") or kind),
        manager_id=managers[0].rsplit("/", 1)[1] if managers else "BMC",
        default_firmware=str(meta.get("firmware_version") or ""),
        router=Router(_unique(routes)),
        make_state=lambda index: ReplayState(index, documents),
        description=f"{kind} of {directory}",
    )


def _shows_a_limit(body: Any) -> bool:
    if isinstance(body, dict):
        # NOTE: a PowerLimit without LimitInWatts (bmcweb, capping disabled) still takes PATCH (and
        # answers ActionNotSupported, see `_vendor_writes`)
        shown = "SetPoint" in body or "LimitInWatts" in body or isinstance(body.get("PowerLimit"), dict)
        return shown or any(_shows_a_limit(v) for v in body.values())
    if isinstance(body, list):
        return any(_shows_a_limit(v) for v in body)
    return False


def _unique(routes: list[Route]) -> list[Route]:
    seen: set[str] = set()
    return [r for r in routes if not (r.template in seen or seen.add(r.template))]  # type: ignore[func-returns-value]


def _action_targets(body: JsonDict) -> list[str]:
    targets: list[str] = []
    stack: list[Any] = [body.get("Actions", {})]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            target = node.get("target")
            if isinstance(target, str) and target.startswith(ROOT):
                targets.append(target.rstrip("/"))
            stack.extend(v for k, v in node.items() if k != "target")
    return targets


def _state(bmc: Bmc) -> ReplayState:
    state = bmc.state
    assert isinstance(state, ReplayState)
    return state


def _get(bmc: Bmc, req: SimRequest) -> Reply:
    state = _state(bmc)
    body = state.documents.get(req.path)
    if body is None:
        raise _errors.resource_not_found(req.path)
    return Reply(body=copy.deepcopy(body), revision=state.revisions[req.path])


def _patch(bmc: Bmc, req: SimRequest) -> Write:
    state = _state(bmc)
    state.writes.append(("PATCH", req.path, copy.deepcopy(req.body)))
    current = state.documents[req.path]
    changes = req.body if isinstance(req.body, dict) else None
    if changes is None:
        raise _errors.malformed_json()
    if _vendor_writes.is_cray_ex_control(current):
        after = _vendor_writes.cray_ex_control_patch(current, changes)

        def apply_ex() -> None:
            current.update(after)
            state.revisions[req.path] += 1

        return Write(apply=apply_ex, deferrable=True)
    if _vendor_writes.capping_disabled(current, changes):
        raise _errors.action_not_supported("PowerLimit")
    nvidia = _nvidia(current)
    if isinstance(current.get("PowerLimitWatts"), dict) and (nvidia is not None or _HGX.fullmatch(req.path)):
        return _nvidia_limit_patch(state, req.path, current, nvidia or {}, changes)
    problems: list[JsonDict] = _vendor_writes.limit_exception_problems(changes)
    _check(current, changes, "", problems)
    if problems:
        raise _errors.bad_request(problems)

    def apply() -> None:
        _merge(current, changes)
        state.revisions[req.path] += 1

    return Write(apply=apply, deferrable=True)


def _nvidia_limit_patch(
    state: ReplayState, path: str, current: JsonDict, nvidia: JsonDict, changes: JsonDict
) -> Write:
    """A PATCH of an NVIDIA EnvironmentMetrics limit, as NVIDIA bmcweb takes it (`_gb200_writes`): only
    `PowerLimitWatts/SetPoint`, and the `Oem/Nvidia` keys its resource reads (a chassis' none it
    writes; a processor's `PowerLimitPersistency`, kept for a GPU only); the captured allowable range
    stands in for the power manager's. The set point writes D-Bus `PowerCap` alone: the ControlMode
    shown stays; the OEM properties the capture shows follow the cap (a write never adds one)."""
    limit = current["PowerLimitWatts"]
    low, high = limit.get("AllowableMin"), limit.get("AllowableMax")

    def in_range(value: int) -> bool:
        return (not is_int(low) or value >= low) and (not is_int(high) or value <= high)

    chassis = path.startswith(f"{ROOT}/Chassis/")
    set_point, persistent = parse_patch(changes, in_range, CHASSIS_OEM if chassis else PROCESSOR_OEM)
    processor = state.documents.get(path.rsplit("/", 1)[0]) or {}
    if chassis or processor.get("ProcessorType") != "GPU":
        persistent = None  # a CPU's is read and dropped (environment_metrics.hpp)

    def apply() -> None:
        limit["SetPoint"] = set_point
        _set_shown(nvidia, "PowerLimitPersistency", bool(persistent))
        _set_shown(nvidia, "RequestedPersistentPowerLimitWatts", set_point if persistent else None)
        _set_shown(nvidia, "RequestedOneshotPowerLimitWatts", None if persistent else set_point)
        state.revisions[path] += 1

    return Write(apply=apply, deferrable=True)


def _check(
    current: JsonDict, changes: JsonDict, prefix: str, problems: list[JsonDict], capacity: Any = None
) -> None:
    """Validate a PATCH against the captured document (only properties it has; captured ranges).

    `capacity` is the enclosing legacy PowerControl's `PowerCapacityWatts`, the range of its
    `PowerLimit/LimitInWatts` (0 means "not reported": no upper bound).
    """
    capacity = current.get("PowerCapacityWatts", capacity)
    for key, value in changes.items():
        name = f"{prefix}{key}"
        if key.startswith("@"):
            continue
        if key not in current:
            problems.append(_messages.property_unknown(name))
        elif isinstance(value, dict) and isinstance(current[key], dict):
            _check(current[key], value, f"{name}/", problems, capacity)
        elif isinstance(value, list) and isinstance(current[key], list):
            for index, item in enumerate(value):
                if (
                    isinstance(item, dict)
                    and index < len(current[key])
                    and isinstance(current[key][index], dict)
                ):
                    _check(current[key][index], item, f"{name}/{index}/", problems, capacity)
        elif key in ("SetPoint", "LimitInWatts"):
            _check_watts(current, value, name, problems, capacity)
        elif key == "ControlMode":
            allowed = current.get("ControlMode@Redfish.AllowableValues")
            if isinstance(allowed, list) and value not in allowed:
                problems.append(_messages.property_value_not_in_list(value, name))


def _check_watts(current: JsonDict, value: Any, name: str, problems: list[JsonDict], capacity: Any) -> None:
    if value is None:
        return  # "no cap"
    if (not is_int(value) and not isinstance(value, float)) or isinstance(value, bool):
        problems.append(_messages.property_value_type_error(value, name))
        return
    low = current.get("AllowableMin", 0)
    high = current.get("AllowableMax", capacity or None)
    low = low if is_int(low) else 0
    if isinstance(high, int) and not low <= value <= high:
        problems.append(_messages.property_value_out_of_range(value, name, low, high))


def _merge(current: JsonDict, changes: JsonDict) -> None:
    for key, value in changes.items():
        if key.startswith("@"):
            continue
        if isinstance(value, dict) and isinstance(current.get(key), dict):
            _merge(current[key], value)
        elif (
            isinstance(value, list)
            and isinstance(current.get(key), list)
            and all(isinstance(v, dict) for v in value)
        ):
            for index, item in enumerate(value):
                if index < len(current[key]) and isinstance(current[key][index], dict):
                    _merge(current[key][index], item)
        else:
            current[key] = value


def _nvidia(doc: JsonDict) -> JsonDict | None:
    oem = doc.get("Oem")
    nvidia = oem.get("Nvidia") if isinstance(oem, dict) else None
    return nvidia if isinstance(nvidia, dict) else None


def _action(bmc: Bmc, req: SimRequest) -> Write:
    state = _state(bmc)
    state.writes.append(("POST", req.path, copy.deepcopy(req.body)))
    resource, _, name = req.path.rstrip("/").partition("/Actions/")
    name = name.rsplit("/", 1)[-1]
    doc = state.documents.get(resource)
    params = req.body if isinstance(req.body, dict) else {}
    if doc is not None and name == _vendor_writes.ACC_ACTION:
        changes = _vendor_writes.configure_acc_power_limit(doc, params)

        def apply_acc() -> None:
            for index, watts in changes:
                doc["PowerLimits"][index]["PowerLimitInWatts"] = watts
            state.revisions[resource] += 1

        return Write(apply=apply_acc, reply="success")
    if doc is None or not name.startswith("Nvidia"):
        return Write(apply=lambda: None, reply="success")
    if name.endswith(".ClearOOBSetPoint"):
        return Write(apply=lambda: _clear_oob(state, resource, doc), reply="success")
    if name.endswith((".EnableProfiles", ".DisableProfiles")):
        raw = params.get("ProfileMask")
        try:
            mask = int(raw, 16) if isinstance(raw, str) else -1
        except ValueError:
            mask = -1
        if mask < 0:
            raise _errors.bad_request([_messages.action_parameter_value_error(raw, name)])
        enable = name.endswith(".EnableProfiles")
        return Write(apply=lambda: _profiles(state, resource, doc, mask, enable), reply="success")
    return Write(apply=lambda: None, reply="success")


def _clear_oob(state: ReplayState, resource: str, doc: JsonDict) -> None:
    limit = doc.get("PowerLimitWatts")
    if isinstance(limit, dict):
        limit["SetPoint"] = limit.get("DefaultSetPoint", limit.get("SetPoint"))
    nvidia = _nvidia(doc)
    if nvidia is not None:
        _set_shown(nvidia, "PowerLimitPersistency", False)
        _set_shown(nvidia, "RequestedPersistentPowerLimitWatts", None)
        _set_shown(nvidia, "RequestedOneshotPowerLimitWatts", None)
    state.revisions[resource] += 1


def _set_shown(section: JsonDict, key: str, value: Any) -> None:
    """Change an OEM property the captured firmware shows (a write never adds one it does not)."""
    if key in section:
        section[key] = value


def _profiles(state: ReplayState, resource: str, doc: JsonDict, mask: int, enable: bool) -> None:
    width = len(str(doc.get("RequestedProfileMask") or "0x" + "0" * 64)) - 2
    for key in ("RequestedProfileMask", "EnforcedProfileMask"):
        if isinstance(doc.get(key), str):
            value = int(doc[key], 16)
            value = value | mask if enable else value & ~mask
            doc[key] = f"0x{value:0{width}x}"
    state.revisions[resource] += 1
