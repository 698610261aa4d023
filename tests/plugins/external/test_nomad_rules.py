"""Nomad's fingerprint validation, one test per rule, each citing Nomad v1.6.5's source."""

from __future__ import annotations

import pytest

from plugins.base import Attribute, Device, DeviceControllerError, DeviceGroup
from plugins.base._nomad_rules import UNITS, attribute_problem, fingerprint_problems
from plugins.base.serving import checked_groups_to_pb


def group(**kw: object) -> DeviceGroup:
    fields: dict[str, object] = {
        "vendor": "acme",
        "type": "gpu",
        "name": "G1",
        "devices": (Device(id="g0", healthy=True),),
        "attributes": {},
    }
    return DeviceGroup(**{**fields, **kw})  # type: ignore[arg-type]


def test_a_valid_group_passes() -> None:
    ok = group(
        attributes={"memory": Attribute(80, "GiB"), "power": Attribute(700.5, "W"), "arch": Attribute("x")}
    )
    assert fingerprint_problems([ok]) == []


@pytest.mark.parametrize("field", ["vendor", "type", "name"])
def test_vendor_type_and_name_must_be_set(field: str) -> None:
    """plugins/device/device.go, DeviceGroup.Validate: "device <field> must be specified"."""
    assert fingerprint_problems([group(**{field: ""})]) == [
        f"device group 0: device {field} must be specified"
    ]


def test_every_device_needs_an_id() -> None:
    """plugins/device/device.go, Device.Validate: "device ID must be specified"."""
    bad = group(devices=(Device(id="g0", healthy=True), Device(id="", healthy=True)))
    assert fingerprint_problems([bad]) == ["device group 0: device 1: device ID must be specified"]


def test_units_come_only_from_nomads_table() -> None:
    """plugins/shared/structs/attribute.go, Attribute.Validate: `UnitIndex` of units.go."""
    assert attribute_problem(Attribute(4, "B")) == "unrecognized unit 'B'"
    assert attribute_problem(Attribute(4, "bytes")) == "unrecognized unit 'bytes'"
    assert {"KiB", "kB", "KB", "EiB/s", "kB/s", "MHz", "GHz", "mW", "W", "kW", "MW", "GW"} <= UNITS
    assert len(UNITS) == 6 + 7 + 6 + 7 + 2 + 5  # units.go: bytes, byte rates, hertz, watts


@pytest.mark.parametrize("value", ["fast", True])
def test_a_unit_only_on_numbers(value: object) -> None:
    """plugins/shared/structs/attribute.go: "unit can not be specified on a boolean or string attribute"."""
    why = attribute_problem(Attribute(value, "W"))  # type: ignore[arg-type]
    assert why == "unit can not be specified on a boolean or string attribute"


def test_exactly_one_value_is_set() -> None:
    """plugins/shared/structs/attribute.go: "no attribute value set" (the oneof left empty)."""
    assert attribute_problem(Attribute(None, "")) == "no attribute value set"  # type: ignore[arg-type]


def test_integers_fit_in_int64() -> None:
    """plugins/shared/structs/proto/attribute.proto: `int64 int_val`."""
    assert attribute_problem(Attribute(2**63, "KiB")) == f"integer {2**63} does not fit in int64"


def test_one_bad_attribute_is_named_and_fails_the_whole_fingerprint() -> None:
    """client/devicemanager/instance.go, handleFingerprint: any invalid group rejects the response,
    so the plugin server refuses to send it and says why."""
    bad = group(attributes={"total_size": Attribute(4, "B")})
    assert fingerprint_problems([group(), bad]) == [
        "device group 1: device attribute 'total_size' invalid: unrecognized unit 'B'"
    ]
    with pytest.raises(DeviceControllerError, match="fails Nomad's validation: device group 1"):
        checked_groups_to_pb((group(), bad))
    assert checked_groups_to_pb((group(),)).device_group[0].devices[0].ID == "g0"
