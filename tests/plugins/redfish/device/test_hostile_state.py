"""Hostile device state and model JSON: one-line `InvalidRequestError`s, never crashes in device code."""

from __future__ import annotations

from typing import Any

import pytest

from plugins.base import Empty, InvalidRequestError, PolicyAction, PolicyChange
from plugins.redfish import RedfishPlugin
from plugins.redfish._discovery.layout import DISCOVERY_VERSION
from tests.plugins.redfish.harness import Harness
from tests.plugins.redfish.platforms.test_gb200 import node_policy


def _deep(levels: int) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for _ in range(levels):
        doc = {"x": doc}
    return doc


HOSTILE: list[tuple[Any, str]] = [
    ({"priors": _deep(100_000)}, "nested deeper than"),
    ({"version": "one"}, "unknown version 'one'"),
    ({"version": 99}, "unknown version 99"),
    ({"plugin": "nvml", "gpus": {}}, "plugin: written by 'nvml', not by redfish"),
    ({"priors": []}, "priors: expected an object, got array"),
    (
        {"priors": {"topology": {"gpu/0": {"watts": "700"}}}},
        "priors.'topology'.'gpu/0'.watts: expected watts",
    ),
    (
        {"priors": {"topology": {"gpu/0": {"watts": 700, "mode": "x; rm -rf"}}}},
        "'x; rm -rf' is not a ControlMode",
    ),
    ({"priors": {"topology": {"gpu/0": {"watts": 700, "mode": 3}}}}, "3 is not a ControlMode"),
    ({"applied": {"gpu/0": {"watts": True}}}, "applied.'gpu/0'.watts"),
    ({"profiles": {"gpus": {"gpu/0": {"requested": ["x"]}}}}, "expected a list of integers"),
    ({"discovery": {"version": DISCOVERY_VERSION, "platform": "bogus"}}, "'bogus' is not one of"),
    (
        {
            "discovery": {
                "version": DISCOVERY_VERSION,
                "platform": "controls",
                "gpus": [{"key": "g", "kind": "bogus", "index": 0, "name": "x"}],
            }
        },
        "discovery.gpus[0].kind: 'bogus' is not one of",
    ),
    (
        {
            "discovery": {
                "version": DISCOVERY_VERSION,
                "platform": "controls",
                "node": [{"key": "n", "kind": "node", "index": "0", "name": "x"}],
            }
        },
        "discovery.node[0].index: expected an integer",
    ),
    (
        {
            "discovery": {
                "version": DISCOVERY_VERSION,
                "platform": "controls",
                "node": [{"key": "n", "kind": "node", "index": 0, "name": "x", "evil": 1}],
            }
        },
        "unknown key 'evil'",
    ),
    ({"sessions": {"https://x": ["/etc/passwd"]}}, "not a Redfish session URI"),
    ({"readings": {"gpu/0": {"watts": float("nan")}}}, "readings.'gpu/0'.watts"),
    # a stored reading's write evidence: the paths a write would go to stay in the Redfish tree
    ({"readings": {"gpu/0": {"evidence": {"path": "/etc/passwd"}}}}, "readings.'gpu/0'.evidence.path"),
    (
        {
            "readings": {
                "gpu/0": {"evidence": {"path": "/redfish/v1/x", "actions": [{"target": "/redfish/v1/../x"}]}}
            }
        },
        "evidence.actions[0].target: not a plain /redfish/v1/ resource path",
    ),
    ({"readings": {"gpu/0": {"evidence": {"path": "/redfish/v1/x", "shown": "SetPoint"}}}}, "evidence.shown"),
]


@pytest.mark.parametrize(("state", "message"), HOSTILE, ids=[m for _, m in HOSTILE])
def test_load_state_refuses_hostile_state_with_one_line(state: Any, message: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        RedfishPlugin().load_state(state)
    text = str(info.value)
    assert message in text and "\n" not in text and len(text) < 300


def test_load_state_migrates_unversioned_and_version_1_state() -> None:
    old = {
        "priors": {"topology": {"gpu/0": {"watts": 1200, "capped": False, "mode": "Automatic"}}},
        "applied": {
            "gpu/0": {"watts": 700, "requested": 700, "scope": "topology", "at": "2025-01-01T00:00:00+00:00"}
        },
        "policies": {"topology": "P"},
        # an older discovery layout is dropped (discovered again), not misread
        "discovery": {"version": 0, "platform": "environment_metrics"},
    }
    for version in ({}, {"version": 1}):
        state = RedfishPlugin().load_state({**old, **version})
        assert state["version"] == 2 == RedfishPlugin.state_version and state["plugin"] == "redfish"
        assert state["priors"] == old["priors"] and state["applied"] == old["applied"]
        assert state["policies"] == {"topology": "P"} and "discovery" not in state


def test_values_a_bmc_reports_are_kept_so_a_device_never_locks_itself_out() -> None:
    reading = {"watts": 700, "capped": True, "max": 4294967295, "mode": "Static", "modes": ["Static"]}
    prior = {"watts": None, "capped": False, "mode": "Static"}
    state = RedfishPlugin().load_state(
        {"readings": {"gpu/0": reading}, "priors": {"topology": {"gpu/0": prior}}}
    )
    assert state["readings"]["gpu/0"]["max"] == 4294967295 and state["priors"]["topology"]["gpu/0"] == prior
    assert RedfishPlugin().load_state(state) == state  # idempotent


def test_check_model_refuses_bad_types() -> None:
    plugin = RedfishPlugin()
    plugin.check_model({"Model": "DGX_GB200", "Redfish": {"URL": "https://x", "SecretName": "s"}})
    for model, message in (
        ({"Model": 5}, "Model: expected a string"),
        ({"Redfish": ["x"]}, "Redfish: expected an object"),
        ({"Redfish": {"URL": {"a": 1}}}, "Redfish.'URL': expected a string"),
        ({"spec": {"devices": [{"type": "GPU", "count": "many"}]}}, "device model:"),
        (_deep(5000), "nested deeper than"),
    ):
        with pytest.raises(InvalidRequestError, match=message):
            plugin.check_model(model)


async def test_hostile_state_in_a_request_is_refused_before_the_bmc_is_called(gb200: Harness) -> None:
    bmc = gb200.fleet.bmcs[0]
    for state, _message in HOSTILE:
        with pytest.raises(InvalidRequestError, match="device state"):
            await gb200.call("std_metrics", bmc, Empty(), state=state)
        with pytest.raises(InvalidRequestError):
            await gb200.call(
                "set_policy", bmc, PolicyChange(PolicyAction.SET, node_policy(4000)), state=state
            )
    assert bmc.stats.total_calls == 0
    # a good state after all that still works
    out = await gb200.call("std_metrics", bmc, Empty())
    assert out.result.ok and out.state["version"] == 2


def test_new_options_are_in_the_config_schema_the_inventory_checks() -> None:
    from controller.inventory import option_errors

    schema = RedfishPlugin().config_schema()
    good = {"basic_fallback": True, "etag_policy": "body-hash", "persistent_caps": True, "min_cap_watts": 150}
    assert option_errors(schema, good) == []
    errors = option_errors(schema, {"etag_policy": "weak", "basic_fallback": "yes", "min_cap_watts": -1})
    assert len(errors) == 3 and any("etag_policy must be one of strong, body-hash, none" in e for e in errors)
