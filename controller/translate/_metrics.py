"""Metrics members of `DeviceControllerResponse` <-> domain metrics: standard node metrics
(energies sent in joules, read back from any unit), raw metrics (a packed Struct both ways)."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from google.protobuf import struct_pb2
from google.protobuf.message import DecodeError

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import metrics_pb2
from controller.translate._json import dict_to_struct, struct_to_dict
from controller.translate._time import datetime_to_timestamp, timestamp_to_datetime
from plugins.base import ComponentMetrics, NodeMetrics, RawMetricsResult

_Resp = pb.DeviceControllerResponse

#: the unit `StdMetricsResponse` energies are sent in
ENERGY_UNIT = "Joules"
#: joules per unit, for reading responses that another sender wrote in a different unit
_JOULES_PER: Mapping[str, float] = {
    "": 1.0,
    "joules": 1.0,
    "j": 1.0,
    "kilojoules": 1e3,
    "kj": 1e3,
    "wh": 3600.0,
    "kwh": 3.6e6,
}


def component_metrics_to_proto(item: ComponentMetrics) -> metrics_pb2.DeviceMetrics:
    return metrics_pb2.DeviceMetrics(
        id=item.id,
        power_usage=item.power_watts,
        energy_usage=item.energy_joules,
        energy_usage_unit=ENERGY_UNIT,
        set_limit=item.limit_watts,
        max_limit=item.max_watts,
        min_limit=item.min_watts,
        temperature_celsius=item.temperature_celsius,
    )


def node_metrics_to_proto(metrics: NodeMetrics) -> metrics_pb2.NodeMetricsResponse:
    msg = metrics_pb2.NodeMetricsResponse(
        name=metrics.name,
        num_gpus=len(metrics.gpus),
        num_cpus=len(metrics.cpus),
        num_memory_units=metrics.memory_units,
        power_usage=metrics.power_watts,
        gpus=[component_metrics_to_proto(item) for item in metrics.gpus],
        cpus=[component_metrics_to_proto(item) for item in metrics.cpus],
    )
    if metrics.sampled_at is not None:
        msg.sampled_at.CopyFrom(datetime_to_timestamp(metrics.sampled_at))
    return msg


def raw_metrics_to_proto(result: RawMetricsResult) -> _Resp.RawMetricsResponse:
    msg = _Resp.RawMetricsResponse(success=result.ok, error=result.error)
    if result.ok or result.documents:
        # the documents always travel as a Struct: the receiver needs no device-specific types
        msg.raw_metrics.Pack(dict_to_struct(result.documents, "raw_metrics"))
    return msg


def _joules(value: float, unit: str, field: str) -> float:
    try:
        return value * _JOULES_PER[unit.strip().lower()]
    except KeyError:
        raise ValueError(f"{field}: unknown energy unit {unit!r}") from None


def _component_metrics_from_proto(msg: metrics_pb2.DeviceMetrics, field: str) -> ComponentMetrics:
    return ComponentMetrics(
        id=msg.id,
        power_watts=msg.power_usage,
        energy_joules=_joules(msg.energy_usage, msg.energy_usage_unit, f"{field}.energy_usage_unit"),
        limit_watts=msg.set_limit,
        min_watts=msg.min_limit,
        max_watts=msg.max_limit,
        temperature_celsius=msg.temperature_celsius,
    )


def node_metrics_from_proto(msg: metrics_pb2.NodeMetricsResponse, field: str) -> NodeMetrics:
    # num_gpus / num_cpus are derived from the lists on the way out, so the lists are the truth
    return NodeMetrics(
        name=msg.name,
        power_watts=msg.power_usage,
        gpus=tuple(_component_metrics_from_proto(m, f"{field}.gpus[{i}]") for i, m in enumerate(msg.gpus)),
        cpus=tuple(_component_metrics_from_proto(m, f"{field}.cpus[{i}]") for i, m in enumerate(msg.cpus)),
        memory_units=msg.num_memory_units,
        sampled_at=timestamp_to_datetime(msg.sampled_at) if msg.HasField("sampled_at") else None,
    )


def raw_documents(msg: _Resp.RawMetricsResponse, field: str) -> dict[str, Any]:
    if not msg.HasField("raw_metrics"):
        return {}
    if msg.raw_metrics.Is(struct_pb2.Struct.DESCRIPTOR):
        struct = struct_pb2.Struct()
        try:
            msg.raw_metrics.Unpack(struct)
        except DecodeError as exc:
            raise ValueError(f"{field}: packed Struct does not parse: {exc}") from None
        return struct_to_dict(struct, field)
    # another sender's message type: keep it renderable rather than failing the whole response
    return {
        "@type": msg.raw_metrics.type_url,
        "value": base64.b64encode(msg.raw_metrics.value).decode("ascii"),
    }
