"""The one write gate every cap write passes, for every platform: write only what the BMC offers.

A request that changes a limit is sent only when the limit resource's own last GET carries it:

- the limit itself (`Mechanism.offers`): a `Control` with `ControlType: Power` and a `SetPoint`, an
  `EnvironmentMetrics.PowerLimitWatts` object, a `PowerControl[n].PowerLimit` object, or an OEM
  action the resource lists under `Actions`;
- a PATCH goes to that resource and names only properties its GET showed (an absent property is
  never written: a restore puts back exactly what was there, nothing more);
- a POST goes only to an action target the resource lists under `Actions`.

Anything else is refused before it is sent, with the reason; nothing reaches the BMC.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from plugins.redfish._discovery.layout import Component
from plugins.redfish._platforms._base import CapRequest, Mechanism
from plugins.redfish._wire.document import Document


def listed_actions(body: Mapping[str, Any]) -> set[str]:
    """Every action `target` the resource lists under `Actions` (standard and OEM)."""
    actions = body.get("Actions")
    return {t.rstrip("/") for t in _targets(actions)} if isinstance(actions, Mapping) else set()


def _targets(node: Mapping[str, Any]) -> Iterator[str]:
    for value in node.values():
        if isinstance(value, Mapping):
            target = value.get("target")
            if isinstance(target, str):
                yield target
            yield from _targets(value)


def absent_property(body: Mapping[str, Any], shown: Mapping[str, Any], prefix: str = "") -> str:
    """The first property a PATCH body names that the GET did not show ('' when none): objects
    are compared member by member, arrays member by member where the PATCH member is not `{}`."""
    for key, value in body.items():
        where = f"{prefix}{key}"
        if key not in shown:
            return where
        current = shown[key]
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            missing = absent_property(value, current, f"{where}/")
            if missing:
                return missing
        elif isinstance(value, list) and isinstance(current, list):
            for i, member in enumerate(value):
                if not (isinstance(member, Mapping) and member):
                    continue
                if i >= len(current) or not isinstance(current[i], Mapping):
                    return f"{where}/{i}"
                missing = absent_property(member, current[i], f"{where}/{i}/")
                if missing:
                    return missing
    return ""


def refusal(mech: Mechanism, component: Component, request: CapRequest, doc: Document) -> str:
    """Why `request` must not be sent ('' when it may), judged on `doc`, the limit resource's last
    GET (see the module docstring). The caller names the component."""
    offered = mech.offers(component, doc)
    if offered:
        return f"{offered}; nothing written"
    path = request.path.rstrip("/")
    read = doc.path.rstrip("/")
    if request.method == "POST":
        if path not in listed_actions(doc.body):
            return f"{path} is not an action {read} lists under Actions; nothing written"
        return ""
    if path != read:
        return f"{path} is not the resource whose limit was read ({read}); nothing written"
    missing = absent_property(request.body, doc.body)
    if missing:
        return f"{read} does not carry {missing}, which the write would set; nothing written"
    return ""
