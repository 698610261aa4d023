"""The write gate's rules, on the requests each mechanism builds from a resource as read: a property
the GET did not show is never written (restore puts back exactly what was there), a POST goes only to
an action the resource lists, a limit the resource does not carry is never written."""

from __future__ import annotations

import dataclasses
import inspect
import json
from types import MappingProxyType
from typing import Any

import pytest

from plugins.redfish._discovery.layout import MECH_CONTROL, MECH_EM, Component
from plugins.redfish._platforms import (
    ControlMechanism,
    EnvironmentMetricsMechanism,
    LegacyPowerMechanism,
    LimitReading,
    Prior,
    _base,
)
from plugins.redfish._platforms._base import (
    EVIDENCE_ITEMS,
    CapRequest,
    WriteEvidence,
    _record,
    number,
    tightest,
)
from plugins.redfish._platforms.gate import absent_property, refusal
from plugins.redfish._wire.document import Document
from plugins.redfish._wire.errors import PlatformUnsupportedError

CONTROL = "/redfish/v1/Chassis/1/Controls/PowerLimit"
EM = "/redfish/v1/Chassis/HGX_ProcessorModule_0/EnvironmentMetrics"
NODE = Component("node", "node", 0, "PowerLimit", MECH_CONTROL, CONTROL)
MODULE = Component("module/0", "module", 0, "HGX_ProcessorModule_0", MECH_EM, EM)
DMTF_EM = "/redfish/v1/Chassis/1/EnvironmentMetrics"
DMTF_NODE = Component("node", "node", 0, "1", MECH_EM, DMTF_EM)


def test_a_control_without_control_mode_is_set_and_restored_with_its_set_point_alone() -> None:
    mech = ControlMechanism()
    doc = Document(CONTROL, {"ControlType": "Power", "SetPoint": None, "AllowableMin": 100})
    current = mech.read(NODE, doc)
    assert current.offered and current.mode is None
    write = mech.set_request(NODE, 500, current)
    assert write.body == {"SetPoint": 500}
    assert refusal(mech, NODE, write, current) == ""
    restore = mech.restore_request(NODE, current.prior(), current, doc)
    assert restore.body == {"SetPoint": None}  # no ControlMode where the first GET showed none
    assert refusal(mech, NODE, restore, current) == ""


def test_a_control_restores_the_mode_it_showed() -> None:
    mech = ControlMechanism()
    doc = Document(CONTROL, {"ControlType": "Power", "SetPoint": 400, "ControlMode": "Manual"})
    current = mech.read(NODE, doc)
    restore = mech.restore_request(NODE, Prior(400.0, True, "Manual"), current, doc)
    assert restore.body == {"SetPoint": 400, "ControlMode": "Manual"}


def _em(set_point: int, *, power_mode: str | None = None, requested: float | None = None) -> Document:
    """An NVIDIA chassis EnvironmentMetrics as the fork builds it (ControlMode from PowerCapEnable)."""
    nvidia: dict[str, Any] = {} if power_mode is None else {"PowerMode": power_mode}
    if requested is not None:
        nvidia |= {"RequestedOneshotPowerLimitWatts": requested, "RequestedPersistentPowerLimitWatts": None}
    limit = {"SetPoint": set_point, "DefaultSetPoint": 2900, "AllowableMin": 100, "AllowableMax": 2900}
    return Document(EM, {"PowerLimitWatts": {**limit, "ControlMode": "Automatic"}, "Oem": {"Nvidia": nvidia}})


def test_nvidias_power_mode_is_not_taken_for_a_cap() -> None:
    # NVIDIA bmcweb reads D-Bus Control.Power.Mode MaximumPerformance (and OEM) as PowerMode
    # "Custom", PowerSaving as "MaxQ" (chassis_utils.hpp getPowerModeType): a mode, not a set point
    mech = EnvironmentMetricsMechanism()
    at_default = mech.read(MODULE, _em(2900, power_mode="Custom"))
    assert not at_default.capped  # restore clears, it does not write the default back as a cap
    lowered = mech.read(MODULE, _em(2400, power_mode="MaxQ"))
    assert lowered.capped and lowered.watts == 2400  # restore puts 2400 back, it does not clear it
    requested = mech.read(MODULE, _em(2400, power_mode="MaxQ", requested=2400))
    assert requested.capped  # a client's request shown is a cap whatever the mode


