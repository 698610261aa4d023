"""The runner's state text: exactly `json.dumps(state, sort_keys=True)`, and the change against the
stored state's text is the audit summary the store would compute from both states parsed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controller.execution.state_text import LONG_MEMBER, change, encode
from controller.store import state_digest
from controller.store._state_changes import state_diff

STATES: list[dict[Any, Any]] = [
    {},
    {"version": 2},
    {"b": [1, 2.5, None, True], "a": {"z": "é ☃", "y": {"nested": [{"k": 1}]}}, "c": 'quote " and \\'},
    {"readings": {"gpu/0": {"modes": ("Automatic", "Manual"), "watts": 700.0}}, "applied": {}},
    {"x": float("nan"), "y": float("inf")},
    {"inner": {1: "int keys inside", 2: "are strings in JSON"}},
]


@pytest.mark.parametrize("state", STATES)
def test_the_text_is_json_dumps_with_sorted_keys_and_each_span_is_its_member(state: dict[Any, Any]) -> None:
    encoded = encode(state)
    assert encoded.text == json.dumps(state, sort_keys=True)
    for key in state:
        member = encoded.member(key)
        assert member == json.dumps(state[key], sort_keys=True)


def test_a_state_with_a_key_that_is_not_a_string_has_no_members_and_no_change() -> None:
    odd = encode({1: "one", 2: "two"})
    assert odd.text == json.dumps({1: "one", 2: "two"}, sort_keys=True)
    assert odd.spans == {}
    assert odd.kept() is None
    assert change(encode({"two": 2}).kept(), odd) is None


PAIRS = [
    ({}, {"a": 1}),
    ({"a": 1}, {}),
    ({"a": 1, "b": [1]}, {"a": 1, "b": [1, 2], "c": None}),
    ({"a": None}, {}),
    ({"keep": {"x": (1, 2)}, "gone": "y"}, {"keep": {"x": [1, 2]}, "new": {"n": 1.5}}),
    ({"same": "s"}, {"same": "s"}),
]


@pytest.mark.parametrize(("before", "after"), PAIRS)
def test_the_change_is_the_summary_the_store_computes_from_both_states(
    before: dict[str, Any], after: dict[str, Any]
) -> None:
    prior, new = encode(before), encode(after)
    found = change(prior.kept(), new)
    assert found is not None
    assert found.prior_digest == state_digest(prior.text)
    parsed_before, parsed_after = json.loads(prior.text), json.loads(new.text)
    assert json.loads(found.summary) == state_diff(parsed_before, parsed_after)


def test_no_prior_known_is_no_change() -> None:
    assert change(None, encode({"a": 1})) is None
    assert change(encode({"a": 1}).kept(), None) is None


def test_a_long_member_is_kept_as_its_digest_and_its_change_left_to_the_store() -> None:
    """A member over `LONG_MEMBER` (a BMC's discovery) is kept as a digest: unchanged, the change
    is still cut; changed, its old text is not at hand and there is no change to hand over."""
    long = {"urls": [f"https://10.0.{i}.1" for i in range(LONG_MEMBER // 16)]}
    before = encode({"discovery": long, "applied": {"gpu/0": 700}})
    kept = before.kept()
    assert kept is not None and isinstance(kept.members["discovery"], bytes)
    assert kept.members["applied"] == '{"gpu/0": 700}'
    same_discovery = change(kept, encode({"discovery": dict(long), "applied": {"gpu/0": 650}}))
    assert same_discovery is not None
    assert json.loads(same_discovery.summary) == {
        "applied": {"before": {"gpu/0": 700}, "after": {"gpu/0": 650}}
    }
    assert change(kept, encode({"discovery": {"urls": []}, "applied": {"gpu/0": 700}})) is None


async def test_a_device_s_later_requests_hand_the_store_their_change(
    start_controller, sink, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end on SQLite: the first request of a new device hands over its change against no
    stored state, and every later one its change against the text it stored; the store computes
    none, and the audit trail holds the summaries it would have computed. On PostgreSQL (no text
    kept) the first change is handed over too, and the store computes every later one: the runner
    keeps nothing to cut one from."""
    from controller.store import _state_changes
    from tests.controller.api.test_service import gpu_caps

    computed: list[str] = []
    original = _state_changes.state_diff

    def counted(before: Any, after: Any) -> dict[str, Any]:
        computed.append("diff")
        return original(before, after)

    monkeypatch.setattr(_state_changes, "state_diff", counted)
    h = await start_controller()
    for n, watts in enumerate((700.0, 650.0, 600.0)):
        await h.stub.SendDeviceRequest(gpu_caps("node000", f"cap-{n}", {0: watts}))
        await sink.wait_for(n + 1, timeout=10)
    if h.controller.store.keeps_state_text:
        assert computed == [], "every change was handed over"
    else:
        assert computed == ["diff"] * 2, "the first change was handed over, the later ones computed"
        assert h.controller.runner._resolver._devices["node000"].text is None  # nothing kept
    audits = await h.controller.store.list_audit(device="node000")
    assert [a.request_id for a in audits] == ["cap-2", "cap-1", "cap-0"]
    state, _ = await h.controller.store.device_state("node000")
    assert state is not None and json.loads(json.dumps(state))["gpus"]["0"] == 600.0
    assert audits[0].summary["gpus"] == {"before": {"0": 650.0}, "after": {"0": 600.0}}
    assert audits[1].summary["gpus"] == {"before": {"0": 700.0}, "after": {"0": 650.0}}
    first = audits[2].summary
    assert first["gpus"] == {"before": None, "after": {"0": 700.0}}
    assert all(member["before"] is None for member in first.values())


def _encoded_in_turn(states: list[dict[str, Any]]) -> list[str]:
    """Each state encoded against what was kept of the one before (as the runner does)."""
    texts, kept = [], None
    for state in states:
        encoded = encode(state, kept)
        texts.append(encoded.text)
        kept = encoded.kept()
    return texts


def test_an_unchanged_member_takes_its_kept_text_and_a_member_changed_in_place_is_seen() -> None:
    """A member unchanged once is snapshot, and its text taken while its snapshot holds: the same
    text; a value changed in place since (a plugin that shares the dict) gets its own text."""
    shared: dict[str, Any] = {"gpus": [{"key": "gpu/0", "max": 1000.0}], "firmware": "1.0"}
    states = [{"discovery": shared, "applied": {"gpu/0": n}} for n in range(3)]
    first, second = encode(states[0]), None
    second = encode(states[1], first.kept())
    assert second.snapshots.keys() == {"discovery"}  # unchanged: snapshot for the next one
    third = encode(states[2], second.kept())
    assert third.member("discovery") is second.member("discovery")  # taken, not made again
    shared["gpus"][0]["max"] = 900.0  # changed in place: the same object
    fourth = encode({"discovery": shared, "applied": {"gpu/0": 3}}, third.kept())
    assert fourth.text == json.dumps({"discovery": shared, "applied": {"gpu/0": 3}}, sort_keys=True)
    assert '"max": 900.0' in fourth.text
    assert "discovery" not in fourth.snapshots


@pytest.mark.parametrize(
    "values",
    [
        [1, 1, 1.0, True, 1, 1.0],
        [{"a": 1}, {"a": 1}, {"a": 1.0}, {"a": True}],
        [[0.0], [0.0], [-0.0], [0]],
        [{"b": 1, "a": 2}, {"b": 1, "a": 2}, {"a": 2, "b": 1}, {"a": 2, "b": 1}],
        [{"x": (1, 2)}, {"x": (1, 2)}, {"x": [1, 2]}, {"x": (1, 2)}],
        [{1: "a"}, {1: "a"}, {1.0: "a"}, {True: "a"}, {"1": "a"}],
        ["s", "s", type("S", (str,), {})("s"), "s"],
        [{"n": float("nan")}, {"n": float("nan")}, {"n": float("nan")}],
    ],
)
def test_every_text_is_json_dumps_whatever_a_member_s_values_were_before(values: list[Any]) -> None:
    """Values equal in Python with different JSON (1, 1.0, true; 0.0, -0.0; keys of those types),
    the same values in another order, a tuple for a list, a subclass: each text is its own."""
    states = [{"member": value, "other": n} for n, value in enumerate(values)]
    assert _encoded_in_turn(states) == [json.dumps(state, sort_keys=True) for state in states]


@pytest.mark.parametrize(
    "values", [[1, 1.0, True, 1], [0.0, -0.0, 0], [(1, 2), [1, 2]], ["s", type("S", (str,), {})("s")]]
)
def test_a_member_changed_in_place_between_completions_gets_its_own_text(values: list[Any]) -> None:
    """One long object changed in place before each completion (values Python calls equal and
    JSON does not, or types json encodes alike): each text is `json.dumps` of it then."""
    shared: list[Any] = ["x" * 1024, None]
    kept = None
    for n, value in enumerate(values):
        shared[1] = value
        state = {"member": shared, "other": n}
        encoded = encode(state, kept)
        assert encoded.text == json.dumps(state, sort_keys=True)
        kept = encoded.kept()


class _Checked(dict[str, Any]):
    """A plugin's mark on a section (as the Redfish plugin's checked discovery)."""

    __slots__ = ()


class _Reordered(dict[str, Any]):
    """A dict subclass whose `items` is its own: json's encoder takes what it returns."""

    __slots__ = ()

    def items(self) -> Any:
        return [(key, "shown") for key in dict.keys(self)]


class _WithDict(dict[str, Any]):
    """A dict subclass whose instances have a `__dict__` (an `items` of their own may hide dict's)."""


def test_a_marked_dict_is_taken_as_its_items_and_other_subclasses_get_their_own_text() -> None:
    section = {"gpus": [{"key": "gpu/0", "max": 1000.0}], "firmware": "1.0"}
    marked = [{"discovery": _Checked(section), "applied": {"gpu/0": n}} for n in range(3)]
    first = encode(marked[0])
    second = encode(marked[1], first.kept())
    assert "discovery" in second.snapshots
    third = encode(marked[2], second.kept())
    assert third.member("discovery") is second.member("discovery")
    assert third.text == json.dumps(marked[2], sort_keys=True)
    odd = _WithDict(section)
    odd.items = lambda: [("hidden", 1)]  # type: ignore[method-assign]
    for other in (_Reordered(section), odd):
        states = [
            {"discovery": value, "applied": {"gpu/0": n}} for n, value in enumerate((section, section, other))
        ]
        assert _encoded_in_turn(states) == [json.dumps(state, sort_keys=True) for state in states]
        assert (
            "discovery" not in encode(states[2], encode(states[1], encode(states[0]).kept()).kept()).snapshots
        )
