"""A workload-profile POST goes only to the target the WorkloadPowerProfile resource lists for its
action (NVIDIA's bmcweb lists `#NvidiaWorkloadPower.EnableProfiles` and `DisableProfiles`, each with
its `target` and `@Redfish.ActionInfo`); a resource that lists none, or a target off this BMC, is
refused with a reason and nothing is sent. The end-to-end path, against the simulator's resource
that lists both, is `tests/plugins/redfish/platforms/test_gb200.py`."""

from __future__ import annotations

from typing import Any

import pytest

from plugins.redfish._capping.profiles import DISABLE, ENABLE, listed_action
from plugins.redfish._wire.document import Document
from plugins.redfish._wire.errors import PlatformUnsupportedError

WPPS = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_0/Oem/Nvidia/WorkloadPowerProfile"


def _resource(actions: Any) -> Document:
    return Document(WPPS, {"@odata.id": WPPS, "RequestedProfileMask": "0x0", "Actions": actions})


def test_the_post_goes_to_the_target_the_resource_lists() -> None:
    listed = f"{WPPS}/Actions/Oem/NvidiaWorkloadPower.EnableProfiles"  # not where convention puts it
    doc = _resource(
        {f"#{ENABLE}": {"target": listed, "@Redfish.ActionInfo": f"{WPPS}/EnableProfilesActionInfo"}}
    )
    assert listed_action(doc, ENABLE) == listed


@pytest.mark.parametrize(
    "actions",
    [
        None,  # no Actions at all
        {},  # Actions without this one
        {f"#{DISABLE}": {"target": f"{WPPS}/Actions/{DISABLE}"}},  # only the other action
        {f"#{ENABLE}": {}},  # listed without a target
        {f"#{ENABLE}": {"target": 5}},
        {f"#{ENABLE}": {"target": "https://elsewhere.example/redfish/v1/x"}},  # off this BMC
    ],
)
def test_an_action_the_resource_does_not_list_is_refused(actions: Any) -> None:
    with pytest.raises(PlatformUnsupportedError, match=f"lists no {ENABLE} action.*nothing written"):
        listed_action(_resource(actions), ENABLE)
