"""Receipts: every device write an operation made, as data that matches the device's own record."""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime, timedelta

from controller.api.admin import request_record
from controller.desired.receipts import write_records
from controller.execution.runner import receipts
from controller.store import Completion, NewRequest, RetentionPolicy, Store, prune
from plugins.base import (
    ElementType,
    Empty,
    Ping,
    Policy,
    PolicyAction,
    PolicyChange,
    PolicyLimit,
    PowerLimit,
    RequestKind,
    run_operation,
)
from plugins.nvml.testing import FakeNode
from tests.plugins.redfish.harness import Harness

SESSIONS = "/redfish/v1/SessionService/Sessions"


def gpu_policy(watts: float) -> PolicyChange:
    return PolicyChange(
        PolicyAction.SET, Policy("job", (PolicyLimit(ElementType.GPU, PowerLimit(watts=watts)),))
    )


def node_policy(node: float, gpu: float, cpu: float) -> PolicyChange:
    limits = (
        PolicyLimit(ElementType.NODE, PowerLimit(watts=node)),
        PolicyLimit(ElementType.GPU, PowerLimit(watts=gpu)),
        PolicyLimit(ElementType.CPU, PowerLimit(watts=cpu)),
    )
    return PolicyChange(PolicyAction.SET, Policy("Node-Low", limits))


async def test_nvml_receipts_match_the_fakes_setter_calls(h100x4: FakeNode) -> None:
    fake = h100x4.fake
    fake.gpu(2).limit_mw = 400_000  # already what the policy asks: no write, no receipt
    seen = len(fake.writes())
    out = await run_operation(h100x4.plugin, RequestKind.TOPOLOGY_ACTIVATE, h100x4.ctx(), gpu_policy(1600))
    assert out.result.ok
    calls = fake.writes()[seen:]
    assert len(calls) == 3
    assert [(w.method, w.component.split("(")[-1].rstrip(")")) for w in out.writes] == [
        (c.function, c.uuid) for c in calls
    ]
    assert fake.gpu(2).uuid not in {c.uuid for c in calls}
    for w in out.writes:
        assert w.status == "ok" and w.before == 700.0 and w.after == 400.0
        assert w.body == {"scope": "gpu", "limit_mw": 400_000}
        assert w.duration_ms >= 0.0
    # a read-only request writes nothing and has no receipts
    out = await run_operation(h100x4.plugin, RequestKind.PING, h100x4.ctx(), Ping())
    assert out.writes == () and len(fake.writes()) == seen + 3


async def test_redfish_receipts_match_the_simulators_write_log(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    await gb200.call("std_metrics", bmc, Empty())  # login and discovery out of the way
    gb200.reset()
    ctx = gb200.ctx(bmc)
    out = await run_operation(gb200.plugin, RequestKind.TOPOLOGY_ACTIVATE, ctx, node_policy(5000, 2800, 600))
    assert out.result.ok, out.result.error
    writes = Counter(
        method
        for (method, path), n in bmc.stats.calls.items()
        for _ in range(n)
        if method in ("PATCH", "POST")
    )
    assert sum(writes.values()) == bmc.stats.writes_applied == len(out.writes) == 8
    assert Counter(w.method for w in out.writes) == writes
    assert all(w.target != SESSIONS for w in out.writes)
    set_points = bmc.state.set_points()
    for w in out.writes:
        assert w.status == "200" and w.after is not None
        name = re.search(r"/(?:Processors|Chassis)/([^/]+)/EnvironmentMetrics", w.target)
        assert name is not None and set_points[name.group(1)] == w.after  # the read-back is the truth
        assert w.before == 1200.0 or w.component.startswith(("CPU", "Module", "module", "HGX"))
    # the same request again: everything is in force, so nothing is written
    gb200.states[bmc.index] = out.state or {}
    again = await run_operation(
        gb200.plugin, RequestKind.TOPOLOGY_ACTIVATE, gb200.ctx(bmc), node_policy(5000, 2800, 600)
    )
    assert again.result.ok and again.writes == () and bmc.stats.writes_applied == 8


async def test_receipts_are_journaled_and_shown_by_the_admin_api(store: Store, h100x4: FakeNode) -> None:
    out = await run_operation(h100x4.plugin, RequestKind.TOPOLOGY_ACTIVATE, h100x4.ctx(), gpu_policy(1600))
    now = datetime.now(UTC)
    await store.accept_one(
        NewRequest("r-1", "node-1", "topology_activate", b"", "", now, now + timedelta(seconds=30), "me")
    )
    await store.complete(
        Completion(
            request_id="r-1",
            device="node-1",
            outcome="ok",
            error="",
            finished_at=now,
            response=b"",
            new_state=None,
            touch_device=False,
            kind="topology_activate",
            writes=receipts(out.writes),
        )
    )
    view = await store.get_request("r-1")
    assert view is not None and view.writes is not None and len(view.writes) == 4
    record = request_record(view)
    assert [(w.method, w.component, w.after_watts, w.before_watts) for w in record.writes] == [
        (w.method, w.component, 400.0, 700.0) for w in out.writes
    ]
    assert record.writes[0].body_json == '{"limit_mw": 400000, "scope": "gpu"}'
    assert not write_records([{"target": "x", "method": "PATCH"}])[0].HasField("after_watts")


async def test_receipts_are_pruned_with_their_request(store: Store) -> None:
    old = datetime.now(UTC) - timedelta(days=40)
    for rid, at in (("old-1", old), ("new-1", datetime.now(UTC))):
        await store.accept_one(NewRequest(rid, "node-1", "topology_activate", b"", "", at, at, "me"))
        writes = [{"target": "/x", "method": "PATCH", "body": {"SetPoint": 500}, "status": "200"}]
        # internal: no outbox row waits for delivery, so only the journal's age decides
        await store.complete(
            Completion(
                rid,
                "node-1",
                "ok",
                "",
                at,
                b"",
                None,
                False,
                kind="topology_activate",
                writes=writes,
                internal=True,
            )
        )
    result = await prune(store, RetentionPolicy(journal_days=30), datetime.now(UTC))
    assert result.deleted["requests"] == 1
    assert await store.get_request("old-1") is None
    kept = await store.get_request("new-1")
    assert kept is not None and kept.writes is not None and kept.writes[0]["status"] == "200"
