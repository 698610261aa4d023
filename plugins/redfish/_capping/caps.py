"""Writing one component's cap safely: read, validate, write, and read back.

Every change follows the same steps, whatever the mechanism:

1. GET the limit resource: current value, `AllowableMin/Max`, `Increment`, units and the ETag
   (the value before the first change is what "restore" later puts back). Skipped when the state
   holds the component's last reading, the scope's prior is already recorded and the ETag policy
   needs no fresh ETag (`body-hash`, `none`);
2. validate against the BMC's own limits (missing ones: the spec's, else a safety floor) and round
   to `Increment`; nothing is written when the value is already in force;
3. write, with `If-Match` only under the `strong` ETag policy (see `_write` for 412 handling).
   NVIDIA `0x600`, a gateway's 502/503/504, a dropped connection or a read timeout after the write
   was sent, or a 202 whose task could not be followed, mean it may have landed: GET again before
   writing once more (at most once);
4. GET again and report what the BMC now says (`applied`), next to what was asked (`requested`):
   the read-back is the proof under every ETag policy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from plugins.base import DeviceControllerError, DeviceUnreachableError, WriteOutcome, plain_init, write_log
from plugins.redfish._capping.bounds import Bounds, range_problem
from plugins.redfish._capping.outcome import (
    ANSWER_LOST,
    WriteProgress,
    annotate,
    landed,
    may_have_landed,
    not_landed,
    time_for_another,
    unread,
)
from plugins.redfish._device.op_bmc import OpBmc
from plugins.redfish._discovery.layout import Component
from plugins.redfish._platforms import CapRequest, LimitReading, Mechanism, Prior, mechanism_for
from plugins.redfish._platforms._base import PERSISTENCY_ABSENT, PERSISTENCY_OFF, PERSISTENCY_ON, same_watts
from plugins.redfish._platforms.gate import refusal
from plugins.redfish._wire.document import Document
from plugins.redfish._wire.errors import PlatformUnsupportedError, PreconditionFailedError


@plain_init
@dataclass(frozen=True)
class CapChange:
    """What happened to one component's cap.

    Attributes:
        component: the component.
        ok: whether the BMC now shows what was asked.
        requested: watts asked for (None for clear/restore to "no cap").
        before: the reading before any write (the prior value to record), if read.
        after: the reading after the change (read back), if read.
        wrote: whether a write was sent.
        message: why it failed, or how the applied value differs from the request.
        error: the exception behind a failure, if any.
        write: what the change did on the BMC (written, not written, unknown), failed or not.
    """

    component: Component
    ok: bool
    requested: float | None = None
    before: LimitReading | None = None
    after: LimitReading | None = None
    wrote: bool = False
    message: str = ""
    error: DeviceControllerError | None = None
    write: WriteOutcome = WriteOutcome.NOT_WRITTEN

    @property
    def applied(self) -> float | None:
        """The cap in force afterwards (None: no cap, or unknown)."""
        return self.after.watts if self.after is not None else None


async def set_cap(
    bmc: OpBmc,
    component: Component,
    watts: float,
    *,
    stored: LimitReading | None = None,
    read: Document | None = None,
    bounds: Bounds | None = None,
    known: tuple[Document, LimitReading] | None = None,
) -> CapChange:
    """Set an explicit cap of `watts` on one component (see the module docstring).

    Args:
        stored: the component's last reading from the device state; when given, the write
            policy needs no fresh ETag and the stored value differs from the target, the pre-write
            GET is skipped (the read-back is still the proof).
        read: a GET of the limit made moments before in this operation (discovery's), standing in
            for the pre-write GET (`plugins.redfish._capping.priors.discovered_read`).
        bounds: limits to check against when the BMC publishes none (the spec's, else a floor).
        known: a document of the limit the caller parsed already (`read`, or the read-back it
            offers for the pre-write GET) and the mechanism's parse of it: where the pre-write
            read is that very document, it is not parsed again (its evidence is still built).
    """
    mech = mechanism_for(component)
    label = component.label
    if mech is None:
        return CapChange(component, False, watts, message=f"{label}: no writable power limit")
    progress = WriteProgress()
    before: LimitReading | None = None
    try:
        if stored is not None and stands_in(bmc, mech, stored, watts):
            doc, current = Document(component.limit_uri, {}), stored
        elif read is not None:
            doc, current = read, mech.read(component, read, _parse_of(known, read))
        else:
            doc = await bmc.get(component.limit_uri)
            current = mech.read(component, doc, _parse_of(known, doc))
        before = current
        if doc.body and not current.offered:  # the write gate's first rule, before any range
            problem = f"{label}: {mech.offers(component, doc)}; nothing written"
        else:
            problem = range_problem(label, watts, current, bounds)
        if problem:
            _skipped(bmc, component, current, watts, problem)
            return CapChange(component, False, watts, before=before, after=before, message=problem)
        value = _quantize(watts, current.increment)
        plain = mech.set_request(component, value, current)
        guarded = mech.guard(plain, component, current, bmc.allow_power_off)
        if isinstance(guarded, str):
            # NOTE: also when the value is already in force: what the BMC does above it is the risk
            _skipped(bmc, component, current, watts, guarded)
            return CapChange(component, False, watts, before=before, after=before, message=guarded)
        if current.capped and same_watts(current.watts, value) and guarded == plain:
            _skipped(bmc, component, current, value, "already in force")
            return CapChange(component, True, watts, before=before, after=current)

        first = guarded
        # NOTE: persistence is sent only where the resource shows it (NVIDIA: a GPU's, not a Grace
        # CPU's nor a module's); what the answer says where the BMC decides alone is the mechanism's
        transient = mech.persistence(component, plain, doc, bmc.persistent)

        def build(cur: LimitReading, _doc: Document) -> CapRequest:
            if cur is current:  # the reading judged above: its request is the one built there
                return first
            request = mech.guard(mech.set_request(component, value, cur), component, cur, bmc.allow_power_off)
            if isinstance(request, str):
                raise PlatformUnsupportedError(request)
            return request

        def satisfied(r: LimitReading) -> bool:
            return r.capped and same_watts(r.watts, value)

        after = await _write(
            bmc,
            mech,
            component,
            build,
            current,
            doc,
            satisfied,
            Prior(float(value), True),
            progress,
            note="; ".join(n for n in (_plan_note(watts, value, current, bounds), transient) if n),
        )
    except DeviceControllerError as exc:
        # an unreachable BMC's remembered reading (not read now) is not what is in force: unknown
        gone = before is stored and isinstance(exc, DeviceUnreachableError)
        return CapChange(
            component,
            False,
            watts,
            before=None if gone and progress.outcome is WriteOutcome.NOT_WRITTEN else before,
            after=progress.reading,
            message=f"{label}: {exc}",
            error=exc,
            write=progress.outcome,
        )
    ok = satisfied(after)
    message = (
        "; ".join(n for n in (progress.note, transient) if n)
        if ok
        else f"{label}: requested {_w(value)}, the BMC reports {_w(after.watts)} after the write"
    )
    return CapChange(
        component, ok, watts, before=before, after=after, wrote=True, message=message, write=progress.outcome
    )


async def restore_cap(
    bmc: OpBmc,
    component: Component,
    prior: Prior,
    *,
    note: str = "restore the value from before devicectl's first change",
) -> CapChange:
    """Put back the value a component had before devicectl changed it (`Prior(None, False)`:
    remove the cap)."""
    mech = mechanism_for(component)
    label = component.label
    if mech is None:
        return CapChange(component, False, prior.watts, message=f"{label}: no writable power limit")
    progress = WriteProgress()
    current: LimitReading | None = None
    try:
        doc = await bmc.get(component.limit_uri)
        current = mech.read(component, doc)
        if mech.matches(current, prior):
            _skipped(bmc, component, current, prior.watts, "already in force")
            return CapChange(component, True, prior.watts, before=current, after=current)
        after = await _write(
            bmc,
            mech,
            component,
            lambda cur, d: mech.restore_request(component, prior, cur, d),
            current,
            doc,
            lambda r: mech.matches(r, prior),
            prior,
            progress,
            note=note,
        )
    except DeviceControllerError as exc:
        return CapChange(
            component,
            False,
            prior.watts,
            before=current,
            after=progress.reading,
            message=f"{label}: {exc}",
            error=exc,
            write=progress.outcome,
        )
    ok = mech.matches(after, prior)
    wanted = _w(prior.watts) if prior.capped else "no cap (the BMC default)"
    message = progress.note if ok else f"{label}: restoring {wanted}, the BMC reports {_describe(after)}"
    return CapChange(
        component,
        ok,
        prior.watts,
        before=current,
        after=after,
        wrote=True,
        message=message,
        write=progress.outcome,
    )


def _parse_of(known: tuple[Document, LimitReading] | None, doc: Document) -> LimitReading | None:
    """The parse the caller made of `doc` itself (None: of another document, or none made)."""
    return known[1] if known is not None and known[0] is doc else None


def stands_in(bmc: OpBmc, mech: Mechanism, stored: LimitReading, watts: float) -> bool:
    """Whether `set_cap` writes `watts` on the stored reading, with no GET before the write (its
    `stored`): the reading's GET carried the limit and its evidence is kept, the write policy needs
    no fresh ETag, no persistency is sent, and the stored value is not already the target (then
    the BMC must say so in a GET of its own)."""
    return (
        stored.offered  # the GET it came from carried the limit (the write gate's proof)
        and stored.evidence is not None  # and what it showed, which the gate judges the write on
        and etag_policy(bmc, mech) != "strong"
        and not bmc.persistent  # persistency is sent only where the body shows NVIDIA's OEM section
        and not (stored.capped and same_watts(stored.watts, _quantize(watts, stored.increment)))
    )


def _persistency_to_send(bmc: OpBmc, target: Prior) -> bool | None:
    """The persistency a write asks for, or None for none: a restore puts the prior's back exactly
    (true, false, or none where it showed none); a cap, or a prior read before persistency was
    recorded, asks for it where `persistent_caps` is set."""
    if target.persistency == PERSISTENCY_ON:
        return True
    if target.persistency == PERSISTENCY_OFF:
        return False
    if target.persistency == PERSISTENCY_ABSENT:
        return None
    return True if bmc.persistent else None


async def _write(
    bmc: OpBmc,
    mech: Mechanism,
    component: Component,
    build: Callable[[LimitReading, Document], CapRequest],
    current: LimitReading,
    doc: Document,
    satisfied: Callable[[LimitReading], bool],
    target: Prior,
    progress: WriteProgress,
    *,
    note: str = "",
) -> LimitReading:
    """Send the change and read it back; on 412 or a lost answer, re-read and send again only
    if still needed. Returns the reading after the change (in a dry run: `target`, planned).

    Each write's receipt gets the value before it and the read-back after it.

    A 412 is retried with the fresh ETag; a second 412 while the property we change still reads the
    same means the ETag is a hash over live readings (bmcweb): the third write goes without
    `If-Match`, and the BMC is remembered as such (`BmcClient.etag_quirks`).

    A write whose answer was lost (`ANSWER_LOST`: a gateway's 502/503/504, no reply after sending,
    NVIDIA `0x600`, a task that could not be followed) is unknown until a read decides it: the value
    in force makes it written; else it is sent once more (at most two writes in all, never a blind
    repeat). An unknown write whose read fails, or that still reads the old value when no further
    write may go, stays unknown (docs/redfish.md, "Writes through gateways").
    """
    policy = etag_policy(bmc, mech)
    lost = conflicts = 0

    async def gated() -> tuple[CapRequest, str]:
        """The next request and why the write gate refuses it ('' when it may go)."""
        request = build(current, doc)
        persistent = _persistency_to_send(bmc, target)
        if persistent is not None:
            request = mech.persist(request, doc, persistent)
        # NOTE: the one write gate (`_platforms.gate`), on the evidence of the reading's GET: the
        # last one made, or the stored reading's own where it stands in for the pre-write GET
        info = await _action_info(bmc, request, current) if request.method == "POST" else None
        return request, refusal(mech, component, request, current, info)

    ready: tuple[CapRequest, str] | None = None  # judged already, after a lost answer
    while True:
        request, problem = ready or await gated()
        ready = None
        if problem:
            _skipped(bmc, component, current, target.watts, problem)
            raise PlatformUnsupportedError(problem)
        etag = current.etag if request.if_match and policy == "strong" else None
        try:
            index = await bmc.send(request, etag, component=component.label, before=current.watts, note=note)
        except PreconditionFailedError as exc:
            progress.failed(exc)
            conflicts += 1
            if conflicts > 2:
                raise
            previous = current
            doc = await bmc.get(component.limit_uri)
            current = mech.read(component, doc)
            if satisfied(current):
                return current
            if conflicts == 2 and _same_setting(previous, current):
                # NOTE: bmcweb hashes the whole body, live readings included (real-firmware.md):
                # the value we change is as read, so the write may go without If-Match.
                policy = "body-hash"
                bmc.client.etag_quirks[mech.name] = "body-hash"
            continue
        except ANSWER_LOST as exc:
            progress.failed(exc)
            if not may_have_landed(exc):
                raise
            lost += 1
            # NOTE: NVIDIA 0x600 ("settings may or may not have applied"), a gateway that gave up
            # while the BMC still worked, a reply lost after sending: the write may have landed, so
            # read before anything else (redfish.md §2.2, §3).
            try:
                doc = await bmc.get(component.limit_uri)
                current = mech.read(component, doc)
            except DeviceControllerError as read_failed:
                unread(exc, read_failed)
                annotate(exc, f"; the read-back failed too ({read_failed}): whether it landed is unknown")
                raise exc from read_failed
            progress.reading = current
            if satisfied(current):
                progress.accepted()
                progress.note = f"{component.label}: {landed(exc, current.watts)}"
                return current  # it landed after all: this read is the read-back
            again = lost == 1 and time_for_another(exc, bmc.deadline)
            shown = f"{_describe(current)} in force"
            if again:
                # NOTE: the gate judges the write once more on this read before it is called sent
                # again: refused, the lost write stays unknown (it may still land), never "nothing written"
                try:
                    ready = await gated()
                    why = ready[1]
                except PlatformUnsupportedError as refused:
                    why = str(refused)
                if why:
                    again, shown = False, f"{shown}; not sent again: {why.removesuffix('; nothing written')}"
            not_landed(exc, current.watts, shown, again=again)
            if not again:
                annotate(exc, f"; read back: {shown}; whether it lands is unknown")
                raise
            await asyncio.sleep(getattr(exc, "retry_after", None) or 0.0)  # as the BMC asked, if it did
            continue
        except Exception as exc:
            progress.failed(exc)
            raise
        if bmc.dry_run:  # nothing was sent: what the write would leave in force
            return replace(current, watts=target.watts, capped=target.capped, etag=None)
        progress.accepted()
        after = mech.read(component, await bmc.get(component.limit_uri))
        write_log().read_back(index, after.watts)
        return after


async def _action_info(bmc: OpBmc, request: CapRequest, reading: LimitReading) -> Mapping[str, Any] | None:
    """The `@Redfish.ActionInfo` a POST's action names, read (None: none named, or it could not be
    read: then only the parameters the mechanism needs may be sent)."""
    action = reading.evidence.actions.get(request.path.rstrip("/")) if reading.evidence else None
    if request.method != "POST" or action is None or not action.info.startswith("/redfish/v1/"):
        return None
    try:
        doc = await bmc.get(action.info)
    except DeviceControllerError:
        return None
    return doc.body if isinstance(doc.body, Mapping) else None


def etag_policy(bmc: OpBmc, mech: Mechanism) -> str:
    """The ETag policy for a mechanism on this BMC: the option, else what was learned, else its default."""
    return bmc.etag_policy or bmc.client.etag_quirks.get(mech.name) or mech.etag_policy


def _same_setting(a: LimitReading, b: LimitReading) -> bool:
    return a.capped == b.capped and a.mode == b.mode and same_watts(a.watts, b.watts)


def _skipped(bmc: OpBmc, component: Component, current: LimitReading, watts: float | None, why: str) -> None:
    """A dry run's plan lists what it would not write, and why."""
    if bmc.dry_run:
        body = {"watts": watts} if watts is not None else {}
        write_log().skip(component.limit_uri, body, component=component.label, before=current.watts, note=why)


def _plan_note(watts: float, value: int, current: LimitReading, bounds: Bounds | None) -> str:
    """Rounding and the allowed range, for the receipt (a dry run's plan shows both)."""
    lo = current.min_watts if current.min_watts is not None else (bounds.min_watts if bounds else None)
    hi = current.max_watts if current.max_watts is not None else (bounds.max_watts if bounds else None)
    parts = []
    if not same_watts(watts, value):
        step = f" (Increment {current.increment:g})" if current.increment else ""
        parts.append(f"{watts:g} W rounded to {value} W{step}")
    if lo is not None or hi is not None:
        lo_s = f"{lo:g}" if lo is not None else "?"
        hi_s = f"{hi:g}" if hi is not None else "?"
        parts.append(f"allowed {lo_s}..{hi_s} W")
    return "; ".join(parts)


def _quantize(watts: float, increment: float | None) -> int:
    if increment and increment > 0:
        return round(round(watts / increment) * increment)
    return round(watts)


def _w(value: float | None) -> str:
    return "no cap" if value is None else f"{value:g} W"


def _describe(reading: LimitReading) -> str:
    if reading.watts is None:
        return "no cap"
    return f"{reading.watts:g} W ({'explicit cap' if reading.capped else 'default'})"