def test_nvidias_requested_limits_shown_null_mean_no_out_of_band_cap() -> None:
    # null while no request was submitted (NvidiaEnvironmentMetrics_v1.xml): a set point below the
    # default is then the BMC's own (in-band, or its power mode), and a restore clears, never
    # writing it back as an out-of-band cap that would outlive it
    mech = EnvironmentMetricsMechanism()
    doc = _em(2400, power_mode="Custom")
    nvidia = doc.body["Oem"]["Nvidia"]
    nvidia |= {"RequestedOneshotPowerLimitWatts": None, "RequestedPersistentPowerLimitWatts": None}
    assert not mech.read(MODULE, doc).capped
    nvidia["RequestedPersistentPowerLimitWatts"] = 2400.0
    assert mech.read(MODULE, doc).capped


def test_a_clear_that_would_write_an_absent_control_mode_is_refused() -> None:
    mech = EnvironmentMetricsMechanism()
    # no DefaultSetPoint, no clear action, no ControlMode: nothing that puts "no cap" back
    limit = {"SetPoint": 300, "AllowableMin": 50, "AllowableMax": 420}
    doc = Document(DMTF_EM, {"PowerLimitWatts": limit})
    current = mech.read(DMTF_NODE, doc)
    clear = mech.restore_request(DMTF_NODE, Prior(None, False), current, doc)
    assert clear.body == {"PowerLimitWatts": {"ControlMode": "Disabled"}}
    why = refusal(mech, DMTF_NODE, clear, current)
    assert why == (
        f"{DMTF_EM} does not carry PowerLimitWatts/ControlMode, which the write would set; nothing written"
    )


def test_a_clear_nvidias_firmware_cannot_take_is_refused_not_sent() -> None:
    """NVIDIA's bmcweb reads only SetPoint inside PowerLimitWatts (environment_util.hpp): where its
    resource offers no ClearOOBSetPoint action and no DefaultSetPoint, a ControlMode "Disabled"
    would be a certain 400. It is refused with the reason, nothing sent; a DMTF resource showing
    the same ControlMode is still cleared with it."""
    mech = EnvironmentMetricsMechanism()
    limit = {"SetPoint": 300, "AllowableMin": 50, "AllowableMax": 420, "ControlMode": "Automatic"}
    nvidia = Document(EM, {"PowerLimitWatts": limit, "Oem": {"Nvidia": {"PowerLimitPersistency": False}}})
    current = mech.read(MODULE, nvidia)
    with pytest.raises(PlatformUnsupportedError) as refused:
        mech.restore_request(MODULE, Prior(None, False), current, nvidia)
    assert str(refused.value) == (
        f"{EM}: no request of this BMC removes the cap: it offers no "
        "NvidiaEnvironmentMetrics.ClearOOBSetPoint action and no DefaultSetPoint, and NVIDIA's "
        "firmware takes only a SetPoint in PowerLimitWatts; nothing written"
    )
    # NVIDIA's HGX resources without the OEM section (a captured GB300's Grace CPUs show none)
    grace_em = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/CPU_0/EnvironmentMetrics"
    grace = Document(grace_em, {"PowerLimitWatts": limit})
    cpu = Component("cpu/0", "cpu", 0, "CPU_0", MECH_EM, grace_em)
    with pytest.raises(PlatformUnsupportedError, match="NVIDIA's firmware takes only a SetPoint"):
        mech.restore_request(cpu, Prior(None, False), mech.read(cpu, grace), grace)
    dmtf = Document(DMTF_EM, {"PowerLimitWatts": limit})
    clear = mech.restore_request(DMTF_NODE, Prior(None, False), mech.read(DMTF_NODE, dmtf), dmtf)
    assert clear.body == {"PowerLimitWatts": {"ControlMode": "Disabled"}}
    assert refusal(mech, DMTF_NODE, clear, mech.read(DMTF_NODE, dmtf)) == ""


