"""Inventory labels and the label selectors of `-l rack=r12,model!=GB300` (kubectl's equality
selectors): the shape of a label, a selector parsed with one clear error, and the inventory
devices it selects. The inventory (`controller.inventory`) checks labels with `label_problem`; the
admin API and `send --selector` select with `select`."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

#: a label key (kubectl's shape: `rack`, `topology.example.com/pdu`) and a label value
_KEY = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_./]{0,62}[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
#: one requirement: key=value, key==value or key!=value
_REQUIREMENT = re.compile(r"^\s*([^=!\s]+)\s*(==|=|!=)\s*([^=!\s]*)\s*$")


class SelectorError(ValueError):
    """A selector that does not parse; the message says which part and the shape expected."""


class Labelled(Protocol):
    @property
    def id(self) -> str: ...

    def all_labels(self) -> dict[str, str]: ...


@dataclass(frozen=True)
class Requirement:
    key: str
    value: str
    equal: bool

    def matches(self, labels: Mapping[str, str]) -> bool:
        return (labels.get(self.key) == self.value) is self.equal


def label_problem(key: Any, value: Any) -> str | None:
    """Why `key = value` cannot be a label; None when it can."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return f"label {key!r} must be a string or a whole number"
    if not _KEY.match(str(key)) or not _VALUE.match(str(value)):
        return (
            f"label {key}={str(value)!r}: keys and values are letters, digits and -_. (keys may also "
            "hold /), beginning and ending with a letter or digit"
        )
    return None


#: a selector is a few labels, never a payload: longer ones are refused before any work
MAX_SELECTOR_CHARS = 1024
MAX_REQUIREMENTS = 32


def parse(text: str) -> list[Requirement]:
    """`rack=r12,row!=b` as requirements (all must hold); [] for an empty selector."""
    if len(text) > MAX_SELECTOR_CHARS or text.count(",") >= MAX_REQUIREMENTS:
        raise SelectorError(
            f"selector of {len(text)} characters and {text.count(',') + 1} requirements: at most "
            f"{MAX_SELECTOR_CHARS} characters and {MAX_REQUIREMENTS} requirements"
        )
    requirements = []
    for part in text.split(",") if text.strip() else []:
        match = _REQUIREMENT.match(part)
        if match is None or not _KEY.match(match[1]) or not _VALUE.match(match[3]):
            raise SelectorError(
                f"selector {text!r}: {part.strip()!r} is not key=value or key!=value "
                "(e.g. -l rack=r12,model=GB200)"
            )
        requirements.append(Requirement(match[1], match[3], match[2] != "!="))
    return requirements


def select(entries: Iterable[Labelled], text: str) -> list[str]:
    """The ids of the entries whose labels meet every requirement of `text`, sorted."""
    requirements = parse(text)
    out = []
    for e in entries:
        labels = e.all_labels()  # once per entry, not per requirement
        if all(r.matches(labels) for r in requirements):
            out.append(e.id)
    return sorted(out)
