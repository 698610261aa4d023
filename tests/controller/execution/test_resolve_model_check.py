"""The plugin's model check runs once per device and model: a changed model, or another plugin
object (restarted), is checked again, and a refused model is never remembered as accepted."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from controller.execution.resolve import DeviceResolver
from plugins.base import InvalidRequestError


class _Plugin:
    def __init__(self) -> None:
        self.checked: list[dict[str, Any]] = []

    def check_model(self, model: dict[str, Any]) -> None:
        self.checked.append(model)
        if model.get("bad"):
            raise InvalidRequestError("bad model")


def test_an_equal_model_is_checked_once_and_any_change_again() -> None:
    resolver: Any = SimpleNamespace(_checked={})
    plugin = _Plugin()
    model = {"Model": "GB200", "spec": {"gpu": {"count": 4}}}
    for _ in range(3):
        DeviceResolver._check_model(resolver, "d1", plugin, dict(model))  # type: ignore[arg-type]
    assert len(plugin.checked) == 1
    model["spec"]["gpu"]["count"] = 8  # nested change: the remembered copy is the resolver's own
    DeviceResolver._check_model(resolver, "d1", plugin, model)  # type: ignore[arg-type]
    assert len(plugin.checked) == 2
    other = _Plugin()  # the plugin was restarted
    DeviceResolver._check_model(resolver, "d1", other, model)  # type: ignore[arg-type]
    assert len(other.checked) == 1
    with pytest.raises(InvalidRequestError):
        DeviceResolver._check_model(resolver, "d1", other, {**model, "bad": True})  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError):  # refused again, not taken from the memo
        DeviceResolver._check_model(resolver, "d1", other, {**model, "bad": True})  # type: ignore[arg-type]