def test_a_resource_without_the_limit_and_unlisted_actions_are_refused() -> None:
    mech = EnvironmentMetricsMechanism()
    bare = Document(EM, {"PowerWatts": {"Reading": 300}})
    assert not mech.read(MODULE, bare).offered
    set_it = mech.set_request(MODULE, 300, mech.read(MODULE, bare))
    assert (
        refusal(mech, MODULE, set_it, mech.read(MODULE, bare))
        == f"{EM} carries no PowerLimitWatts: the BMC offers no limit there; nothing written"
    )
    limited = mech.read(MODULE, Document(EM, {"PowerLimitWatts": {"SetPoint": 300}}))
    guessed = CapRequest("POST", f"{EM}/Actions/Oem/NvidiaEnvironmentMetrics.ClearOOBSetPoint", {})
    assert "is not the target of an action" in refusal(mech, MODULE, guessed, limited)
    elsewhere = CapRequest(
        "PATCH", "/redfish/v1/Chassis/HGX_ProcessorModule_1/EnvironmentMetrics", set_it.body
    )
    assert "is not the resource whose limit was read" in refusal(mech, MODULE, elsewhere, limited)


def test_array_members_are_checked_where_the_patch_names_them() -> None:
    body = {"PowerControl": [{"PowerLimit": {"LimitInWatts": None}}, {"Name": "CPU"}]}
    shown = WriteEvidence.of(LegacyPowerMechanism(), "", Document("/redfish/v1/Chassis/1/Power", body)).shown
    assert absent_property({"PowerControl": [{}, {"Name": "x"}]}, shown) == ""
    assert absent_property({"PowerControl": [{"PowerLimit": {"LimitException": "NoAction"}}]}, shown) == (
        "PowerControl/0/PowerLimit/LimitException"
    )
    assert absent_property({"PowerControl": [{}, {}, {"PowerLimit": {}}]}, shown) == "PowerControl/2"


def test_the_tightest_published_range_stands() -> None:
    low, high = tightest(
        [(None, "AllowableMin"), (675.0, "CapacityMinAC"), (0.0, "MinLimitInWatts")],
        [(782.0, "CapacityMaxAC"), (750.0, "PowerCapacityWatts")],
    )
    assert low == (675.0, "CapacityMinAC") and high == (750.0, "PowerCapacityWatts")


# ---- a stored reading carries its GET's evidence, and the gate judges it the same way --------------


def _stored(reading: LimitReading) -> LimitReading:
    """The reading as the device state keeps it (JSON), standing in for the pre-write GET."""
    return LimitReading.from_json(reading.to_json())


def test_a_stored_reading_is_judged_on_the_path_properties_and_range_its_get_showed() -> None:
    mech = ControlMechanism()
    body = {
        "ControlType": "Power",
        "SetPoint": 400,
        "ControlMode": "Manual",
        "ControlMode@Redfish.AllowableValues": ["Manual", "Disabled"],
        "AllowableMin": 100,
        "AllowableMax": 900,
    }
    fresh = mech.read(NODE, Document(CONTROL, body))
    stored = _stored(fresh)
    assert stored.evidence == fresh.evidence and stored.evidence is not None
    assert stored.evidence.shown == {"SetPoint", "ControlMode"}
    assert stored.evidence.allowable == {"ControlMode": ("Manual", "Disabled")}
    for reading in (fresh, stored):  # one rule, whether the GET was made or a stored reading stands in
        assert refusal(mech, NODE, mech.set_request(NODE, 500, reading), reading) == ""
        elsewhere = CapRequest("PATCH", "/redfish/v1/Chassis/2/Controls/PowerLimit", {"SetPoint": 500})
        assert "is not the resource whose limit was read" in refusal(mech, NODE, elsewhere, reading)
        unshown = CapRequest("PATCH", CONTROL, {"SetPoint": 500, "SetPointUnits": "W"})
        assert f"{CONTROL} does not carry SetPointUnits" in refusal(mech, NODE, unshown, reading)
        override = CapRequest("PATCH", CONTROL, {"SetPoint": 500, "ControlMode": "Override"})
        assert "allows ControlMode only as Manual, Disabled" in refusal(mech, NODE, override, reading)
        above = CapRequest("PATCH", CONTROL, {"SetPoint": 950, "ControlMode": "Manual"})
        assert refusal(mech, NODE, above, reading) == (
            f"SetPoint 950 W is outside the range {CONTROL} publishes (AllowableMin 100, AllowableMax 900); "
            "nothing written"
        )


