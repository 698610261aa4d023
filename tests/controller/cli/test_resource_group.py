"""No nameless resource group is ever made. GPU caps sent without `--resource-group` are the
topology's (recorded and restored with it, as a GPU-policies update outside any group is); a resource
group activation, update or deactivation needs a name: the CLI refuses one without (or of blanks)
in one line, and the controller refuses such a request from any client (`send --file`) in one line.
`devicectl` processes against a controller on a real port driving a simulated GB200 BMC over HTTPS."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from controller.delivery.sink import TopologySink
from plugins.base import InvalidRequestError
from plugins.redfish._device.state import gpu_scope, rg_scope
from tests.controller.cli.test_in_force import gb200_site
from tests.controller.cli.test_operator import Site
from tests.controller.terminal import pipe


@pytest.fixture
async def site(tmp_path: Path, sink: TopologySink, start_controller: Any) -> AsyncIterator[Site]:
    async with gb200_site(tmp_path, sink, start_controller) as started:
        yield started


async def _cli(site: Site, *args: str) -> Any:
    return await asyncio.to_thread(pipe, *site.cli(*args))


async def test_gpu_caps_without_a_group_are_the_topologys_and_no_nameless_group_is_made(
    site: Site, tmp_path: Path
) -> None:
    sent = await _cli(site, "send", "gpu-policies", "--device", "node001", "--gpu", "0=480", "--wait")
    assert sent.code == 0, sent.out + sent.err
    device = await site.harness.controller.store.get_device("node001")
    priors = device.state_json["priors"]
    assert "rg:" not in priors and not any(s.startswith("rg:") for s in priors), priors
    assert "gpu/0" in priors["topology"], priors

    for kind in ("rg-activate", "gpu-policies"):
        blank = await _cli(
            site, "send", kind, "--device", "node001", "--resource-group", "  ", "--gpu", "0=500"
        )
        assert blank.code == 2 and len(blank.err.strip().splitlines()) == 1, blank.err
        assert "--resource-group" in blank.err and "Traceback" not in blank.err, blank.err
    nameless = await _cli(site, "send", "rg-activate", "--device", "node001", "--gpu", "0=500")
    assert nameless.code == 2 and "--resource-group is required" in nameless.err, nameless.err

    # another client (a request file, as the topology server could send it): refused by the server
    request = {
        "device": "node001",
        "resourceGroupActivate": {"gpuPolicies": {"gpuPolicyAction": "SET_POLICY"}},
    }
    (tmp_path / "rg.json").write_text(json.dumps(request))
    refused = await _cli(site, "send", "--file", str(tmp_path / "rg.json"), "--wait")
    assert refused.code != 0, refused.out + refused.err
    said = refused.out + refused.err
    assert "resource_group_activate.resource_group: required" in said and "Traceback" not in said, said
    device = await site.harness.controller.store.get_device("node001")
    assert not any(s.startswith("rg:") for s in device.state_json["priors"])


def test_the_plugin_never_keys_a_nameless_group() -> None:
    assert gpu_scope("") == "topology" and gpu_scope("rg-prod") == "rg:rg-prod"
    for name in ("", "  "):
        with pytest.raises(InvalidRequestError, match="a resource group needs a name"):
            rg_scope(name)
