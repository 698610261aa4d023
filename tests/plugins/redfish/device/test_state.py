"""Device state: prior values per scope, discovery caching and invalidation, restarts, verification."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from plugins.base import (
    Allocation,
    ElementType,
    Empty,
    GpuPoliciesChange,
    GpuPolicy,
    InvalidRequestError,
    Ping,
    Policy,
    PolicyAction,
    PolicyChange,
    PolicyLimit,
    PowerLimit,
    ProfileChange,
)
from plugins.redfish import RedfishPlugin
from plugins.redfish._device.schema import LoadedState
from plugins.redfish._device.state import DeviceState
from plugins.redfish._discovery.layout import Discovery
from plugins.redfish._platforms import LimitReading, Prior
from tests.plugins.redfish.harness import Harness

PROC_EM = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/{id}/EnvironmentMetrics"


def gpu_policy(watts: float, name: str = "P") -> Policy:
    return Policy(name, (PolicyLimit(ElementType.GPU, PowerLimit(watts=watts)),))


def gpu0(h: Harness) -> int | None:
    return h.fleet.bmcs[0].state.caps["GPU_0"].set_point


async def test_scopes_stack_resource_group_restores_the_topology_values(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("set_policy", bmc, PolicyChange(PolicyAction.SET, gpu_policy(3200)))
    assert gpu0(gb200) == 800
    rg = Allocation("job", policy=PolicyChange(PolicyAction.SET, gpu_policy(2000)))
    out = await gb200.call("activate_allocation", bmc, rg)
    assert gpu0(gb200) == 500
    assert out.state["priors"]["rg:job"]["gpu/0"]["watts"] == 800
    assert out.state["priors"]["topology"]["gpu/0"]["watts"] == 1200
    assert out.state["policies"] == {"topology": "P", "rg:job": "P"}

    out = await gb200.call("deactivate_allocation", bmc, Allocation("job"))
    assert out.result.ok and gpu0(gb200) == 800  # the topology's value, not the BMC default
    assert "rg:job" not in out.state["priors"]
    model = {"Model": "X", "Name": "node0", "spec": {"devices": [{"type": "GPU", "count": 4}]}}
    out = await gb200.call(
        "unset_policy", bmc, PolicyChange(PolicyAction.UNSET), model=model,
        options={"platform": "environment_metrics"},
    )  # fmt: skip
    assert out.result.ok and gpu0(gb200) == 1200
    assert not bmc.state.caps["GPU_0"].oob_active


async def test_policy_unset_inside_an_allocation_restores_that_groups_values(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call(
        "activate_allocation", bmc, Allocation("g", policy=PolicyChange(PolicyAction.SET, gpu_policy(2400)))
    )
    assert gpu0(gb200) == 600
    out = await gb200.call("update_allocation", bmc, Allocation("g", policy=PolicyChange(PolicyAction.UNSET)))
    assert out.result.ok, out.result.error
    assert gpu0(gb200) == 1200 and not out.state.get("priors")


async def test_an_update_that_drops_an_element_restores_it(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    both = Policy(
        "A",
        (
            PolicyLimit(ElementType.NODE, PowerLimit(watts=5000)),
            PolicyLimit(ElementType.CPU, PowerLimit(watts=300)),
        ),
    )
    node_only = Policy("B", (PolicyLimit(ElementType.NODE, PowerLimit(watts=4000)),))
    await gb200.call("activate_allocation", bmc, Allocation("g", policy=PolicyChange(PolicyAction.SET, both)))
    assert bmc.state.caps["CPU_0"].set_point == 150
    out = await gb200.call(
        "update_allocation", bmc, Allocation("g", policy=PolicyChange(PolicyAction.SET, node_only))
    )
    assert out.result.ok, out.result.error
    assert (
        bmc.state.caps["CPU_0"].set_point == 420 and bmc.state.caps["HGX_ProcessorModule_0"].set_point == 2000
    )
    assert set(out.state["priors"]["rg:g"]) == {"module/0", "module/1"}


async def test_restart_neither_resets_limits_nor_touches_the_bmc(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("set_policy", bmc, PolicyChange(PolicyAction.SET, gpu_policy(2000)))
    await gb200.plugin.close()
    gb200.reset()
    gb200.plugin = RedfishPlugin()
    await gb200.plugin.start()
    assert bmc.stats.total_calls == 0 and gpu0(gb200) == 500
    # the new process still knows the priors (they are in the state) and restores them
    out = await gb200.call("deactivate_allocation", bmc, Allocation("never-activated"))
    assert out.result.ok and gpu0(gb200) == 500
    await gb200.call("set_policy", bmc, PolicyChange(PolicyAction.SET, gpu_policy(2400)))
    assert gb200.states[0]["priors"]["topology"]["gpu/0"]["watts"] == 1200
    await gb200.plugin.close()
    assert bmc.stats.open_sessions == 0


async def test_discovery_is_cached_in_state_and_in_process(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("std_metrics", bmc, Empty())
    gb200.reset()
    # the stored state was lost (or another device id): the process cache answers
    out = await gb200.call("std_metrics", bmc, Empty(), state={})
    assert "GET /redfish/v1/Systems" not in gb200.calls(bmc)
    assert out.state["discovery"]["platform"] == "environment_metrics"
    # a new process with the stored state: no discovery either
    await gb200.plugin.close()
    gb200.plugin = RedfishPlugin()
    await gb200.plugin.start()
    gb200.reset()
    await gb200.call("std_metrics", bmc, Empty())
    assert "GET /redfish/v1/Systems" not in gb200.calls(bmc)
    assert gb200.calls(bmc)["POST /redfish/v1/SessionService/Sessions"] == 1
    await gb200.plugin.close()
    assert bmc.stats.open_sessions == 0


async def test_a_stale_uri_404_drops_discovery_and_the_next_request_rediscovers(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("std_metrics", bmc, Empty())
    state = copy.deepcopy(gb200.states[0])
    stale = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_9/EnvironmentMetrics"
    state["discovery"]["gpus"][0]["limit_uri"] = stale  # firmware renamed the resource
    gb200.plugin.pool.get(bmc.url).discovery = None
    change = GpuPoliciesChange("rg", PolicyAction.SET, policies=(GpuPolicy(0, PowerLimit(watts=500)),))
    out = await gb200.call("update_gpu_policies", bmc, change, state=state)
    result = out.result.results[0]
    assert not result.ok and f"GET {stale} failed: HTTP 404 Not Found" in result.message
    assert "Base.ResourceMissingAtURI" in result.message
    assert "discovery" not in out.state
    gb200.reset()
    out = await gb200.call("update_gpu_policies", bmc, change)
    assert out.result.results[0].ok and gpu0(gb200) == 500
    assert gb200.calls(bmc)["GET /redfish/v1/Systems/HGX_Baseboard_0/Processors/{id}"] == 6


async def test_state_is_json_and_holds_no_secrets(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    alloc = Allocation(
        "job",
        policy=PolicyChange(PolicyAction.SET, gpu_policy(2400)),
        profiles=ProfileChange(enable=(5,), verify=False),
    )
    out = await gb200.call("activate_allocation", bmc, alloc)
    text = json.dumps(out.state)
    assert bmc.password not in text and "X-Auth-Token" not in text
    client = gb200.plugin.pool.get(bmc.url)
    assert client is not None
    token = client._redfish.token  # the live token must not leak into the state
    assert token and token not in text
    assert set(out.state) >= {"version", "discovery", "priors", "applied", "profiles", "policies"}
    assert out.state["profiles"]["priors"]["rg:job"]["gpu/0"] == "0x" + "0" * 64


async def test_verification_stays_pending_until_the_bmc_shows_the_change(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    out = await gb200.call("enable_profiles", bmc, ProfileChange(enable=(8,)))
    pending = out.verification
    assert pending is not None and pending.check_after_seconds == 0.0
    assert pending.payload["kind"] == "workload_profiles" and len(pending.payload["gpus"]) == 4
    bmc.state.profiles["GPU_2"].requested = 0  # the firmware dropped it
    check = await gb200.plugin.verify(gb200.ctx(bmc), pending)
    assert not check.done and check.status == "pending" and "GPU 2" in check.detail
    bmc.state.profiles["GPU_2"].requested = 1 << 5
    check = await gb200.plugin.verify(gb200.ctx(bmc), pending)
    assert check.done and check.status == "verified" and "GPU 3: requested 8, enforced 8" in check.detail


async def test_a_loaded_state_is_taken_as_is_and_never_changed_by_the_operation(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("set_policy", bmc, PolicyChange(PolicyAction.SET, gpu_policy(3200)))
    loaded = gb200.plugin.load_state(json.loads(json.dumps(gb200.states[0])))  # as the host does
    assert isinstance(loaded, LoadedState)
    before = copy.deepcopy(loaded)
    state = DeviceState(loaded)
    state.record_prior("rg:job", "gpu/0", Prior(700.0, True))
    state.set_sessions(bmc.url, ["/redfish/v1/SessionService/Sessions/x"])
    out = state.to_json()
    assert loaded == before  # a section is copied before its first change: the host's copy is untouched
    assert out["discovery"] is loaded["discovery"]  # one it did not change is shared, not copied
    handed = copy.deepcopy(out)
    state.record_prior("rg:job", "gpu/1", Prior(650.0, True))
    state.set_sessions(bmc.url, [])
    assert out == handed  # the returned state is handed over: later changes copy their section again
    assert state.to_json()["priors"]["rg:job"]["gpu/1"]["watts"] == 650.0
    assert loaded == before
    assert json.loads(json.dumps(out)) == out


async def test_a_change_to_a_reading_or_an_applied_cap_replaces_its_entry_and_leaves_the_loaded_state(
    gb200: Harness,
) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("set_policy", bmc, PolicyChange(PolicyAction.SET, gpu_policy(3200)))
    loaded = gb200.plugin.load_state(json.loads(json.dumps(gb200.states[0])))
    before = copy.deepcopy(loaded)
    state = DeviceState(loaded)
    gpu0, gpu1 = state.reading("gpu/0"), state.reading("gpu/1")
    assert gpu0 is not None and gpu1 is not None and gpu0.evidence is not None
    state.set_reading("gpu/0", replace(gpu0, watts=650.0))
    state.set_applied("gpu/0", 650.0, 650.0, "topology")
    state.set_policy("topology", "other")
    state.record_prior("topology", "gpu/9", Prior(700.0, True))
    out = state.to_json()
    assert loaded == before  # the loaded state's sections and entries are as they were
    assert out["readings"] is not loaded["readings"] and out["readings"]["gpu/0"]["watts"] == 650.0
    # an entry no setter touched is the loaded one (entries are replaced whole, never changed in place)
    assert out["readings"]["gpu/1"] is loaded["readings"]["gpu/1"]
    assert out["priors"]["topology"] is not loaded["priors"]["topology"]  # changed in place: copied
    assert "gpu/9" not in loaded["priors"]["topology"]
    handed = copy.deepcopy(out)
    state.set_reading("gpu/1", None)
    state.set_applied("gpu/0", None, None, "topology")
    assert out == handed and loaded == before  # a later change copies its section again
    assert DeviceState(out).reading("gpu/0") == replace(gpu0, watts=650.0)


async def test_a_discovery_the_plugin_checked_is_taken_back_as_is_any_other_checked(
    gb200: Harness,
) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("set_policy", bmc, PolicyChange(PolicyAction.SET, gpu_policy(3200)))
    loaded = gb200.plugin.load_state(json.loads(json.dumps(gb200.states[0])))  # from JSON: checked
    # the state the operation returns hands the checked section on, as the host passes it back
    out = DeviceState(loaded).to_json()
    assert gb200.plugin.load_state(dict(out))["discovery"] is loaded["discovery"]
    # the same content as plain JSON is checked again: a hostile component is refused
    hostile = json.loads(json.dumps(out))
    hostile["discovery"]["gpus"][0]["limit_uri"] = 5
    with pytest.raises(InvalidRequestError, match="limit_uri"):
        gb200.plugin.load_state(hostile)


async def test_the_state_an_operation_returns_is_taken_back_unchecked_json_of_it_is_checked(
    gb200: Harness,
) -> None:
    bmc = gb200.fleet.bmcs[0]
    out = await gb200.call("set_policy", bmc, PolicyChange(PolicyAction.SET, gpu_policy(3200)))
    returned = out.state
    assert isinstance(returned, LoadedState)  # made from a checked state through typed setters
    assert gb200.plugin.load_state(returned) is returned  # the host hands it back: no second walk
    hostile = dict(returned)  # any plain dict (the database, a request, another process) is checked
    hostile["priors"] = {"rg:x": {"gpu/0": {"watts": "lots"}}}
    with pytest.raises(InvalidRequestError, match="priors"):
        gb200.plugin.load_state(hostile)
    snapshot = copy.deepcopy(returned)
    again = await gb200.call(
        "set_policy", bmc, PolicyChange(PolicyAction.SET, gpu_policy(3100)), state=returned
    )
    assert again.result.ok and returned == snapshot  # the operation left the state it took as it was


async def test_a_discovery_section_is_parsed_once_while_the_state_hands_on_the_same_one(
    gb200: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    bmc = gb200.fleet.bmcs[0]
    first = await gb200.call("set_policy", bmc, PolicyChange(PolicyAction.SET, gpu_policy(3200)))
    parses: list[object] = []
    parse = Discovery.from_json

    def counted(data: Any) -> Discovery | None:
        parses.append(data)
        return parse(data)

    monkeypatch.setattr(Discovery, "from_json", counted)
    again = await gb200.call(
        "set_policy", bmc, PolicyChange(PolicyAction.SET, gpu_policy(3100)), state=first.state
    )
    assert again.result.ok and parses == []  # the client's parse of this very section served
    as_json = json.loads(json.dumps(again.state))  # the same content, as the database gives it
    third = await gb200.call(
        "set_policy", bmc, PolicyChange(PolicyAction.SET, gpu_policy(3000)), state=as_json
    )
    assert third.result.ok and len(parses) >= 1  # another section object: parsed (and checked) again


def test_a_prior_is_recorded_once_per_scope_with_the_resource_it_was_read_from() -> None:
    state = DeviceState()
    reading = LimitReading(700.0, True, mode="Manual", persistency="off")
    assert not state.has_prior("topology", "gpu/0")
    uri = PROC_EM.format(id="GPU_0")
    assert state.record_prior("topology", "gpu/0", reading.prior(uri=uri))
    assert state.has_prior("topology", "gpu/0") and not state.has_prior("rg:job", "gpu/0")
    assert state.prior("topology", "gpu/0") == Prior(700.0, True, "Manual", uri, "off")
    assert not state.record_prior("topology", "gpu/0", Prior(650.0, True))  # the first one stays
    assert state.prior("topology", "gpu/0") == Prior(700.0, True, "Manual", uri, "off")
    assert reading.prior() == Prior(700.0, True, "Manual", "", "off")


async def test_an_operation_reports_when_it_last_reached_the_bmc(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    before = datetime.now(UTC)
    out = await gb200.call("set_policy", bmc, PolicyChange(PolicyAction.SET, gpu_policy(3200)))
    assert out.result.ok and out.reached_at is not None and out.reached_at.tzinfo is not None
    assert before - timedelta(seconds=1) <= out.reached_at <= datetime.now(UTC) + timedelta(seconds=1)
    ping = await gb200.call("ping", bmc, Ping())
    assert ping.result.ok and ping.reached_at is not None and ping.reached_at >= out.reached_at


async def test_a_readings_range_is_the_one_its_parse_shows_parsed_or_not(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    out = await gb200.call(
        "activate_allocation", bmc, Allocation("job", PolicyChange(PolicyAction.SET, gpu_policy(3200)))
    )
    loaded = gb200.plugin.load_state(json.loads(json.dumps(out.state)))
    keys = [*loaded["readings"], "gpu/99"]
    assert len(keys) > 4
    unparsed, parsed = DeviceState(loaded), DeviceState(loaded)
    for key in keys:
        reading = parsed.reading(key)
        shown = None if reading is None else (reading.min_watts, reading.max_watts)
        assert unparsed.reading_range(key) == shown and parsed.reading_range(key) == shown
    gpu0 = parsed.reading("gpu/0")
    assert gpu0 is not None and gpu0.min_watts is not None
    for state in (unparsed, parsed):
        state.set_reading("gpu/0", replace(gpu0, min_watts=gpu0.min_watts + 1, max_watts=None))
        assert state.reading_range("gpu/0") == (gpu0.min_watts + 1, None)
        state.set_reading("gpu/0", None)
        assert state.reading_range("gpu/0") is None and state.reading("gpu/0") is None


async def test_recording_and_dropping_priors_copies_the_scopes_and_leaves_the_loaded_state(
    gb200: Harness,
) -> None:
    bmc = gb200.fleet.bmcs[0]
    for group in ("a", "b"):
        await gb200.call(
            "activate_allocation", bmc, Allocation(group, PolicyChange(PolicyAction.SET, gpu_policy(3200)))
        )
    loaded = gb200.plugin.load_state(json.loads(json.dumps(gb200.states[0])))
    before = copy.deepcopy(loaded)
    state = DeviceState(loaded)
    state.record_prior("rg:c", "gpu/0", Prior(700.0, True))
    state.drop_prior("rg:a", "gpu/0")
    for key in list(loaded["priors"]["rg:b"]):
        state.drop_prior("rg:b", key)
    out = state.to_json()
    assert loaded == before  # no scope of the loaded state changed
    assert (
        "rg:b" not in out["priors"]
        and "gpu/0" not in out["priors"]["rg:a"]
        and "gpu/1" in out["priors"]["rg:a"]
    )
    assert out["priors"]["rg:c"] == {"gpu/0": Prior(700.0, True).to_json()}
    # the entries no setter replaced are the loaded ones (never changed in place)
    assert out["priors"]["rg:a"]["gpu/1"] is loaded["priors"]["rg:a"]["gpu/1"]
    handed = copy.deepcopy(out)
    state.drop_prior("rg:a", "gpu/1")
    state.record_prior("rg:c", "gpu/1", Prior(650.0, True))
    assert out == handed and loaded == before  # a later change copies the section again
