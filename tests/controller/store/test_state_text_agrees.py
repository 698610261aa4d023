"""The runner's state-text fast path and the store's own comparison agree on every sequence of
states: a state is stored as given whenever its JSON text changes (1, 1.0 and true are equal in
Python but distinct JSON), with one version and one audit row per change, whichever path decided.

The fast path is taken on SQLite only (the store keeps the text); on PostgreSQL both runs below
are the store's comparison, and must still give the same versions, texts and audit rows."""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.execution.state_text import NO_STATE, Kept, change, encode
from controller.store import Store
from tests.controller.store.test_completion import finish, req

_ids = itertools.count()

#: values equal in Python and distinct in JSON, and their neighbours
_value = st.sampled_from(
    [0, 1, 1.0, True, False, 0.0, None, "1", 2.5, [1], [1.0], [True], {"w": 1}, {"w": 1.0}, {"w": True}]
)
_state = st.dictionaries(st.sampled_from(["a", "b"]), _value, max_size=2)


async def _run(store: Store, states: list[dict[str, Any]], *, fast: bool) -> tuple[str, int, list[str]]:
    """Complete one request per state, handing the store the runner's change (`fast`) or none
    (the store compares); the stored text, version and audit summaries (as canonical JSON)."""
    device = f"dev{next(_ids)}"
    kept: Kept | None = NO_STATE  # a new device: the runner's change is against no stored state
    for i, state in enumerate(states):
        rid = f"{device}-r{i}"
        await store.accept([req(rid, device)])
        text = encode(state)
        given_change = change(kept, text) if fast else None
        done = finish(
            rid, device, state=state, state_text=text.text, state_change=given_change, seconds=i + 1
        )
        assert await store.complete(done)
        kept = text.kept() if store.keeps_state_text else None  # as the runner's resolver remembers
    stored, version = await store.device_state(device)
    audits = await store.list_audit(device=device)
    summaries = [json.dumps(a.summary, sort_keys=True) for a in reversed(audits)]
    return json.dumps(stored, sort_keys=True), version, summaries


def _expected(states: list[dict[str, Any]]) -> tuple[str, int]:
    texts = [json.dumps(s, sort_keys=True) for s in states]
    return texts[-1], 1 + sum(a != b for a, b in itertools.pairwise(texts))


async def test_one_then_one_point_zero_then_true_is_three_versions_on_both_paths(store: Store) -> None:
    states: list[dict[str, Any]] = [{"x": 1}, {"x": 1.0}, {"x": True}]
    for fast in (True, False):
        text, version, summaries = await _run(store, states, fast=fast)
        assert (text, version) == ('{"x": true}', 3)
        assert summaries[1:] == [
            '{"x": {"after": 1.0, "before": 1}}',
            '{"x": {"after": true, "before": 1.0}}',
        ]


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(_state, min_size=1, max_size=5))
async def test_the_fast_path_and_the_store_agree_on_every_sequence(
    store: Store, states: list[dict[str, Any]]
) -> None:
    fast = await _run(store, states, fast=True)
    slow = await _run(store, states, fast=False)
    assert fast == slow
    assert (fast[0], fast[1]) == _expected(states)
    assert len(fast[2]) == fast[1]  # one audit row per version
