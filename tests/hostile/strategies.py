"""Hostile inputs for the fuzz test: hypothesis strategies for structurally valid requests with
hostile field values, and seeded generators of raw bytes (random, and mutations of valid requests).

Every generator is deterministic (hypothesis runs derandomized, `random.Random` is seeded), so a
failure reproduces on the next run.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

from hypothesis import strategies as st

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import policy_pb2 as pp

R = pb.DeviceControllerRequest
DEVICES = ("node000", "node001", "node002", "node003")

#: any valid Unicode string (protobuf strings cannot hold lone surrogates)
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
_long_text = st.one_of(_text, st.integers(250, 5_000).map(lambda n: "x" * n), st.just("a\nb\r\0c"))
#: NaN, infinities, negatives, subnormals, huge
_number = st.floats(allow_nan=True, allow_infinity=True)
#: proto3 enums are open: any int32 arrives, known or not
_enum = st.one_of(st.integers(0, 4), st.integers(-(2**31), 2**31 - 1))
_count = st.sampled_from([0, 1, 2, 7, 1_025, 5_000])  # around and beyond the repeated-field bound

_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), _text)
_json_value = st.recursive(
    _json_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_text, inner, max_size=4)),
    max_leaves=12,
)
_HOSTILE_JSON = [
    b"",
    b"{",
    b"[1]",
    b"null",
    b'{"a": NaN}',
    b"\xff\xfe{}",
    b"[" * 5_000 + b"]" * 5_000,
    b'{"a":' * 40 + b"1" + b"}" * 40,
    b'{"x": "' + b"y" * 300_000 + b'"}',
    json.dumps({"spec": {"devices": 5}}).encode(),
    json.dumps({"spec": {"idlePolicy": {"bogus": {"watts": 1}}}}).encode(),
    json.dumps({"spec": {"devices": [{"type": "gpu", "count": "many"}]}}).encode(),
    json.dumps(
        {"Redfish": {"URL": "https://127.0.0.1:9", "SecretName": "x"}, "spec": {"devices": 5}}
    ).encode(),
    json.dumps({"Redfish": {"URL": 5}, "power_policy_plugin": "os:system"}).encode(),
    json.dumps({"gpus": {"0": "bogus"}, "version": 1, "caps": [1]}).encode(),
    json.dumps({"version": 99}).encode(),
    json.dumps({"profiles": "2,4", "node": -1}).encode(),
    json.dumps({"Model": 5, "fail": "explode", "delay": -1}).encode(),
]


def _no_delay(value: Any) -> bool:
    # a model with a (huge) `delay` would hold its device for the whole fuzz run: not hostile, slow
    return not (isinstance(value, dict) and "delay" in value)


_json_bytes = st.one_of(
    st.sampled_from(_HOSTILE_JSON),
    st.dictionaries(_text, _json_value, max_size=5).filter(_no_delay).map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=64),
)


@st.composite
def _power_limit(draw: st.DrawFn) -> pp.PowerLimit:
    which = draw(st.sampled_from(["watts", "percentage", None]))
    return pp.PowerLimit(**{which: draw(_number)}) if which else pp.PowerLimit()


@st.composite
def _policy(draw: st.DrawFn) -> pp.PolicyObject:
    limits = [
        pp.PolicyLimit(element_type=draw(_enum), power_limit=draw(_power_limit()))
        for _ in range(draw(st.integers(0, 5)))
    ]
    limits += [pp.PolicyLimit(element_type=2)] * draw(st.sampled_from([0, 0, 2_000]))
    policy = pp.PolicyObject(name=draw(_long_text), limits=limits)
    properties = draw(st.dictionaries(_text, _json_value, max_size=3))
    try:
        policy.properties.update(properties)
    except (ValueError, TypeError):  # Struct refuses some values (e.g. huge ints): keep it empty
        pass
    if draw(st.booleans()):
        policy.properties["n"] = draw(_number)
    return policy


@st.composite
def _gpu_policies(draw: st.DrawFn) -> R.GPUPoliciesSetRequest:
    count = draw(_count)
    watts = draw(_number)
    ids = draw(st.sampled_from(["distinct", "same", "huge"]))
    policies = [
        pp.GPUPolicy(
            gpu_id={"distinct": i, "same": 0, "huge": 2**32 - 1 - i}[ids],
            power_limit=pp.PowerLimit(watts=watts),
        )
        for i in range(count)
    ]
    request = R.GPUPoliciesSetRequest(
        resource_group=draw(_long_text),
        gpu_policy_action=draw(_enum),
        gpu_policies=pp.GPUPolicies(policies=policies),
    )
    if draw(st.booleans()):
        request.current_policy.CopyFrom(draw(_policy()))
    return request


@st.composite
def _profiles(draw: st.DrawFn) -> R.PowerProfileRequest:
    ids = st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(0, 300))
    enable = draw(st.lists(ids, max_size=6)) + list(range(draw(_count)))
    return R.PowerProfileRequest(
        enable_profile_ids=enable,
        disable_profile_ids=draw(st.lists(ids, max_size=6)),
        disable_async_verification=draw(st.booleans()),
    )


@st.composite
def _policy_set(draw: st.DrawFn) -> R.PolicySetRequest:
    request = R.PolicySetRequest(policy_action=draw(_enum))
    if draw(st.booleans()):
        request.policy.CopyFrom(draw(_policy()))
    return request


def _mostly(sane: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`hostile` about one time in four: enough requests pass the edge to exercise the runner."""
    return st.sampled_from([True, True, True, False]).flatmap(lambda ok: sane if ok else hostile)


