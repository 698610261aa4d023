"""Nothing from a request picks a BMC URI: session URIs in a request's device state are exact members
of the BMC's session collection or the state is refused, and a recorded URI is deleted unread only
when this process's identity opened that session (real HTTPS simulator behind a proxy that refuses
to list sessions, as NVIDIA's DPS proxy does)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from bmcsim import SimulatedBmc
from bmcsim._bmcweb import DPS_ALLOW_LIST
from plugins.base import Empty, InvalidRequestError
from plugins.redfish._client.uris import collection_member, redfish_path, session_member
from plugins.redfish._device.schema import load_state

SESSIONS = "/redfish/v1/SessionService/Sessions"
ACCOUNT = "/redfish/v1/AccountService/Accounts/3"
#: the proxy lets everything through that a hostile URI could be resolved to
PERMISSIVE = (*DPS_ALLOW_LIST, ("DELETE", "/redfish/v1/AccountService/Accounts/*"))
HOSTILE = [
    f"{SESSIONS}/../../AccountService/Accounts/3",
    f"{SESSIONS}/%2e%2e/%2E%2E/AccountService/Accounts/3",
    f"{SESSIONS}/..%2f..%2fAccountService%2fAccounts%2f3",
    f"{SESSIONS}/..%2F..%2FAccountService%2FAccounts%2F3",
    f"{SESSIONS}/..%5c..%5cAccountService%5cAccounts%5c3",
    f"{SESSIONS}/..\\..\\AccountService\\Accounts\\3",
    f"{SESSIONS}/.",
    f"{SESSIONS}/..",
    f"{SESSIONS}/%2e%2e",
    f"{SESSIONS}/1/../../../AccountService/Accounts/3",
    f"{SESSIONS}/1?$expand=.",
    f"{SESSIONS}/1#x",
    f"{SESSIONS}/",
    f"{SESSIONS}/1/",
    f"{SESSIONS}/a\nb",
    f"https://203.0.113.9{SESSIONS}/1",
    f"//203.0.113.9{SESSIONS}/1",
]


def _deletes(bmc: SimulatedBmc) -> dict[tuple[str, str], int]:
    return {key: n for key, n in bmc.stats.calls.items() if key[0] == "DELETE"}


@pytest.mark.parametrize("uri", HOSTILE)
async def test_a_session_uri_outside_the_collection_is_refused_and_nothing_is_deleted(
    make_harness: Callable[..., Any], uri: str
) -> None:
    async with make_harness(n=1, model="gb200") as h:
        bmc = h.fleet.bmcs[0]
        bmc.configure(profile="bmcweb", allow_list=PERMISSIVE)
        for name in ("operator", "victim"):
            bmc.sessions.accounts.add(name, "secret-password", "Operator")
        assert bmc.sessions.accounts.get("3") is not None
        # the host checks the state before the operation (`load_state`), the plugin again
        with pytest.raises(InvalidRequestError, match="not a Redfish session URI") as refused:
            h.plugin.load_state({"sessions": {bmc.url: [uri]}})
        assert "\n" not in str(refused.value)
        with pytest.raises(InvalidRequestError, match="not a Redfish session URI"):
            await h.call("std_metrics", bmc, Empty(), state={"sessions": {bmc.url: [uri]}})
        assert bmc.sessions.accounts.get("3") is not None
        assert _deletes(bmc) == {} and bmc.stats.total_calls == 0  # refused before any request
        # and the device goes on with its own (empty) state
        out = await h.call("std_metrics", bmc, Empty(), state={})
        assert out.result.ok, out.result.error
        assert _deletes(bmc) == {} and bmc.sessions.accounts.get("3") is not None


async def test_a_session_a_callers_state_names_is_not_deleted_unread(
    make_harness: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    async with make_harness(n=1, model="gb200") as h:
        bmc = h.fleet.bmcs[0]
        bmc.configure(profile="bmcweb", allow_list=DPS_ALLOW_LIST)  # sessions cannot be listed or read
        operator = bmc.sessions.create(client="10.0.0.7").id  # someone else's live session
        state = {"sessions": {bmc.url: [f"{SESSIONS}/{operator}"]}}
        with caplog.at_level(logging.WARNING, logger="plugins.redfish"):
            out = await h.call("std_metrics", bmc, Empty(), state=state)
            await h.plugin.pool.clients()[0].settled()
        assert out.result.ok, out.result.error
        assert operator in bmc.sessions.ids() and _deletes(bmc) == {}
        assert "1 Redfish session URI(s) the device state names are not deleted" in caplog.text
        await h.plugin.close()
        bmc.sessions.delete(operator)


async def test_a_session_our_identity_opened_is_deleted_unread_after_a_crash(
    make_harness: Callable[..., Any],
) -> None:
    from tests.plugins.redfish.client.test_sessions import _crash, _plugin

    async with make_harness(n=1, model="gb200") as h:
        bmc = h.fleet.bmcs[0]
        bmc.configure(profile="bmcweb", allow_list=DPS_ALLOW_LIST)
        h.plugin.set_client_id("ctl-dps")
        out = await h.call("std_metrics", bmc, Empty())
        assert out.result.ok, out.result.error
        (leftover,) = bmc.sessions.ids()
        await _crash(h.plugin)
        h.plugin = await _plugin("ctl-dps")
        out = await h.call("std_metrics", bmc, Empty(), state={})  # no state: the record says it
        assert out.result.ok, out.result.error
        await h.plugin.pool.clients()[0].settled()
        assert leftover not in bmc.sessions.ids() and len(bmc.sessions) == 1
        assert _deletes(bmc) == {("DELETE", f"{SESSIONS}/{{id}}"): 1}
        await h.plugin.close()


def test_members_and_resource_paths() -> None:
    origin = "https://10.0.0.5:443"
    assert session_member(f"{SESSIONS}/8f3a") == f"{SESSIONS}/8f3a"
    assert session_member(f"{origin}{SESSIONS}/8f3a", origin) == f"{SESSIONS}/8f3a"
    assert session_member(f"https://10.0.0.6:443{SESSIONS}/8f3a", origin) is None
    assert session_member(f"{SESSIONS}/a%20b") == f"{SESSIONS}/a%20b"  # other escapes are a name
    for uri in HOSTILE:
        assert session_member(uri, origin) is None, uri
    assert collection_member(None, SESSIONS) is None and collection_member(7, SESSIONS) is None
    assert redfish_path("/redfish/v1/Chassis/1/Power#/PowerControl/0")
    assert redfish_path("/redfish/v1/Chassis/1/Controls/Power%20Limit")
    for bad in ("/redfish/v1/Chassis/../AccountService", "/redfish/v1/a%2fb", "/x/y", "/redfish/v1/a\\b"):
        assert not redfish_path(bad), bad


def test_a_discovery_uri_that_leaves_the_tree_is_refused() -> None:
    from plugins.redfish._discovery.layout import DISCOVERY_VERSION

    gpu = {"key": "gpu/0", "kind": "gpu", "index": 0, "name": "GPU_0", "mechanism": "environment_metrics"}
    discovery = {"version": DISCOVERY_VERSION, "platform": "environment_metrics", "url": "https://x"}
    good = {**gpu, "limit_uri": "/redfish/v1/Chassis/GPU_0/EnvironmentMetrics"}
    assert load_state({"discovery": {**discovery, "gpus": [good]}})["discovery"]["gpus"][0] == good
    for uri in ("/redfish/v1/Chassis/GPU_0/../../AccountService/Accounts/3", "/redfish/v1/%2e%2e/x"):
        with pytest.raises(InvalidRequestError, match="not a plain /redfish/v1/ resource path"):
            load_state({"discovery": {**discovery, "gpus": [{**gpu, "limit_uri": uri}]}})
