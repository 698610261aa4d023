"""Completion (one transaction for journal, device state, audit, outbox, verification), devices,
the outbox's per-device ordering and backoff, and verifications."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controller.store import (
    Completion,
    DeviceUpsert,
    NewRequest,
    NewVerification,
    Store,
    VerificationStatus,
)

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def req(rid: str, device: str = "dev1", kind: str = "gpu_policies_update") -> NewRequest:
    return NewRequest(rid, device, kind, b"payload", f"trace-{rid}", T0, at(60), "ctl-a")


def finish(
    rid: str,
    device: str = "dev1",
    *,
    state: dict[str, Any] | None = None,
    seconds: float = 1,
    touch: bool = True,
    **extra: Any,
) -> Completion:
    return Completion(
        request_id=rid,
        device=device,
        outcome=extra.pop("outcome", "ok"),
        error=extra.pop("error", ""),
        finished_at=at(seconds),
        response=b"response-" + rid.encode(),
        new_state=state,
        touch_device=touch,
        **extra,
    )


async def test_complete_writes_all_effects_once(store: Store) -> None:
    await store.accept([req("a")])
    await store.mark_running("a", at(0.5))
    verification = NewVerification("v-a", "dev1", "a", "gpu_policies_update", {"limit": 300}, at(10), 3)
    c = finish(
        "a",
        state={"power": "on", "limit": 300},
        plugin="redfish",
        model_json={"model": "X1"},
        verification=verification,
    )
    assert await store.complete(c) is True

    view = await store.get_request("a")
    assert view is not None
    assert (view.status, view.outcome, view.error, view.finished_at) == ("completed", "ok", "", at(1))
    assert (view.response, view.delivered_at, view.delivery_attempts) == (b"response-a", None, 0)

    device = await store.get_device("dev1")
    assert device is not None
    assert (device.plugin, device.model_json) == ("redfish", {"model": "X1"})
    assert (device.state_json, device.state_version) == ({"power": "on", "limit": 300}, 1)
    assert (device.last_request_id, device.last_kind, device.last_outcome) == (
        "a",
        "gpu_policies_update",
        "ok",
    )
    assert device.created_at == device.updated_at == at(1)
    assert device.in_inventory

    (audit,) = await store.list_audit("dev1")
    assert (audit.request_id, audit.trace_id, audit.kind, audit.at, audit.state_version) == (
        "a",
        "trace-a",  # taken from the journal when the completion leaves it empty
        "gpu_policies_update",
        at(1),
        1,
    )
    assert audit.summary == {
        "power": {"before": None, "after": "on"},
        "limit": {"before": None, "after": 300},
    }

    (item,) = await store.due_outbox(at(1))
    assert (item.device, item.request_id, item.response, item.attempts, item.created_at) == (
        "dev1",
        "a",
        b"response-a",
        0,
        at(1),
    )
    (v,) = await store.list_verifications(verification_id="v-a")
    assert (v.status, v.checks, v.max_checks, v.payload, v.created_at, v.due_at) == (
        "pending",
        0,
        3,
        {"limit": 300},
        at(1),
        at(10),
    )

    # A second completion of the same request (a recovery race) changes nothing.
    again = finish("a", state={"power": "off"}, seconds=5, outcome="failed", error="late")
    assert await store.complete(again) is False
    assert await store.device_state("dev1") == ({"power": "on", "limit": 300}, 1)
    assert len(await store.list_audit()) == 1
    assert await store.undelivered_count() == 1
    view = await store.get_request("a")
    assert view is not None and (view.outcome, view.finished_at) == ("ok", at(1))


async def test_duplicate_completions_in_one_batch_apply_once(store: Store) -> None:
    await store.accept([req("a")])
    results = await asyncio.gather(*(store.complete(finish("a", state={"n": i})) for i in range(5)))
    assert results == [True, False, False, False, False]
    assert await store.device_state("dev1") == ({"n": 0}, 1)
    assert await store.undelivered_count() == 1


async def test_state_versions_and_audit_summaries(store: Store) -> None:
    await store.accept([req(f"r{i}") for i in range(5)])
    # Several completions for one device in the same batch are applied in order.
    await asyncio.gather(
        store.complete(finish("r0", state={"power": "on", "limit": 300, "tags": ["a"]}, seconds=1)),
        store.complete(finish("r1", state={"power": "on", "limit": 250, "tags": ("a",)}, seconds=2)),
    )
    assert await store.device_state("dev1") == ({"power": "on", "limit": 250, "tags": ["a"]}, 2)
    # Same state again (tuples and lists are the same JSON): no new version, no audit row.
    assert await store.complete(finish("r2", state={"tags": ["a"], "limit": 250, "power": "on"}, seconds=3))
    assert await store.device_state("dev1") == ({"power": "on", "limit": 250, "tags": ["a"]}, 2)
    # No new state at all: the device row is touched, the state is not.
    assert await store.complete(finish("r3", state=None, seconds=4, outcome="failed", error="boom"))
    device = await store.get_device("dev1")
    assert device is not None
    assert (device.state_version, device.last_request_id, device.last_outcome, device.last_error) == (
        2,
        "r3",
        "failed",
        "boom",
    )
    assert await store.complete(finish("r4", state={"power": "off"}, seconds=5, trace_id="t-explicit"))

    audits = await store.list_audit(device="dev1")
    assert [(a.request_id, a.state_version) for a in audits] == [("r4", 3), ("r1", 2), ("r0", 1)]
    assert audits[0].trace_id == "t-explicit"
    assert audits[0].summary == {
        "power": {"before": "on", "after": "off"},
        "limit": {"before": 250, "after": None},
        "tags": {"before": ["a"], "after": None},
    }
    assert audits[1].summary == {"limit": {"before": 300, "after": 250}}
    assert [a.request_id for a in await store.list_audit(limit=1)] == ["r4"]
    assert await store.list_audit(device="other") == []


async def test_a_state_given_as_json_text_is_stored_as_the_state_itself(store: Store) -> None:
    """The runner hands the state it serialised for the response along (`state_text`): stored,
    compared and audited exactly like the state itself, NaN refused alike."""
    await store.accept([req(f"s{i}") for i in range(5)])

    def text(state: dict[str, Any]) -> str:
        return json.dumps(state, sort_keys=True)

    first, second = {"power": "on", "limit": 300}, {"power": "on", "limit": 250, "tags": ["a"]}
    assert await store.complete(finish("s0", state=first, state_text=text(first), model_json={"M": "A"}))
    assert await store.device_state("dev1") == (first, 1)  # a new device: the whole row
    # an existing device, same model: the state goes as the text given, with its new version
    assert await store.complete(finish("s1", state=second, state_text=text(second), seconds=2))
    assert await store.device_state("dev1") == (second, 2)
    # the same state again is no change, as text or not
    assert await store.complete(finish("s2", state=dict(second), state_text=text(second), seconds=3))
    assert await store.device_state("dev1") == (second, 2)
    d = await store.get_device("dev1")
    assert d is not None
    assert (d.last_request_id, d.updated_at, d.model_json) == ("s2", at(3), {"M": "A"})
    audits = await store.list_audit(device="dev1")
    assert [(a.request_id, a.state_version) for a in audits] == [("s1", 2), ("s0", 1)]
    assert audits[0].summary == {
        "limit": {"before": 300, "after": 250},
        "tags": {"before": None, "after": ["a"]},
    }
    # a state JSON cannot hold is refused, and nothing of that completion is written
    with pytest.raises(ValueError, match="JSON compliant"):
        await store.complete(
            finish("s3", state={"x": float("nan")}, state_text=json.dumps({"x": float("nan")}), seconds=4)
        )
    assert await store.device_state("dev1") == (second, 2)


async def test_a_touch_writes_the_last_request_and_a_model_change_the_whole_row(store: Store) -> None:
    await store.accept([req("m1"), req("m2"), req("m3")])
    assert await store.complete(finish("m1", state={"power": "on"}, plugin="p1", model_json={"Model": "A"}))
    # same model, no new state: only the last-request columns, the plugin and the time change
    assert await store.complete(
        finish("m2", seconds=2, plugin="p2", model_json={"Model": "A"}, outcome="failed", error="x")
    )
    d = await store.get_device("dev1")
    assert d is not None
    assert (d.plugin, d.model_json, d.state_version) == ("p2", {"Model": "A"}, 1)
    assert d.state_json == {"power": "on"}
    assert (d.last_request_id, d.last_outcome, d.last_error, d.updated_at) == ("m2", "failed", "x", at(2))
    assert await store.complete(finish("m3", seconds=3, model_json={"Model": "B"}))
    d = await store.get_device("dev1")
    assert d is not None
    assert (d.plugin, d.model_json, d.state_version, d.last_request_id, d.updated_at) == (
        "p2",
        {"Model": "B"},
        1,
        "m3",
        at(3),
    )


async def test_untouched_device_and_unknown_request(store: Store) -> None:
    await store.accept([req("a", device="ghost")])
    # e.g. a request rejected for an unknown device: journal and outbox only.
    assert await store.complete(finish("a", "ghost", touch=False, outcome="rejected", error="unknown device"))
    assert await store.get_device("ghost") is None
    assert await store.device_state("ghost") == (None, 0)
    assert [i.request_id for i in await store.due_outbox(at(2))] == ["a"]

    with pytest.raises(LookupError, match="unknown request"):
        await store.complete(finish("never-accepted"))


async def test_inventory_sync_keeps_state(store: Store) -> None:
    await store.sync_inventory(
        [
            DeviceUpsert("n1", "redfish", {"bmc": "10.0.0.1"}),
            DeviceUpsert("n2", "nvml", {"gpus": 8}),
        ]
    )
    n1 = await store.get_device("n1")
    assert n1 is not None
    assert (n1.plugin, n1.model_json, n1.state_json, n1.state_version, n1.in_inventory) == (
        "redfish",
        {"bmc": "10.0.0.1"},
        None,
        0,
        True,
    )
    await store.accept([req("a", device="n1")])
    assert await store.complete(finish("a", "n1", state={"power": "on"}))

    # n1 changes model, n2 leaves the inventory, n3 joins.
    await store.sync_inventory(
        [DeviceUpsert("n1", "redfish", {"bmc": "10.0.0.9"}), DeviceUpsert("n3", "nvml")]
    )
    devices = {d.id: d for d in await store.list_devices()}
    assert list(devices) == ["n1", "n2", "n3"]
    assert devices["n1"].model_json == {"bmc": "10.0.0.9"}
    assert (devices["n1"].state_json, devices["n1"].state_version) == ({"power": "on"}, 1)
    assert devices["n1"].last_request_id == "a"
    assert devices["n1"].created_at == n1.created_at
    assert not devices["n2"].in_inventory and devices["n2"].model_json == {"gpus": 8}
    assert devices["n3"].in_inventory and devices["n3"].model_json == {}
    assert [d.id for d in await store.list_devices(limit=2)] == ["n1", "n2"]

    await store.sync_inventory([DeviceUpsert("n2", "nvml", {"gpus": 8})])
    devices = {d.id: d for d in await store.list_devices()}
    assert [d for d in devices if devices[d].in_inventory] == ["n2"]
    assert await store.get_device("nope") is None


async def test_a_head_delivered_meanwhile_is_not_read_back_for_sending(store: Store) -> None:
    """Two delivery passes overlap (a shutdown flush beside the loop's pass): the one that read a
    head before the other delivered it gets nothing back for it, so it cannot send it again."""
    await store.accept([req("a1", "A"), req("b1", "B")])
    assert await store.complete(finish("a1", "A", seconds=1, touch=False))
    assert await store.complete(finish("b1", "B", seconds=1, touch=False))
    heads = await store.due_heads(at(5))
    a1, b1 = await store.outbox_items([head.id for head in heads])
    await store.mark_delivered(b1.id, at(6))
    assert await store.outbox_items([head.id for head in heads]) == [a1]
    await store.dead_letter(a1.id, "INVALID_ARGUMENT: refused", at(7))
    assert await store.outbox_items([head.id for head in heads]) == []


async def test_outbox_keeps_per_device_order_and_backs_off(store: Store) -> None:
    await store.accept([req("a1", "A"), req("a2", "A"), req("b1", "B"), req("c1", "C")])
    assert await store.complete(finish("a1", "A", seconds=1, touch=False))
    assert await store.complete(finish("b1", "B", seconds=2, touch=False))
    assert await store.complete(finish("a2", "A", seconds=3, touch=False))
    assert await store.complete(finish("c1", "C", seconds=10, touch=False))
    assert await store.undelivered_count() == 4

    # One head per device, only if due; ordered oldest first.
    assert [i.request_id for i in await store.due_outbox(at(5))] == ["a1", "b1"]
    assert [i.request_id for i in await store.due_outbox(at(10))] == ["a1", "b1", "c1"]
    assert [i.request_id for i in await store.due_outbox(at(10), limit=1)] == ["a1"]

    a1, b1 = await store.due_outbox(at(5))
    (c1,) = [i for i in await store.due_outbox(at(10)) if i.device == "C"]
    # The light form a delivery pass reads: the same heads, their rows fetched by id afterwards,
    # each with how many of its device's responses wait (A: a1 and a2).
    waiting = {"A": 2, "B": 1, "C": 1}
    assert await store.due_heads(at(10)) == [
        (i.id, i.device, waiting[i.device]) for i in await store.due_outbox(at(10))
    ]
    assert await store.outbox_items([b1.id, a1.id, 10_000]) == [a1, b1]
    assert await store.outbox_items([]) == []
    assert await store.due_heads(at(10), devices={"C", "B"}) == [(b1.id, "B", 1), (c1.id, "C", 1)]
    assert await store.due_heads(at(10), devices={"A"}) == [(a1.id, "A", 2)]
    assert await store.due_heads(at(10), devices={"nobody"}) == []
    # A's head fails and backs off: A's later response must wait behind it.
    await store.delivery_failed(a1.id, "unavailable", at(20))
    await store.mark_delivered(b1.id, at(5))
    assert [i.request_id for i in await store.due_outbox(at(19))] == ["c1"]
    retry = [i for i in await store.due_outbox(at(20)) if i.device == "A"]
    assert [(i.request_id, i.attempts) for i in retry] == [("a1", 1)]

    await store.mark_delivered(a1.id, at(21))
    await store.mark_delivered(a1.id, at(30))  # the first delivery time is kept
    assert [i.request_id for i in await store.due_outbox(at(21))] == ["a2", "c1"]
    a1_view = await store.get_request("a1")
    assert a1_view is not None and a1_view.delivered_at == at(21)
    assert await store.undelivered_count() == 2


async def test_verifications_lifecycle(store: Store) -> None:
    await store.accept([req("a", "n1"), req("b", "n2")])
    for rid, device, due in (("a", "n1", 10), ("b", "n2", 20)):
        v = NewVerification(f"v-{rid}", device, rid, "enable_workload_profile", {"profile": rid}, at(due), 3)
        assert await store.complete(finish(rid, device, verification=v))

    assert await store.due_verifications(at(5)) == []
    assert [v.verification_id for v in await store.due_verifications(at(25))] == ["v-a", "v-b"]
    assert [v.verification_id for v in await store.due_verifications(at(25), limit=1)] == ["v-a"]

    # A check that needs another try: due later, count kept.
    await store.update_verification("v-a", VerificationStatus.PENDING, "not yet", at(30), 1, None)
    assert [v.verification_id for v in await store.due_verifications(at(25))] == ["v-b"]
    await store.update_verification("v-b", VerificationStatus.VERIFIED, "profile active", None, 1, at(26))
    (vb,) = await store.list_verifications(verification_id="v-b")
    assert (vb.status, vb.detail, vb.checks, vb.due_at, vb.finished_at) == (
        "verified",
        "profile active",
        1,
        at(20),
        at(26),
    )
    assert [v.verification_id for v in await store.due_verifications(at(40))] == ["v-a"]
    await store.update_verification("v-a", VerificationStatus.MISMATCH, "profile missing", None, 3, at(31))
    assert await store.due_verifications(at(100)) == []

    assert [v.verification_id for v in await store.list_verifications(device="n1")] == ["v-a"]
    assert {v.verification_id for v in await store.list_verifications()} == {"v-a", "v-b"}
    assert len(await store.list_verifications(limit=1)) == 1