def test_a_stored_reading_without_evidence_or_whose_get_did_not_carry_the_limit_is_refused() -> None:
    mech = EnvironmentMetricsMechanism()
    old = LimitReading.from_json({"watts": 300, "capped": True, "offered": True})  # an older state
    write = mech.set_request(MODULE, 300, old)
    assert "no evidence of what its GET showed" in refusal(mech, MODULE, write, old)
    bare = _stored(mech.read(MODULE, Document(EM, {"PowerWatts": {"Reading": 3}})))
    assert refusal(mech, MODULE, write, bare) == (
        f"{EM} carries no PowerLimitWatts: the BMC offers no limit there; nothing written"
    )


# ---- a POST only to the mechanism's own listed action, with only its parameters -------------------

CLEAR = f"{EM}/Actions/Oem/NvidiaEnvironmentMetrics.ClearOOBSetPoint"
SPI = "/redfish/v1/Chassis/HGX_ProcessorModule_0/Actions/Oem/NvidiaProcessor.VariableSpiErase"


def test_a_post_goes_only_to_the_action_the_mechanism_names_with_only_the_parameters_it_needs() -> None:
    mech = EnvironmentMetricsMechanism()
    body = {
        "PowerLimitWatts": {"SetPoint": 300, "DefaultSetPoint": 420},
        "Actions": {
            "Oem": {
                "#NvidiaEnvironmentMetrics.ClearOOBSetPoint": {"target": CLEAR},
                "#NvidiaProcessor.VariableSpiErase": {"target": SPI},
            }
        },
    }
    for reading in (mech.read(MODULE, Document(EM, body)), _stored(mech.read(MODULE, Document(EM, body)))):
        clear = mech.clear_request(MODULE, reading, Document(EM, body))
        assert clear.path == CLEAR and refusal(mech, MODULE, clear, reading) == ""
        listed_elsewhere = CapRequest("POST", SPI, {}, if_match=False)  # listed, but not this limit's
        assert refusal(mech, MODULE, listed_elsewhere, reading) == (
            f"{SPI} is not the target of an action {EM} lists for this limit "
            "(NvidiaEnvironmentMetrics.ClearOOBSetPoint); nothing written"
        )
        extra = CapRequest("POST", CLEAR, {"Persistent": True}, if_match=False)
        assert refusal(mech, MODULE, extra, reading) == (
            "NvidiaEnvironmentMetrics.ClearOOBSetPoint: Persistent is not among the parameters this write "
            "needs; nothing written"
        )


def test_a_post_body_is_checked_against_the_published_allowable_values_and_action_info() -> None:
    mech = ControlMechanism()
    reset = f"{CONTROL}/Actions/Control.ResetToDefaults"
    body = {
        "ControlType": "Power",
        "SetPoint": 400,
        "DefaultSetPoint": 900,
        "Actions": {
            "#Control.ResetToDefaults": {
                "target": reset,
                "ResetType@Redfish.AllowableValues": ["ResetAll"],
                "@Redfish.ActionInfo": f"{CONTROL}/ResetToDefaultsActionInfo",
            }
        },
    }
    reading = _stored(mech.read(NODE, Document(CONTROL, body)))
    assert refusal(mech, NODE, CapRequest("POST", reset, {"ResetType": "ResetAll"}), reading) == ""
    bad = CapRequest("POST", reset, {"ResetType": "PreserveNetwork"})
    assert "ResetType PreserveNetwork is not among ResetType@Redfish.AllowableValues (ResetAll)" in refusal(
        mech, NODE, bad, reading
    )
    other = CapRequest("POST", reset, {"Force": True})
    assert "Force is not among the parameters it publishes" in refusal(mech, NODE, other, reading)
    info = {"Parameters": [{"Name": "ResetType", "AllowableValues": ["ResetAll", "PreserveNetwork"]}]}
    assert refusal(mech, NODE, bad, reading, info) == ""  # the ActionInfo read allows it
    assert "Force is not a parameter its ActionInfo" in refusal(mech, NODE, other, reading, info)


