"""BMC calls per cap (docs/redfish.md, "BMC calls per operation"): the pre-write GET is skipped when
the state holds the component's last reading and the write needs no fresh ETag."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from plugins.base import Allocation, Empty, PolicyAction, PolicyChange
from plugins.redfish._capping import operations
from plugins.redfish._client.readbacks import ReadBacks
from plugins.redfish._discovery.layout import Component
from plugins.redfish._platforms import EnvironmentMetricsMechanism, LimitReading
from plugins.redfish._wire.document import Document
from tests.plugins.redfish.client.test_connections import one_gpu
from tests.plugins.redfish.harness import Harness
from tests.plugins.redfish.platforms.test_gb200 import CHASSIS_EM, PROC_EM, node_policy

SET = PolicyAction.SET


async def test_second_activation_in_a_scope_costs_patch_and_read_back_only(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("std_metrics", bmc, Empty())
    gb200.reset()
    out = await gb200.call("set_policy", bmc, PolicyChange(SET, node_policy(5000, gpu=2800, cpu=600)))
    assert out.result.ok and bmc.stats.total_calls == 24  # first change: GET (prior), PATCH, GET
    gb200.reset()
    out = await gb200.call("set_policy", bmc, PolicyChange(SET, node_policy(4800, gpu=2400, cpu=500)))
    assert out.result.ok, out.result.error
    assert (
        bmc.state.caps["GPU_0"].set_point == 600 and bmc.state.caps["HGX_ProcessorModule_0"].set_point == 2400
    )
    # the stored reading stands in for the GET: PATCH and read-back only
    assert gb200.calls(bmc) == {
        "PATCH " + CHASSIS_EM: 2, "GET " + CHASSIS_EM: 2, "PATCH " + PROC_EM: 6, "GET " + PROC_EM: 6,
    }  # fmt: skip
    gb200.reset()
    out = await gb200.call("set_policy", bmc, PolicyChange(SET, node_policy(4800, gpu=2400, cpu=500)))
    assert out.result.ok and gb200.calls(bmc) == {"GET " + CHASSIS_EM: 2, "GET " + PROC_EM: 6}  # no write
    # the priors recorded by the first activation are untouched
    assert out.state["priors"]["topology"]["gpu/0"]["watts"] == 1200.0


async def test_a_change_made_behind_our_back_is_still_caught_by_the_read_back(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("update_gpu_policies", bmc, one_gpu(0, 700))
    bmc.state.caps["GPU_0"].set_point = 650  # another tool changes it; our stored reading says 700
    gb200.reset()
    out = await gb200.call("update_gpu_policies", bmc, one_gpu(0, 700))
    assert out.result.results[0].ok and bmc.state.caps["GPU_0"].set_point == 700
    # stored == target: a GET checks first, finds 650 and writes (GET, PATCH, GET) ...
    assert gb200.calls(bmc) == {"GET " + PROC_EM: 2, "PATCH " + PROC_EM: 1}
    bmc.state.caps["GPU_0"].set_point = 650
    gb200.reset()
    out = await gb200.call("update_gpu_policies", bmc, one_gpu(0, 690))
    assert out.result.results[0].ok and bmc.state.caps["GPU_0"].set_point == 690  # ... else PATCH, GET
    assert gb200.calls(bmc) == {"PATCH " + PROC_EM: 1, "GET " + PROC_EM: 1}


async def test_strong_etags_keep_the_pre_write_get_without_a_read_back(gb200: Harness) -> None:
    # the stored reading never stands in under `strong` (its ETag may be old); our read-back does
    # (tests/plugins/redfish/client/test_read_backs.py), so it is switched off here
    bmc = gb200.fleet.bmcs[0]
    strong = {"etag_policy": "strong", "read_back_max_age": 0}
    await gb200.call("update_gpu_policies", bmc, one_gpu(1, 700), options=strong)
    gb200.reset()
    out = await gb200.call("update_gpu_policies", bmc, one_gpu(1, 710), options=strong)
    assert out.result.results[0].ok
    assert gb200.calls(bmc) == {"GET " + PROC_EM: 2, "PATCH " + PROC_EM: 1}


async def test_a_skipped_get_is_judged_on_the_evidence_the_stored_reading_carries(gb200: Harness) -> None:
    # the stored reading keeps what its GET showed (path, properties, range); where it stands in for
    # the pre-write GET, the write gate judges the write on exactly that, as on a fresh GET
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("update_gpu_policies", bmc, one_gpu(0, 700))
    reading = gb200.states[bmc.index]["readings"]["gpu/0"]
    kept = copy.deepcopy(reading)
    gpu0, gpu1 = PROC_EM.format(id="GPU_0"), PROC_EM.format(id="GPU_1")
    assert reading["evidence"]["path"] == gpu0 and "PowerLimitWatts/SetPoint" in reading["evidence"]["shown"]

    reading["evidence"]["path"] = gpu1  # its GET was of another resource
    gb200.reset()
    out = await gb200.call("update_gpu_policies", bmc, one_gpu(0, 690))
    result = out.result.results[0]
    assert not result.ok and f"{gpu0} is not the resource whose limit was read ({gpu1})" in result.message
    assert gb200.calls(bmc) == {} and bmc.state.caps["GPU_0"].set_point == 700  # GET skipped, nothing sent
    assert "gpu/0" not in gb200.states[bmc.index]["readings"]  # a refused change drops the stored reading

    kept["evidence"]["shown"] = ["PowerLimitWatts"]  # its GET showed no SetPoint there
    gb200.states[bmc.index]["readings"]["gpu/0"] = kept
    gb200.reset()
    out = await gb200.call("update_gpu_policies", bmc, one_gpu(0, 690))
    result = out.result.results[0]
    assert not result.ok and f"{gpu0} does not carry PowerLimitWatts/SetPoint" in result.message
    assert gb200.calls(bmc) == {} and bmc.state.caps["GPU_0"].set_point == 700


async def test_a_read_back_is_looked_at_only_where_a_get_would_precede_the_write(
    gb200: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # where the stored reading stands in for the pre-write GET, no read-back could answer one:
    # it is neither parsed nor offered; where a GET precedes the write, it is offered as before
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("update_gpu_policies", bmc, one_gpu(0, 700))
    peeked: list[str] = []
    peek = ReadBacks.peek

    def counted(self: ReadBacks, path: str) -> Any:
        peeked.append(path)
        return peek(self, path)

    monkeypatch.setattr(ReadBacks, "peek", counted)
    gb200.reset()
    out = await gb200.call("update_gpu_policies", bmc, one_gpu(0, 690))
    assert out.result.results[0].ok and bmc.state.caps["GPU_0"].set_point == 690
    assert gb200.calls(bmc) == {"PATCH " + PROC_EM: 1, "GET " + PROC_EM: 1} and peeked == []
    gb200.reset()
    out = await gb200.call("update_gpu_policies", bmc, one_gpu(0, 690))  # stored == target: a GET decides
    assert out.result.results[0].ok and gb200.calls(bmc) == {"GET " + PROC_EM: 1}
    assert peeked == [PROC_EM.format(id="GPU_0")]


async def test_a_read_back_standing_in_for_the_pre_write_get_is_parsed_once(
    gb200: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the parse that decided to offer the read-back is the one the write is judged on (its
    # evidence is built as on any read); the read-back after the write is parsed as before
    bmc = gb200.fleet.bmcs[0]
    await gb200.call(
        "activate_allocation", bmc, Allocation("first", PolicyChange(SET, node_policy(5000, 3200, 600)))
    )
    parsed: list[str] = []
    parse = EnvironmentMetricsMechanism.parse

    def counted(self: EnvironmentMetricsMechanism, component: Component, doc: Document) -> LimitReading:
        parsed.append(doc.path)
        return parse(self, component, doc)

    monkeypatch.setattr(EnvironmentMetricsMechanism, "parse", counted)
    gb200.reset()
    out = await gb200.call(
        "activate_allocation", bmc, Allocation("steady", PolicyChange(SET, node_policy(4800, 3000, 500)))
    )
    assert out.result.ok, out.result.error
    assert bmc.stats.total_calls == 16  # PATCH and read-back per cap: the read-backs were offered
    assert out.state["priors"]["rg:steady"]["gpu/0"]["watts"] == 800  # the read-back's value
    # per cap: the offered read-back, the new one
    assert len(parsed) == 16 and all(parsed.count(path) == 2 for path in parsed)


@pytest.mark.parametrize("concurrency", [1, 2, 3])
async def test_an_activations_caps_run_as_many_at_once_as_the_bmc_takes_and_hold_that_many_read_backs(
    gb200: Harness, monkeypatch: pytest.MonkeyPatch, concurrency: int
) -> None:
    # one worker per connection slot takes the 8 caps in turn: no more caps in progress than the
    # BMC's `concurrency`, and a read-back standing in for a pre-write GET is parsed when its cap
    # is next, so no more of them are held at once (the fleet's peak memory: 1,000 activations in
    # flight each held 8 parsed documents from the start)
    bmc = gb200.fleet.bmcs[0]
    options = {"concurrency": concurrency}
    await gb200.call(
        "activate_allocation",
        bmc,
        Allocation("first", PolicyChange(SET, node_policy(5000, 3200, 600))),
        options=options,
    )
    running, most, peeked, done, held = 0, 0, 0, 0, 0
    cap, peek = operations.set_cap, ReadBacks.peek

    async def counted_cap(*args: Any, **kwargs: Any) -> Any:
        nonlocal running, most, done
        running += 1
        most = max(most, running)
        try:
            return await cap(*args, **kwargs)
        finally:
            running -= 1
            done += 1

    def counted_peek(self: ReadBacks, path: str) -> Any:
        nonlocal peeked, held
        peeked += 1
        held = max(held, peeked - done)
        return peek(self, path)

    monkeypatch.setattr(operations, "set_cap", counted_cap)
    monkeypatch.setattr(ReadBacks, "peek", counted_peek)
    gb200.reset()
    out = await gb200.call(
        "activate_allocation",
        bmc,
        Allocation("steady", PolicyChange(SET, node_policy(4800, 3000, 500))),
        options=options,
    )
    assert out.result.ok, out.result.error
    assert bmc.stats.total_calls == 16 and done == 8 and peeked == 8  # every read-back offered
    assert most == concurrency and held == concurrency
    assert bmc.stats.max_in_flight <= concurrency
    assert out.state["priors"]["rg:steady"]["gpu/0"]["watts"] == 800  # the read-back's value, as before


async def test_an_unexpected_error_in_one_cap_stops_the_activations_other_caps_before_it_answers(
    gb200: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the activation fails with that error (the runner answers it as the plugin's internal
    # error); no worker of it may go on writing caps after it has ended (the node's lane is free
    # again then: a next request would write beside it)
    bmc = gb200.fleet.bmcs[0]
    cap = operations.set_cap
    started, after_answer = 0, 0
    answered = False

    async def failing_cap(*args: Any, **kwargs: Any) -> Any:
        nonlocal started, after_answer
        started += 1
        if started == 2:
            raise RuntimeError("a bug in one cap's path")
        try:
            return await cap(*args, **kwargs)
        finally:
            after_answer += answered

    monkeypatch.setattr(operations, "set_cap", failing_cap)
    gb200.reset()
    with pytest.raises(RuntimeError, match="a bug in one cap's path"):
        await gb200.call(
            "activate_allocation", bmc, Allocation("first", PolicyChange(SET, node_policy(5000, 3200, 600)))
        )
    answered = True
    writes = bmc.stats.total_calls
    await asyncio.sleep(2.0)  # long enough for caps left running to reach the BMC
    assert after_answer == 0, "a cap of the failed activation ended after it answered"
    assert bmc.stats.total_calls == writes, "the BMC was called after the activation answered"
    assert started < 8, "the other caps were still taken after the failure"
