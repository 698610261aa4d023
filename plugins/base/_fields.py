"""`plain_init`: a frozen dataclass's `__init__` that sets its fields in one step."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, TypeVar

T = TypeVar("T")


def plain_init(cls: type[T]) -> type[T]:
    """Give the frozen dataclass `cls` an `__init__` that sets every field in one `__dict__.update`,
    not one `object.__setattr__` per field as the frozen `__init__` dataclasses makes does (a limit
    reading's 16 fields were a third of its parse; a cap makes several such objects).

    The same parameters, in the same order, with the same default objects, as the `__init__` it
    replaces (checked here, when the class is made), and the same fields set, in field order. Only
    for a dataclass without `__post_init__`, slots, default factories, keyword-only or non-init
    fields (it refuses the others), so there is nothing else an `__init__` of it does.
    """
    if not dataclasses.is_dataclass(cls) or "__slots__" in cls.__dict__ or hasattr(cls, "__post_init__"):
        raise TypeError(f"plain_init: {cls.__name__} is not a plain dataclass")
    fields = dataclasses.fields(cls)
    defaults: dict[str, Any] = {}
    params: list[str] = []
    for f in fields:
        if not f.init or f.kw_only or f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"plain_init: {cls.__name__}.{f.name} is not a plain field")
        if f.default is dataclasses.MISSING:
            params.append(f.name)
        else:
            defaults[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
    names = ", ".join(f"{f.name}={f.name}" for f in fields)
    source = f"def __init__(self, {', '.join(params)}):\n    self.__dict__.update({names})\n"
    made: dict[str, Any] = {}
    exec(source, defaults, made)  # the way dataclasses makes its own `__init__`
    init = made["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = "Set every field (`plugins.base.plain_init`)."
    replaced = list(inspect.signature(cls.__init__).parameters.values())
    mine = list(inspect.signature(init).parameters.values())
    if [(p.name, p.kind) for p in mine] != [(p.name, p.kind) for p in replaced] or any(
        a.default is not b.default for a, b in zip(mine, replaced, strict=True)
    ):
        raise TypeError(f"plain_init: {cls.__name__}: the parameters differ from the dataclass's")
    type.__setattr__(cls, "__init__", init)
    return cls