def test_the_evidence_records_paths_array_members_and_allowable_values_of_the_written_properties() -> None:
    mech = EnvironmentMetricsMechanism()
    body = {
        "PowerLimitWatts": {
            "SetPoint": 300,
            "ControlMode": "Manual",
            "ControlMode@Redfish.AllowableValues": ["Manual", 2],
            "Orphan@Redfish.AllowableValues": ["x"],  # annotates nothing the resource shows
            "Steps": [{"Watts": 1}, 7, None, {"Watts": 2, "Deep": {"A": {"B": {"C": {"D": 1}}}}}],
        },
        "Oem": {"Nvidia": {"PowerLimitPersistency": None}},
        "PowerLimitWatts@Redfish.AllowableValues": [1],
        "PowerWatts": {"Reading": 700},  # not a property the mechanism writes
        "Actions": {"Oem": {"#NvidiaEnvironmentMetrics.ClearOOBSetPoint": {"target": "/x/Clear/"}}},
    }
    reading = mech.read(MODULE, Document(EM + "/", body))
    evidence = reading.evidence
    assert evidence is not None and reading.offered and evidence.refused == ""
    assert evidence.path == EM
    assert evidence.shown == {
        "PowerLimitWatts",
        "PowerLimitWatts/SetPoint",
        "PowerLimitWatts/ControlMode",
        "PowerLimitWatts/Steps",
        "PowerLimitWatts/Steps/0",
        "PowerLimitWatts/Steps/0/Watts",
        "PowerLimitWatts/Steps/3",
        "PowerLimitWatts/Steps/3/Watts",
        "PowerLimitWatts/Steps/3/Deep",
        "PowerLimitWatts/Steps/3/Deep/A",
        "PowerLimitWatts/Steps/3/Deep/A/B",  # the sixth level: recorded, nothing under it
        "Oem",
        "Oem/Nvidia",
        "Oem/Nvidia/PowerLimitPersistency",
    }
    assert evidence.allowable == {"PowerLimitWatts/ControlMode": ("Manual", "2"), "PowerLimitWatts": ("1",)}
    assert list(evidence.actions) == ["/x/Clear"]
    assert WriteEvidence.from_json(evidence.to_json()) == evidence


def test_a_read_is_the_parse_with_whether_the_limit_is_offered_and_its_evidence() -> None:
    mech = EnvironmentMetricsMechanism()
    doc = Document(EM, {"PowerLimitWatts": {"SetPoint": 300, "AllowableMin": 50, "AllowableMax": 420}})
    parsed = mech.parse(MODULE, doc)
    read = mech.read(MODULE, doc)
    assert type(read) is LimitReading
    assert read == LimitReading(**{**parsed.__dict__, "offered": True, "evidence": read.evidence})
    assert not parsed.offered and parsed.evidence is None  # the parse itself is left as it was
    assert read.evidence == WriteEvidence.of(mech, "", doc)
    bare = mech.read(MODULE, Document(EM, {"PowerWatts": {"Reading": 1}}))
    assert not bare.offered and bare.evidence is not None and bare.evidence.refused


def test_equal_evidence_shares_one_set_of_paths_and_the_table_is_bounded(monkeypatch: Any) -> None:
    # every GPU of a fleet shows the same paths: the readings kept in device states share one set
    # (and its strings) rather than each holding its own; read from JSON (a restart) too
    mech = EnvironmentMetricsMechanism()
    body = {"PowerLimitWatts": {"SetPoint": 300, "AllowableMin": 50, "AllowableMax": 420}}
    readings = [mech.read(MODULE, Document(EM, json.loads(json.dumps(body)))) for _ in range(3)]
    sets = [r.evidence.shown for r in readings if r.evidence is not None]
    assert len(sets) == 3 and sets[0] == {"PowerLimitWatts", "PowerLimitWatts/SetPoint",
        "PowerLimitWatts/AllowableMin", "PowerLimitWatts/AllowableMax"}  # fmt: skip
    assert sets[1] is sets[0] and sets[2] is sets[0]
    evidence = readings[0].evidence
    assert evidence is not None
    assert WriteEvidence.from_json(json.loads(json.dumps(evidence.to_json()))).shown is sets[0]

    monkeypatch.setattr(_base, "_PATH_SETS", {})  # a table of 2 sets: full at the third, starts over
    monkeypatch.setattr(_base, "SHARED_PATH_SETS", 2)
    for shown in ({"SetPoint": 300}, {"SetPoint": 3, "Reading": 1}, {"SetPoint": 3, "DefaultSetPoint": 1}):
        read = mech.read(MODULE, Document(EM, {"PowerLimitWatts": shown}))
        assert read.evidence is not None and read.evidence.shown == {"PowerLimitWatts"} | {
            f"PowerLimitWatts/{key}" for key in shown
        }
    assert len(_base._PATH_SETS) == 1
    again = mech.read(MODULE, Document(EM, json.loads(json.dumps(body))))
    assert again.evidence is not None and again.evidence.shown == sets[0] and len(_base._PATH_SETS) == 2


