"""NVIDIA workload power profiles (WPPS) under `Processors/{GpuId}/Oem/Nvidia/WorkloadPowerProfile`.

Masks are hex strings "0x" + 64 hex digits (256 bits), read as one big-endian integer; bit n is the
profile with NVML id n (= DPS/Redfish id n + 3). redfish.md §2.4 calls the bit numbering unverified on
real BMCs, so clients should parse with `int(mask, 16)` and accept any length. The firmware arbitrates
conflicts: the enforced mask is the requested one with lower-priority conflicting profiles dropped.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from bmcsim import _errors, _messages
from bmcsim._routing import (
    Handler,
    Reply,
    Route,
    SimRequest,
    Write,
    action_body,
    collection,
    link,
)

if TYPE_CHECKING:
    from bmcsim._routing import Bmc
    from bmcsim._state import PlatformState

# NVML nvmlPowerProfileType_t ids 0..14 (the R570-era set); (name, priority: lower wins, conflicting ids)
PROFILES: dict[int, tuple[str, int, tuple[int, ...]]] = {
    0: ("MAX_P", 1, (1,)),
    1: ("MAX_Q", 0, (0,)),
    2: ("COMPUTE", 5, (3,)),
    3: ("MEMORY_BOUND", 6, (2,)),
    4: ("NETWORK", 7, ()),
    5: ("BALANCED", 8, ()),
    6: ("LLM_INFERENCE", 3, (7,)),
    7: ("LLM_TRAINING", 4, (6,)),
    8: ("RBM", 9, ()),
    9: ("DCPCIE", 10, ()),
    10: ("HMMA_SPARSE", 11, (11,)),
    11: ("HMMA_DENSE", 12, (10,)),
    12: ("SYNC_BALANCED", 13, ()),
    13: ("HPC", 14, ()),
    14: ("MIG", 2, ()),
}
SUPPORTED_MASK = sum(1 << pid for pid in PROFILES)
_MASK_RE = re.compile(r"^0x[0-9A-Fa-f]{1,64}$")
_ENABLE = "NvidiaWorkloadPower.EnableProfiles"
_DISABLE = "NvidiaWorkloadPower.DisableProfiles"
BASE_TEMPLATE = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/{id}/Oem/Nvidia/WorkloadPowerProfile"


def format_mask(mask: int) -> str:
    """A 256-bit mask as NVIDIA prints it: "0x" and 64 hex digits."""
    return f"0x{mask:064x}"


def conflict_mask(pid: int) -> int:
    """Bits of the profiles that conflict with `pid`."""
    return sum(1 << other for other in PROFILES[pid][2])


def enforce(requested: int) -> int:
    """What the firmware enforces for a requested mask: by priority, skipping conflicts."""
    enforced = 0
    for pid in sorted((p for p in PROFILES if requested >> p & 1), key=lambda p: PROFILES[p][1]):
        if not enforced & conflict_mask(pid):
            enforced |= 1 << pid
    return enforced


class ProfileState:
    """Workload profile masks of one GPU."""

    __slots__ = ("requested", "revision", "supported")

    def __init__(self, supported: int = SUPPORTED_MASK) -> None:
        self.supported = supported
        self.requested = 0
        self.revision = 0

    @property
    def enforced(self) -> int:
        """The mask the firmware enforces."""
        return enforce(self.requested)

    def to_dict(self) -> dict[str, str]:
        """Masks as hex strings."""
        return {
            "supported": format_mask(self.supported),
            "requested": format_mask(self.requested),
            "enforced": format_mask(self.enforced),
        }


def _profiles(bmc: Bmc, req: SimRequest) -> ProfileState:
    found = getattr(bmc.state, "profiles", {}).get(req.params["id"])
    if not isinstance(found, ProfileState):
        raise _errors.resource_not_found(req.path)
    return found


def _base(req: SimRequest) -> str:
    return BASE_TEMPLATE.replace("{id}", req.params["id"])


def _get(bmc: Bmc, req: SimRequest) -> Reply:
    state, base = _profiles(bmc, req), _base(req)
    actions = {
        f"#{name}": {"target": f"{base}/Actions/{name}", "@Redfish.ActionInfo": f"{base}/{info}"}
        for name, info in ((_ENABLE, "EnableProfilesActionInfo"), (_DISABLE, "DisableProfilesActionInfo"))
    }
    body = {
        "@odata.id": base,
        "@odata.type": "#NvidiaWorkloadPower.v1_0_0.NvidiaWorkloadPower",
        "Id": "WorkloadPowerProfile",
        "Name": f"{req.params['id']} Workload Power Profile",
        "SupportedProfileMask": format_mask(state.supported),
        "RequestedProfileMask": format_mask(state.requested),
        "EnforcedProfileMask": format_mask(state.enforced),
        "Profiles": link(f"{base}/Profiles"),
        "Actions": actions,
    }
    return Reply(body=body, revision=state.revision)


def _parse_mask(req: SimRequest, action: str, supported: int) -> int:
    params = action_body(req.body, action, allowed=("ProfileMask",))
    if "ProfileMask" not in params:
        raise _errors.bad_request([_messages.action_parameter_missing(action, "ProfileMask")])
    raw = params["ProfileMask"]
    if not isinstance(raw, str) or not _MASK_RE.match(raw):
        raise _errors.bad_request([_messages.action_parameter_value_error(raw, action)])
    mask = int(raw, 16)
    if mask & ~supported:
        raise _errors.bad_request([_messages.action_parameter_value_error(raw, action)])
    return mask


def _enable(bmc: Bmc, req: SimRequest) -> Write:
    state = _profiles(bmc, req)
    mask = _parse_mask(req, _ENABLE, state.supported)

    def apply() -> None:
        state.requested |= mask
        state.revision += 1

    return Write(apply=apply, reply="success")


def _disable(bmc: Bmc, req: SimRequest) -> Write:
    state = _profiles(bmc, req)
    mask = _parse_mask(req, _DISABLE, state.supported)

    def apply() -> None:
        state.requested &= ~mask
        state.revision += 1

    return Write(apply=apply, reply="success")


def _action_info(name: str, info: str) -> Handler:
    def handler(bmc: Bmc, req: SimRequest) -> Reply:
        _profiles(bmc, req)
        return Reply(
            body={
                "@odata.id": f"{_base(req)}/{info}",
                "@odata.type": "#ActionInfo.v1_3_0.ActionInfo",
                "Id": info,
                "Name": f"{name} Action Info",
                "Parameters": [
                    {
                        "Name": "ProfileMask",
                        "Required": True,
                        "DataType": "String",
                        "AllowablePattern": "^0x[0-9A-Fa-f]+$",
                    }
                ],
            },
            revision=0,
        )

    return handler


def _profile_collection(bmc: Bmc, req: SimRequest) -> Reply:
    state, base = _profiles(bmc, req), _base(req)
    members = [f"{base}/Profiles/{pid}" for pid in PROFILES if state.supported >> pid & 1]
    body = collection(
        f"{base}/Profiles",
        "#NvidiaWorkloadPowerProfileCollection.NvidiaWorkloadPowerProfileCollection",
        f"{req.params['id']} Workload Power Profile Collection",
        members,
    )
    return Reply(body=body, revision=0)


def _profile(bmc: Bmc, req: SimRequest) -> Reply:
    _profiles(bmc, req)
    raw = req.params["profile"]
    if not raw.isdigit() or int(raw) not in PROFILES:
        raise _errors.resource_not_found(req.path)
    pid = int(raw)
    name, priority, _ = PROFILES[pid]
    return Reply(
        body={
            "@odata.id": f"{_base(req)}/Profiles/{pid}",
            "@odata.type": "#NvidiaWorkloadPowerProfile.v1_0_0.NvidiaWorkloadPowerProfile",
            "Id": str(pid),
            "Name": f"{req.params['id']} Workload Power Profile {name}",
            "Priority": priority,
            "ConflictingMask": format_mask(conflict_mask(pid)),
        },
        revision=0,
    )


def wpps_routes() -> list[Route]:
    """Routes of the WorkloadPowerProfile resources."""
    base = BASE_TEMPLATE
    return [
        Route(base, get=_get),
        Route(f"{base}/Actions/{_ENABLE}", post=_enable),
        Route(f"{base}/Actions/{_DISABLE}", post=_disable),
        Route(f"{base}/EnableProfilesActionInfo", get=_action_info(_ENABLE, "EnableProfilesActionInfo")),
        Route(f"{base}/DisableProfilesActionInfo", get=_action_info(_DISABLE, "DisableProfilesActionInfo")),
        Route(f"{base}/Profiles", get=_profile_collection),
        Route(f"{base}/Profiles/{{profile}}", get=_profile),
    ]


def profiles_of(state: PlatformState) -> dict[str, ProfileState]:
    """The GPU profile states of a platform state (empty when the model has no WPPS)."""
    found = getattr(state, "profiles", {})
    return found if isinstance(found, dict) else {}
