"""What a drill checks at the end: every acknowledged request answered once, in order, caps right.

- lost: acknowledged, never answered, and absent from the journal (the ack was not durable);
- stuck: acknowledged, in the journal, but not answered within the drain limit;
- duplicates: extra copies received (the wire is at-least-once: reported, not a failure);
- order violations: a response that arrived after a response to a later request for its device;
- failed: answered with an error (a figure; the drill decides whether that is a problem);
- caps wrong: the device's last response was a success, yet the BMC holds other caps.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from drills.load import Sent
from drills.stack import Stack


async def drain(
    stack: Stack, acked: Sequence[Sent], limit: float, since: float | None = None
) -> float | None:
    """Wait (at most `limit` s) until every acked request has a response; returns the seconds from
    `since` (default: now) to the last arrival, or None when some are still missing at the limit."""
    began = time.monotonic() if since is None else since
    wanted = {s.request_id for s in acked}
    deadline = time.monotonic() + limit
    while True:
        stack.sink.poll()
        got = stack.sink.first()
        if wanted <= set(got):
            last = max((got[r].seen_at for r in wanted), default=began)
            return max(0.0, last - began)
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(0.05)


def journal_status(database_url: str, request_ids: Sequence[str]) -> dict[str, str]:
    """request id -> journal status ("completed/undelivered" when its response waits in the outbox)."""
    if not request_ids:
        return {}
    engine = sa.create_engine(database_url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT request_id, status FROM requests WHERE request_id IN :ids").bindparams(
                    sa.bindparam("ids", expanding=True)
                ),
                {"ids": list(request_ids)},
            ).all()
            undelivered = {
                r[0]
                for r in conn.execute(
                    sa.text(
                        "SELECT request_id FROM outbox WHERE delivered_at IS NULL AND request_id IN :ids"
                    ).bindparams(sa.bindparam("ids", expanding=True)),
                    {"ids": list(request_ids)},
                ).all()
            }
    finally:
        engine.dispose()
    return {rid: status + ("/undelivered" if rid in undelivered else "") for rid, status in rows}


async def verdict(
    stack: Stack,
    acked: Sequence[Sent],
    *,
    database_url: str,
    drain_limit: float,
    since: float | None = None,
    check_caps: bool = True,
) -> dict[str, Any]:
    """Drain, then count. The result's `problems` lists what must be zero (empty: the drill held)."""
    drain_s = await drain(stack, acked, drain_limit, since)
    stack.sink.poll()
    first = stack.sink.first()
    missing = [s.request_id for s in acked if s.request_id not in first]
    status = await asyncio.to_thread(journal_status, database_url, missing)
    lost = [r for r in missing if r not in status]
    stuck = {r: status[r] for r in missing if r in status}
    order = _order_violations(acked, stack.sink.arrivals)
    failed = {s.request_id: first[s.request_id].error for s in acked if s.request_id in first}
    failed = {r: e for r, e in failed.items() if not first[r].ok}
    caps_wrong = await _caps_wrong(stack, acked, first) if check_caps else []
    ids = {s.request_id for s in acked}
    result: dict[str, Any] = {
        "acked": len(acked),
        "responses": len(ids & set(first)),
        "lost": len(lost),
        "stuck": len(stuck),
        "duplicates": sum(n - 1 for r, n in stack.sink.counts.items() if r in ids and n > 1),
        "order_violations": len(order),
        "failed": len(failed),
        "caps_wrong": len(caps_wrong),
        "drain_s": None if drain_s is None else round(drain_s, 2),
        "tracebacks": stack.tracebacks(),
        "examples": {
            "lost": lost[:3],
            "stuck": dict(list(stuck.items())[:3]),
            "order": order[:3],
            "failed": sorted(set(failed.values()))[:3],
            "caps_wrong": caps_wrong[:3],
        },
    }
    problems = [
        f"{result[k]} {k.replace('_', ' ')}" for k in ("lost", "stuck", "order_violations") if result[k]
    ]
    if result["caps_wrong"]:
        problems.append(f"{result['caps_wrong']} devices with caps other than their last request's")
    result["problems"] = problems
    return result


def _order_violations(acked: Sequence[Sent], arrivals: Sequence[Any]) -> list[str]:
    """Responses that arrived after a response to a later-acknowledged request of the same device."""
    rank = {s.request_id: i for i, s in enumerate(acked)}
    device_of = {s.request_id: s.device for s in acked}
    newest: dict[str, int] = {}
    seen: set[str] = set()
    out: list[str] = []
    for arrival in arrivals:
        rid = arrival.request_id
        if rid not in rank or rid in seen:
            continue  # not ours, or a duplicate (counted apart)
        seen.add(rid)
        device = device_of[rid]
        if rank[rid] < newest.get(device, -1):
            out.append(f"{rid} after a later request of {device}")
        newest[device] = max(newest.get(device, -1), rank[rid])
    return out


async def _caps_wrong(stack: Stack, acked: Sequence[Sent], first: dict[str, Any]) -> list[str]:
    last: dict[str, Sent] = {}
    for sent in acked:
        last[sent.device] = sent
    out = []
    for index, device in enumerate(stack.devices):
        final = last.get(device)
        if final is None or final.request_id not in first or not first[final.request_id].ok:
            continue
        caps = await stack.gpu_caps(index)
        if caps != [final.watts] * 4:
            out.append(f"{device}: BMC holds {caps}, last request {final.request_id} set {final.watts:g} W")
    return out
