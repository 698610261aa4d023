"""A completion's state change given by the runner (`Completion.state_change`) is taken as given
only while the device's stored state text is the one it was computed against; otherwise the store
parses both states and computes the change itself, as for a completion that gives none."""

from __future__ import annotations

import asyncio
import json

import pytest

from controller.execution.state_text import NO_STATE, change, encode
from controller.store import NO_STORED_STATE, StateChange, Store, state_digest
from tests.controller.store.test_completion import finish, req

FIRST = {"power": "on", "limit": 300}
SECOND = {"power": "on", "limit": 250}


async def stored_first(store: Store) -> None:
    await store.accept([req(f"r{i}") for i in range(5)])
    assert await store.complete(finish("r0", state=FIRST, state_text=encode(FIRST).text))


async def test_a_change_against_the_stored_text_is_taken_as_given(store: Store) -> None:
    await stored_first(store)
    # a summary the store would never compute itself: seen in the audit only if taken as given
    given = StateChange(state_digest(encode(FIRST).text), '{"marker": {"before": null, "after": "given"}}')
    text = encode(SECOND).text
    assert await store.complete(finish("r1", state=SECOND, state_text=text, state_change=given, seconds=2))
    assert await store.device_state("dev1") == (SECOND, 2)
    (audit, _) = await store.list_audit(device="dev1")
    if store.dialect == "sqlite":
        assert audit.summary == {"marker": {"before": None, "after": "given"}}
    else:  # PostgreSQL keeps JSONB, not the text: the store always computes the change
        assert audit.summary == {"limit": {"before": 300, "after": 250}}
    # the same text again is no change: no new version, no audit row
    same = change(encode(SECOND).kept(), encode(SECOND))
    assert await store.complete(finish("r2", state=SECOND, state_text=text, state_change=same, seconds=3))
    assert await store.device_state("dev1") == (SECOND, 2)
    assert len(await store.list_audit(device="dev1")) == 2


@pytest.mark.parametrize(
    "prior",
    [state_digest(encode({"power": "off"}).text), NO_STORED_STATE],
    ids=["another text", "no state"],
)
async def test_a_change_against_another_text_is_computed_by_the_store(store: Store, prior: bytes) -> None:
    """The runner's copy is stale (another process, or a restart, changed the stored state; or it
    read no state and one is stored now): its change is not used, the audit holds the change from
    what was really stored."""
    await stored_first(store)
    stale = StateChange(prior, '{"marker": {"before": null, "after": "x"}}')
    text = encode(SECOND).text
    assert await store.complete(finish("r1", state=SECOND, state_text=text, state_change=stale, seconds=2))
    assert await store.device_state("dev1") == (SECOND, 2)
    (audit, _) = await store.list_audit(device="dev1")
    assert audit.summary == {"limit": {"before": 300, "after": 250}}


async def test_changes_of_one_device_in_one_batch_follow_each_other(store: Store) -> None:
    """Two completions of a device in one transaction: the second's change is against the first's
    text, which the batch holds in memory (taken as given on SQLite, computed on PostgreSQL)."""
    await stored_first(store)
    third = {"power": "off", "limit": 250}
    one = finish(
        "r1",
        state=SECOND,
        state_text=encode(SECOND).text,
        seconds=2,
        state_change=change(encode(FIRST).kept(), encode(SECOND)),
    )
    two = finish(
        "r2",
        state=third,
        state_text=encode(third).text,
        seconds=3,
        state_change=change(encode(SECOND).kept(), encode(third)),
    )
    batches = store.stats.batches
    assert await asyncio.gather(store.complete(one), store.complete(two)) == [True, True]
    assert store.stats.batches == batches + 1  # one transaction
    assert await store.device_state("dev1") == (third, 3)
    audits = await store.list_audit(device="dev1")
    assert [a.summary for a in audits[:2]] == [
        {"power": {"before": "on", "after": "off"}},
        {"limit": {"before": 300, "after": 250}},
    ]


async def test_a_state_with_nan_is_refused_even_with_a_change_given(store: Store) -> None:
    await stored_first(store)
    bad = {"limit": float("nan")}
    text = json.dumps(bad, sort_keys=True)
    with pytest.raises(ValueError, match="JSON compliant"):
        await store.complete(
            finish(
                "r1",
                state=bad,
                state_text=text,
                state_change=change(encode(FIRST).kept(), encode(bad)),
                seconds=2,
            )
        )
    assert await store.device_state("dev1") == (FIRST, 1)


async def test_a_change_against_no_state_is_taken_as_given_for_a_new_device(store: Store) -> None:
    """A device's first completion: its change against no stored state is taken as given (on
    both backends: there is no stored state to compare with), and its state is stored as the
    text it came with, read back equal."""
    await store.accept([req("r0")])
    marker = StateChange(NO_STORED_STATE, '{"marker": {"before": null, "after": "given"}}')
    text = encode(FIRST).text
    assert await store.complete(finish("r0", state=FIRST, state_text=text, state_change=marker))
    assert await store.device_state("dev1") == (FIRST, 1)
    (audit,) = await store.list_audit(device="dev1")
    assert audit.summary == {"marker": {"before": None, "after": "given"}}
    assert audit.state_version == 1
    # the runner's own change against no state is the summary the store would compute
    assert json.loads(change(NO_STATE, encode(FIRST)).summary) == {
        "limit": {"before": None, "after": 300},
        "power": {"before": None, "after": "on"},
    }


async def test_an_empty_first_state_is_stored_with_its_version(store: Store) -> None:
    """A first state `{}` changes nothing member by member (its change is `{}`), yet it is a
    state where there was none: stored, version 1, one audit row, as the store's own comparison
    decides."""
    await store.accept([req("r0")])
    empty = change(NO_STATE, encode({}))
    assert empty is not None and empty.summary == "{}"
    assert await store.complete(finish("r0", state={}, state_text="{}", state_change=empty))
    assert await store.device_state("dev1") == ({}, 1)
    (audit,) = await store.list_audit(device="dev1")
    assert audit.summary == {}