@st.composite
def requests(draw: st.DrawFn) -> R:
    """A structurally valid `DeviceControllerRequest` with hostile values in its fields."""
    msg = R(
        device=draw(_mostly(st.sampled_from(DEVICES), _long_text)),
        request_id=draw(_mostly(st.integers(0, 10**12).map("fz-{}".format), _long_text)),
        trace_id=draw(_mostly(st.just(""), _long_text)),
        timeout_seconds=draw(
            _mostly(st.sampled_from([0, 5]), st.sampled_from([1, 86_400, 86_401, 2**64 - 1]))
        ),
        device_model_json=draw(_mostly(st.just(b""), _json_bytes)),
        device_state_json=draw(_mostly(st.just(b""), _json_bytes)),
    )
    kind = draw(st.sampled_from([k for k in R.DESCRIPTOR.oneofs_by_name["request"].fields]))
    member = getattr(msg, kind.name)
    if kind.name.startswith("resource_group_"):
        member.resource_group = draw(_long_text)
        for field, strategy in (
            ("policy", _policy_set()),
            ("gpu_policies", _gpu_policies()),
            ("workload_profiles", _profiles()),
        ):
            if draw(st.booleans()):
                getattr(member, field).CopyFrom(draw(strategy))
        member.SetInParent()
    elif kind.name.startswith("topology_"):
        member.CopyFrom(draw(_policy_set()))
    elif kind.name == "gpu_policies_update":
        member.CopyFrom(draw(_gpu_policies()))
    elif kind.name.endswith("_workload_profile"):
        member.CopyFrom(draw(_profiles()))
    elif kind.name == "ping":
        member.retry_count = draw(st.integers(-(2**31), 2**31 - 1))
    elif kind.name == "gpu_metrics":
        member.gpu_ids.extend(draw(st.lists(st.integers(0, 2**32 - 1), max_size=6)) + [0] * draw(_count))
    elif kind.name == "modify_entity_model":
        member.phase = draw(st.integers(-(2**31), 2**31 - 1))
        member.old_device_model = draw(_json_bytes)
        member.new_device_model = draw(_json_bytes)
        member.resource_group = draw(_long_text)
        if draw(st.booleans()):
            member.new_default_policy.CopyFrom(draw(_policy()))
    member.SetInParent()
    return msg


def raw_messages(count: int, seeds: list[bytes], seed: int = 20261123) -> Iterator[bytes]:
    """`count` hostile byte strings: random bytes, and valid encodings bit-flipped, cut and spliced."""
    rng = random.Random(seed)
    for index in range(count):
        how = index % 4
        if how == 0 or not seeds:
            yield rng.randbytes(rng.choice([1, 2, 5, 17, 64, 300, 4_000]))
            continue
        data = bytearray(rng.choice(seeds))
        if how == 1 and data:  # flip a few bits
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif how == 2 and data:  # cut
            del data[rng.randrange(len(data)) :]
        else:  # splice two messages at random points
            other = rng.choice(seeds)
            data = data[: rng.randrange(len(data) + 1)] + other[rng.randrange(len(other) + 1) :]
        yield bytes(data)
