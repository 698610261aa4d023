"""`plugins.base` stream types ⇄ Nomad's device-plugin protobuf messages, both directions.

The mapping is field by field (docs/plugins.md has the table). Errors do not fit Nomad's
messages: a server ends the stream with a gRPC status instead (as Nomad's own server does), and
the client side turns that status back into a response carrying the error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC
from typing import Any

from google.protobuf import wrappers_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from plugins._proto.nomad.plugins.device import device_pb2 as dpb
from plugins._proto.nomad.plugins.shared.hclspec import hcl_spec_pb2 as hpb
from plugins._proto.nomad.plugins.shared.structs import attribute_pb2 as apb
from plugins._proto.nomad.plugins.shared.structs import stats_pb2 as spb
from plugins.base import _streams as s

# ---- fingerprint ------------------------------------------------------------------------------


def attribute_to_pb(attr: s.Attribute) -> apb.Attribute:
    out = apb.Attribute(unit=attr.unit)
    value = attr.value
    if isinstance(value, bool):  # before int: bool is an int in Python
        out.bool_val = value
    elif isinstance(value, int):
        out.int_val = value
    elif isinstance(value, float):
        out.float_val = value
    else:
        out.string_val = str(value)
    return out


def attribute_from_pb(msg: apb.Attribute) -> s.Attribute:
    which = msg.WhichOneof("value")
    value: int | float | str | bool = getattr(msg, which) if which else ""
    return s.Attribute(value, msg.unit)


def groups_to_pb(groups: tuple[s.DeviceGroup, ...]) -> dpb.FingerprintResponse:
    out = dpb.FingerprintResponse()
    for group in groups:
        g = out.device_group.add(vendor=group.vendor, device_type=group.type, device_name=group.name)
        for dev in group.devices:
            d = g.devices.add(ID=dev.id, healthy=dev.healthy, health_description=dev.health_description)
            if dev.locality is not None:
                d.hw_locality.pci_bus_id = dev.locality.pci_bus_id
        for name, attr in group.attributes.items():
            g.attributes[name].CopyFrom(attribute_to_pb(attr))
    return out


def groups_from_pb(msg: dpb.FingerprintResponse) -> s.FingerprintResponse:
    groups = tuple(
        s.DeviceGroup(
            vendor=g.vendor,
            type=g.device_type,
            name=g.device_name,
            devices=tuple(
                s.Device(
                    id=d.ID,
                    healthy=d.healthy,
                    health_description=d.health_description,
                    locality=s.DeviceLocality(d.hw_locality.pci_bus_id)
                    if d.HasField("hw_locality")
                    else None,
                )
                for d in g.devices
            ),
            attributes={k: attribute_from_pb(v) for k, v in g.attributes.items()},
        )
        for g in msg.device_group
    )
    return s.FingerprintResponse(groups=groups)


# ---- stats ------------------------------------------------------------------------------------

_WRAPPED = (
    ("float_numerator", "float_numerator_val", wrappers_pb2.DoubleValue),
    ("float_denominator", "float_denominator_val", wrappers_pb2.DoubleValue),
    ("int_numerator", "int_numerator_val", wrappers_pb2.Int64Value),
    ("int_denominator", "int_denominator_val", wrappers_pb2.Int64Value),
    ("string", "string_val", wrappers_pb2.StringValue),
    ("boolean", "bool_val", wrappers_pb2.BoolValue),
)


def stat_value_to_pb(value: s.StatValue) -> spb.StatValue:
    out = spb.StatValue(unit=value.unit, desc=value.desc)
    for ours, theirs, wrapper in _WRAPPED:
        v = getattr(value, ours)
        if v is not None:
            getattr(out, theirs).CopyFrom(wrapper(value=v))
    return out


def stat_value_from_pb(msg: spb.StatValue) -> s.StatValue:
    kwargs: dict[str, Any] = {o: getattr(msg, t).value for o, t, _ in _WRAPPED if msg.HasField(t)}
    return s.StatValue(unit=msg.unit, desc=msg.desc, **kwargs)


def stat_object_to_pb(obj: s.StatObject) -> spb.StatObject:
    out = spb.StatObject()
    for name, nested in obj.nested.items():
        out.nested[name].CopyFrom(stat_object_to_pb(nested))
    for name, value in obj.attributes.items():
        out.attributes[name].CopyFrom(stat_value_to_pb(value))
    return out


def stat_object_from_pb(msg: spb.StatObject) -> s.StatObject:
    return s.StatObject(
        nested={k: stat_object_from_pb(v) for k, v in msg.nested.items()},
        attributes={k: stat_value_from_pb(v) for k, v in msg.attributes.items()},
    )


def stats_to_pb(groups: tuple[s.DeviceGroupStats, ...]) -> dpb.StatsResponse:
    out = dpb.StatsResponse()
    for group in groups:
        g = out.groups.add(vendor=group.vendor, type=group.type, name=group.name)
        for device_id, st in group.instance_stats.items():
            ts = Timestamp()
            ts.FromDatetime(st.timestamp.astimezone(UTC) if st.timestamp.tzinfo else st.timestamp)
            g.instance_stats[device_id].CopyFrom(
                dpb.DeviceStats(
                    summary=stat_value_to_pb(st.summary), stats=stat_object_to_pb(st.stats), timestamp=ts
                )
            )
    return out


def stats_from_pb(msg: dpb.StatsResponse) -> s.StatsResponse:
    return s.StatsResponse(
        groups=tuple(
            s.DeviceGroupStats(
                vendor=g.vendor,
                type=g.type,
                name=g.name,
                instance_stats={
                    k: s.DeviceStats(
                        summary=stat_value_from_pb(v.summary),
                        stats=stat_object_from_pb(v.stats),
                        timestamp=v.timestamp.ToDatetime(tzinfo=UTC),
                    )
                    for k, v in g.instance_stats.items()
                },
            )
            for g in msg.groups
        )
    )


# ---- reserve ----------------------------------------------------------------------------------


def reservation_to_pb(res: s.ContainerReservation) -> dpb.ReserveResponse:
    return dpb.ReserveResponse(
        container_res=dpb.ContainerReservation(
            envs=dict(res.envs),
            mounts=[
                dpb.Mount(task_path=m.task_path, host_path=m.host_path, read_only=m.read_only)
                for m in res.mounts
            ],
            devices=[
                dpb.DeviceSpec(task_path=d.task_path, host_path=d.host_path, permissions=d.cgroup_perms)
                for d in res.devices
            ],
        )
    )


def reservation_from_pb(msg: dpb.ReserveResponse) -> s.ContainerReservation:
    res = msg.container_res
    return s.ContainerReservation(
        envs=dict(res.envs),
        mounts=tuple(s.Mount(m.task_path, m.host_path, m.read_only) for m in res.mounts),
        devices=tuple(s.DeviceNode(d.task_path, d.host_path, d.permissions) for d in res.devices),
    )


# ---- config schema ----------------------------------------------------------------------------

_HCL_TYPES = {"string": "string", "integer": "number", "number": "number", "boolean": "bool"}


def _hcl_type(prop: Mapping[str, Any]) -> str:
    kind = prop.get("type")
    if kind == "array":
        items = prop.get("items")
        return f"list({_hcl_type(items) if isinstance(items, Mapping) else 'any'})"
    if kind == "object":
        return "map(any)"
    return _HCL_TYPES.get(str(kind), "any")


def schema_to_hcl(schema: Mapping[str, Any]) -> hpb.Spec:
    """A JSON-schema-like object (`DevicePlugin.config_schema`) as Nomad's HCL object spec."""
    required = set(schema.get("required", ()))
    spec = hpb.Spec(object=hpb.Object())
    for name, prop in dict(schema.get("properties", {})).items():
        prop = prop if isinstance(prop, Mapping) else {}
        attr = hpb.Spec(Attr=hpb.Attr(name=name, type=_hcl_type(prop), required=name in required))
        if prop.get("default") is not None:  # Nomad fills it in when the operator sets none
            literal = hpb.Spec(literal=hpb.Literal(value=json.dumps(prop["default"])))
            attr = hpb.Spec(default=hpb.Default(primary=attr, default=literal))
        spec.object.attributes[name].CopyFrom(attr)
    return spec


def hcl_to_rows(spec: hpb.Spec, prefix: str = "") -> list[dict[str, Any]]:
    """One row per attribute of an HCL spec (name, type, required), for display."""
    which = spec.WhichOneof("block")
    if which == "object":
        rows: list[dict[str, Any]] = []
        for name in sorted(spec.object.attributes):
            rows += hcl_to_rows(spec.object.attributes[name], f"{prefix}{name}")
        return rows
    if which == "Attr":
        attr = spec.Attr
        return [{"name": attr.name or prefix, "type": attr.type, "required": attr.required, "default": ""}]
    if which == "default":
        given = spec.default.default.literal.value if spec.default.default.HasField("literal") else ""
        rows = hcl_to_rows(spec.default.primary, prefix)
        return [{**row, "required": False, "default": given} for row in rows]
    if which == "block_value":
        return hcl_to_rows(spec.block_value.nested, f"{spec.block_value.name or prefix}.")
    return [{"name": prefix or "(spec)", "type": which or "empty", "required": False, "default": ""}]