def test_a_bmcs_long_paths_are_not_kept_for_sharing(monkeypatch: Any) -> None:
    # the table outlives the readings: a BMC that names long keys (each GET other ones, within the
    # reply's bound) must not fill it with them; its evidence is recorded as ever, just not shared
    monkeypatch.setattr(_base, "_PATH_SETS", {})
    mech = EnvironmentMetricsMechanism()
    for n in range(3):
        keys = {f"K{n}{i}" + "x" * 1000: 1 for i in range(3)}
        read = mech.read(MODULE, Document(EM, {"PowerLimitWatts": {"SetPoint": 300, **keys}}))
        assert read.evidence is not None and len(read.evidence.shown) == 5
        assert sum(map(len, read.evidence.shown)) > _base.SHARED_PATH_CHARS
    assert _base._PATH_SETS == {}
    read = mech.read(MODULE, Document(EM, {"PowerLimitWatts": {"SetPoint": 300}}))
    assert read.evidence is not None and list(_base._PATH_SETS) == [read.evidence.shown]


def test_a_number_is_a_json_int_or_float_as_float_and_nothing_else() -> None:
    class Watts(float):
        pass

    assert number(700) == 700.0 and type(number(700)) is float
    assert number(712.5) == 712.5 and number(Watts(3.5)) == 3.5 and type(number(Watts(3.5))) is float
    assert number(2**70) == float(2**70)
    for not_a_number in (True, False, None, "700", [700], {"Reading": 700}):
        assert number(not_a_number) is None


def test_the_evidence_is_the_bounded_walks_on_json_near_the_bound_and_on_what_json_never_gives() -> None:
    """The evidence is walked without the bound first and again with it only where that walk came
    near the bound or met something JSON never gives: the same paths and values either way."""
    mech = EnvironmentMetricsMechanism()
    bodies: list[dict[str, Any]] = [
        {"PowerLimitWatts": {f"K{i}": {"A": 1, "B": [{"C": 1}, 2]} for i in range(300)}, "Oem": {"X": 1}},
        {"PowerLimitWatts": {f"K{i}": 1 for i in range(EVIDENCE_ITEMS - 1)}, "Oem": {"A": 1, "B": 2}},
        {"PowerLimitWatts": {f"K{i}": 1 for i in range(EVIDENCE_ITEMS - 3)}, "Oem": {"A": 1}},
        {
            "PowerLimitWatts": {1: "x", "SetPoint": 3, "Z": 4},
            "Oem": MappingProxyType({"A": {"B": 1}, "C": (1,)}),
        },
        {"PowerLimitWatts": {"Steps": [{"W": 1}, MappingProxyType({"Q": {"R": 1}}), {"W": 2}]}},
        {
            "PowerLimitWatts": {"SetPoint": 1, "SetPoint@Redfish.AllowableValues": [1, 2]},
            "Oem": {"Nvidia": {}},
        },
    ]
    for body in bodies:
        shown: set[str] = set()
        allowable: dict[str, tuple[str, ...]] = {}
        _record({k: body[k] for k in mech.writes if k in body}, "", 1, shown, allowable)
        evidence = WriteEvidence.of(mech, "", Document(EM, body))
        assert evidence.shown == shown and len(shown) <= EVIDENCE_ITEMS
        assert list(evidence.allowable.items()) == list(allowable.items())
    assert len(WriteEvidence.of(mech, "", Document(EM, bodies[0])).shown) == EVIDENCE_ITEMS


def test_a_readings_own_init_takes_the_fields_their_defaults_and_order() -> None:
    fields = dataclasses.fields(LimitReading)
    params = list(inspect.signature(LimitReading.__init__).parameters.values())[1:]
    assert [p.name for p in params] == [f.name for f in fields]
    for p, f in zip(params, fields, strict=True):
        assert p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        assert p.default == (inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default)
        assert f.default_factory is dataclasses.MISSING and f.init
    values = [object() for _ in fields]
    for reading in (
        LimitReading(*values),
        LimitReading(**{f.name: v for f, v in zip(fields, values, strict=True)}),
    ):
        assert list(reading.__dict__) == [f.name for f in fields]
        assert all(getattr(reading, f.name) is v for f, v in zip(fields, values, strict=True))
    assert LimitReading(1.0, True) == LimitReading(watts=1.0, capped=True, units="W", offered=False)
