"""`plain_init`: the frozen dataclasses made on every cap set their fields in one step, exactly as
the `__init__` dataclasses makes would: the same parameters, defaults, and fields in field order."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from plugins.base import AllocationResult, ComponentResult, GpuPoliciesResult, GpuResult, Outcome, plain_init
from plugins.base._policy import CapTarget
from plugins.redfish._capping.bounds import Bounds
from plugins.redfish._capping.caps import CapChange
from plugins.redfish._capping.operations import Target
from plugins.redfish._platforms import CapRequest, LimitReading, Prior

CLASSES: list[type[Any]] = [
    *(LimitReading, Prior, CapRequest, CapChange, Target, Bounds, CapTarget),
    *(ComponentResult, GpuResult, GpuPoliciesResult, AllocationResult, Outcome),
]


def _twin(cls: type[Any]) -> type[Any]:
    """The same dataclass with the `__init__` dataclasses makes."""
    fields = dataclasses.fields(cls)
    namespace: dict[str, Any] = {"__annotations__": {f.name: f.type for f in fields}}
    namespace.update({f.name: f.default for f in fields if f.default is not dataclasses.MISSING})
    return dataclasses.dataclass(frozen=True)(type(cls.__name__, (), namespace))


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_an_init_sets_what_the_dataclass_init_sets(cls: type[Any]) -> None:
    twin = _twin(cls)
    fields = dataclasses.fields(cls)
    values = [object() for _ in fields]
    required = [f for f in fields if f.default is dataclasses.MISSING]
    cases: list[tuple[list[Any], dict[str, Any]]] = [
        (values, {}),
        ([], {f.name: v for f, v in zip(fields, values, strict=True)}),
        (values[: len(required)], {}),  # the others at their defaults
        (values[:1], {f.name: v for f, v in zip(fields[1:], values[1:], strict=True)}),
    ]
    for args, kwargs in cases:
        mine, theirs = cls(*args, **kwargs), twin(*args, **kwargs)
        assert list(mine.__dict__.items()) == list(theirs.__dict__.items())
        assert all(getattr(mine, f.name) is getattr(theirs, f.name) for f in fields)
    with pytest.raises(TypeError):
        cls(*values, values[0])  # one too many, as before
    with pytest.raises(TypeError):
        cls(**{fields[0].name: 1, "nope": 2})
    with pytest.raises(dataclasses.FrozenInstanceError):
        cls(*values).__setattr__(fields[0].name, 1)
    assert dataclasses.replace(cls(*values), **{fields[-1].name: 5}) == cls(*values[:-1], 5)


def test_only_a_plain_frozen_dataclass_is_taken() -> None:
    @dataclasses.dataclass(frozen=True)
    class Later:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclasses.dataclass(frozen=True)
    class Factory:
        a: list[int] = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Keywords:
        a: int

    @dataclasses.dataclass(frozen=True)
    class Hidden:
        a: int = dataclasses.field(default=1, init=False)

    @dataclasses.dataclass(frozen=True, slots=True)
    class Slotted:
        a: int

    for cls in (Later, Factory, Keywords, Hidden, Slotted, int):
        with pytest.raises(TypeError, match="plain_init"):
            plain_init(cls)
