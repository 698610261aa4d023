"""What the crash drill measures beyond the common verdict: the BMCs' sessions, the caps against what
the responses said, duplicates per kill, and why requests failed.

- caps: for each GPU, the last response of its device that says what the GPU holds (`ok`,
  `written`, or `not written` with the value in force) is what the BMC must hold at the end; a
  response whose write's answer never came (`unknown`) leaves that GPU unchecked until a later one;
- duplicates per kill: each repeated arrival is counted against a kill that can have caused it
  (`duplicates_per_kill`), within what that kill may cause (`repeat_bounds`);
- session failures: responses that failed on a full Redfish session table (in this drill every
  session is the controller's own, so any is a failure because of our own sessions).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from controller import translate
from drills.load import Sent
from drills.stack import Arrival, Stack
from plugins.base import WriteOutcome

SESSION_FULL = "session table is full"
_VOLATILE = re.compile(r"https://[^ :]+:\d+|\b[0-9a-f]{8,}\b|\d+(\.\d+)? s\b")


async def bmc_sessions(stack: Stack) -> dict[str, Any]:
    """Sessions open on each BMC now, and how many BMCs are at their limit (now and ever refused)."""
    stats = await stack.control("GET", "/stats")
    described = {b["index"]: b for b in await stack.control("GET", "/bmcs")}
    per_bmc = {b["index"]: int(b.get("open_sessions", 0)) for b in stats["bmcs"]}
    limits = {i: int(described[i]["session_limit"]) for i in per_bmc}
    refused = [b["index"] for b in stats["bmcs"] if int(b.get("session_limit_rejections", 0))]
    return {
        "sessions_open_max_per_bmc": max(per_bmc.values(), default=0),
        "sessions_open_total": sum(per_bmc.values()),
        "bmcs_at_session_limit": sum(1 for i, n in per_bmc.items() if n >= limits[i]),
        "bmcs_that_refused_a_login": len(refused),
    }


def caps_against_responses(
    acked: Sequence[Sent],
    arrivals: Sequence[Arrival],
    held: dict[str, list[float]],
    unsettled: Sequence[Sent] = (),
) -> dict[str, Any]:
    """Each GPU's cap on its BMC against the last response that says what it holds.

    A request given up unacknowledged (`unsettled`, each device's last) may have been journaled
    before its ack was lost: answered, its response is the device's last word; not answered, its
    caps may or may not have landed, so the BMC may hold either value."""
    first: dict[str, Arrival] = {}
    for arrival in arrivals:
        first.setdefault(arrival.request_id, arrival)
    expected: dict[tuple[str, int], float | None] = {}  # None: the last word was "unknown"
    either: dict[tuple[str, int], float] = {}  # the value of a request that may still land
    ran = 0
    given_up = {sent.request_id for sent in unsettled}
    for sent in [*acked, *unsettled]:  # acknowledgement order is each device's execution order
        answer = first.get(sent.request_id)
        if sent.request_id in given_up:
            if answer is None:
                either.update({(sent.device, g): sent.watts for g in range(len(held.get(sent.device, ())))})
                continue
            ran += 1
        for gpu_id, ok, watts, diag in answer.gpus if answer is not None else ():
            _, write = translate.split_write(diag)
            if write is WriteOutcome.WRITTEN and not watts:
                watts = sent.watts  # accepted, not read back: what was sent
            if ok or write is WriteOutcome.WRITTEN or (write is WriteOutcome.NOT_WRITTEN and watts > 0):
                expected[(sent.device, gpu_id)] = watts
            elif write is WriteOutcome.UNKNOWN:
                expected[(sent.device, gpu_id)] = None
    wrong, unknown, checked = [], 0, 0
    for (device, gpu_id), said in sorted(expected.items()):
        if device not in held:
            continue
        if said is None:
            unknown += 1
            continue
        checked += 1
        actual = held[device][gpu_id]
        may = either.get((device, gpu_id))
        if abs(actual - said) > 0.5 and (may is None or abs(actual - may) > 0.5):
            wrong.append(f"{device} GPU {gpu_id}: BMC holds {actual:g} W, the responses say {said:g} W")
    return {
        "caps_checked": checked,
        "caps_unknown": unknown,
        "caps_wrong": len(wrong),
        "caps_examples": wrong[:3],
        "unacked_that_ran": ran,
    }


#: a log line of the controller's delivery (controller/delivery/outbox.py): from it until
#: `BACKLOGS_DELIVERED`, a kill may repeat one response per device with a backlog, not one in all
BACKLOG_STARTED = "delivering a backlog ("
BACKLOGS_DELIVERED = "backlog delivery ended ("


def repeat_bounds(log_slices: Sequence[str], devices: int) -> list[int]:
    """How many repeated responses each kill may cause, from the log of the life it ended (one
    slice per kill): one; or, where a backlog was being delivered when the kill came, one per
    device besides (the delivery's documented bound; which devices is not logged, so all).

    NOTE: the delivery's other exception, a burst with more deliveries waiting than its
    concurrency (64 by default), needs more devices than the drill has."""
    bounds = []
    for text in log_slices:
        open_backlogs = text.count(BACKLOG_STARTED) > text.count(BACKLOGS_DELIVERED)
        bounds.append(1 + devices if open_backlogs else 1)
    return bounds


def repeats(acked: Sequence[Sent], arrivals: Sequence[Arrival]) -> list[tuple[Arrival, float]]:
    """Each arrival of an acked request that is not its first, with when its previous copy was seen."""
    ids = {s.request_id for s in acked}
    last: dict[str, float] = {}
    out = []
    for arrival in arrivals:
        if arrival.request_id in ids:
            previous = last.get(arrival.request_id)
            if previous is not None:
                out.append((arrival, previous))
            last[arrival.request_id] = arrival.seen_at
    return out


def duplicates_per_kill(
    acked: Sequence[Sent],
    arrivals: Sequence[Arrival],
    kills_at: Sequence[float],
    *,
    bounds: Sequence[int] | None = None,
    lag: float = 0.25,
) -> tuple[list[int], int]:
    """Repeated arrivals of acked requests, each counted against a kill that can have caused it:
    per kill, and how many no kill can explain.

    A repeat is caused by the kill of the process that sent the previous copy before its record
    committed: a kill after that copy arrived (less `lag`: a copy sent just before a kill may be
    read from the sink after it) and before the repeat arrived. Not always the last kill before
    the repeat: a process killed before it sent a repeat on sends it no more, and the next one
    sends that repeat and its own together. So repeats are matched to kills so that no kill takes
    more than it may cause (`bounds`, one each by default) where another fits (earliest repeat
    first, each to the earliest free kill: optimal for intervals over points). What is left (a
    repeat before any kill, within one process's life, or beyond what the kills may cause) is
    unexplained. `lag` must stay below the time a restarted process takes to send anything (the
    caller derives it from the restarts): then the kill before a copy's sender started never fits."""
    free = list(bounds) if bounds is not None else [1] * len(kills_at)
    counts = [0] * len(kills_at)
    unexplained = 0
    for seen, previous in sorted((r.seen_at, p) for r, p in repeats(acked, arrivals)):
        fits = next((k for k, t in enumerate(kills_at) if previous - lag <= t <= seen and free[k] > 0), None)
        if fits is None:
            unexplained += 1
        else:
            free[fits] -= 1
            counts[fits] += 1
    return counts, unexplained


def failure_reasons(acked: Sequence[Sent], arrivals: Sequence[Arrival]) -> tuple[dict[str, int], int]:
    """The five commonest reasons of failed responses (addresses, ids and durations blanked so that
    alike ones group), and how many failed on a full session table."""
    ids = {s.request_id for s in acked}
    first: dict[str, Arrival] = {}
    for arrival in arrivals:
        if arrival.request_id in ids:
            first.setdefault(arrival.request_id, arrival)
    failed = [a.error for a in first.values() if not a.ok]
    reasons = Counter(_VOLATILE.sub("…", e)[:160] for e in failed)
    return dict(reasons.most_common(5)), sum(SESSION_FULL in e for e in failed)
