"""A stand-in Nomad client, written only from Nomad's device-plugin protocol and go-plugin's handshake.

It deliberately shares nothing with devicectl's own protocol code: the message types are built here
from the published package names, message names and field numbers (into a private descriptor pool),
and the RPCs are called by their full paths, so a wrong name or number in devicectl's .proto files
shows up as a failure here.
"""

from __future__ import annotations

import re
import subprocess
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, duration_pb2, message_factory, timestamp_pb2
from google.protobuf import wrappers_pb2 as _wrappers

# go-plugin handshake as Nomad configures it (hashicorp/nomad plugins/base/plugin.go)
COOKIE_KEY = "NOMAD_PLUGIN_MAGIC_COOKIE"
COOKIE_VALUE = "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255"
APP_PROTOCOL = "2"
DEVICE_API = "v0.1.0"

STRUCTS = "hashicorp.nomad.plugins.shared.structs"
DEVICE = "hashicorp.nomad.plugins.device"
BASE = "hashicorp.nomad.plugins.base.proto"
HCL = "hashicorp.nomad.plugins.shared.hclspec"

# "[repeated|oneof NAME] TYPE name = N"; TYPE is a scalar, a message name, or map<string,TYPE>
_SCHEMA: dict[str, dict[str, list[str]]] = {
    STRUCTS: {
        "Attribute": [
            "oneof value double float_val = 1",
            "oneof value int64 int_val = 2",
            "oneof value string string_val = 3",
            "oneof value bool bool_val = 4",
            "string unit = 5",
        ],
        "StatObject": ["map<string,StatObject> nested = 1", "map<string,StatValue> attributes = 2"],
        "StatValue": [
            ".google.protobuf.DoubleValue float_numerator_val = 1",
            ".google.protobuf.DoubleValue float_denominator_val = 2",
            ".google.protobuf.Int64Value int_numerator_val = 3",
            ".google.protobuf.Int64Value int_denominator_val = 4",
            ".google.protobuf.StringValue string_val = 5",
            ".google.protobuf.BoolValue bool_val = 6",
            "string unit = 7",
            "string desc = 8",
        ],
    },
    HCL: {
        "Spec": [
            "oneof block Object object = 1",
            "oneof block Attr Attr = 3",
            "oneof block Default default = 9",
            "oneof block Literal literal = 10",
        ],
        "Attr": ["string name = 1", "string type = 2", "bool required = 3"],
        "Object": ["map<string,Spec> attributes = 1"],
        "Default": ["Spec primary = 1", "Spec default = 2"],
        "Literal": ["string value = 1"],
    },
    DEVICE: {
        "FingerprintRequest": [],
        "FingerprintResponse": ["repeated DeviceGroup device_group = 1"],
        "DeviceGroup": [
            "string vendor = 1",
            "string device_type = 2",
            "string device_name = 3",
            "repeated DetectedDevice devices = 4",
            f"map<string,.{STRUCTS}.Attribute> attributes = 5",
        ],
        "DetectedDevice": [
            "string ID = 1",
            "bool healthy = 2",
            "string health_description = 3",
            "DeviceLocality hw_locality = 4",
        ],
        "DeviceLocality": ["string pci_bus_id = 1"],
        "ReserveRequest": ["repeated string device_ids = 1"],
        "ReserveResponse": ["ContainerReservation container_res = 1"],
        "ContainerReservation": [
            "map<string,string> envs = 1",
            "repeated Mount mounts = 2",
            "repeated DeviceSpec devices = 3",
        ],
        "Mount": ["string task_path = 1", "string host_path = 2", "bool read_only = 3"],
        "DeviceSpec": ["string task_path = 1", "string host_path = 2", "string permissions = 3"],
        "StatsRequest": [".google.protobuf.Duration collection_interval = 1"],
        "StatsResponse": ["repeated DeviceGroupStats groups = 1"],
        "DeviceGroupStats": [
            "string vendor = 1",
            "string type = 2",
            "string name = 3",
            "map<string,DeviceStats> instance_stats = 4",
        ],
        "DeviceStats": [
            f".{STRUCTS}.StatValue summary = 1",
            f".{STRUCTS}.StatObject stats = 2",
            ".google.protobuf.Timestamp timestamp = 3",
        ],
    },
    BASE: {
        "PluginInfoRequest": [],
        "PluginInfoResponse": [
            "int32 type = 1",  # enum PluginType on the wire: DEVICE = 3
            "repeated string plugin_api_versions = 2",
            "string plugin_version = 3",
            "string name = 4",
        ],
        "ConfigSchemaRequest": [],
        "ConfigSchemaResponse": [f".{HCL}.Spec spec = 1"],
        "SetConfigRequest": ["bytes msgpack_config = 1", "string plugin_api_version = 3"],
        "SetConfigResponse": [],
    },
}
_SCALARS = {
    "double": descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE,
    "int64": descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
    "int32": descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
    "string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
    "bool": descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
    "bytes": descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
}
_LINE = re.compile(r"^(?:(repeated) |oneof (\w+) )?(\S+) (\w+) = (\d+)$")
F = descriptor_pb2.FieldDescriptorProto


def _field(msg: Any, package: str, line: str, oneofs: dict[str, int]) -> None:
    m = _LINE.match(line)
    assert m, line
    repeated, oneof, kind, name, number = m.groups()
    field = msg.field.add(
        name=name, number=int(number), label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL
    )
    if oneof:
        if oneof not in oneofs:
            oneofs[oneof] = len(msg.oneof_decl)
            msg.oneof_decl.add(name=oneof)
        field.oneof_index = oneofs[oneof]
    if kind.startswith("map<"):
        key, value = kind[4:-1].split(",")
        entry = msg.nested_type.add(name=name.title().replace("_", "") + "Entry")
        entry.options.map_entry = True
        _field(entry, package, f"{key} key = 1", {})
        _field(entry, package, f"{value} value = 2", {})
        field.label, field.type = F.LABEL_REPEATED, F.TYPE_MESSAGE
        field.type_name = f".{package}.{msg.name}.{entry.name}"
    elif kind in _SCALARS:
        field.type = _SCALARS[kind]
    else:
        field.type = F.TYPE_MESSAGE
        field.type_name = kind if kind.startswith(".") else f".{package}.{kind}"


def _classes() -> dict[str, Any]:
    pool = descriptor_pool.DescriptorPool()
    for known in (_wrappers, duration_pb2, timestamp_pb2):
        proto = descriptor_pb2.FileDescriptorProto()
        known.DESCRIPTOR.CopyToProto(proto)
        pool.Add(proto)
    deps = [f.name for f in (_wrappers.DESCRIPTOR, duration_pb2.DESCRIPTOR, timestamp_pb2.DESCRIPTOR)]
    for package in (STRUCTS, HCL, DEVICE, BASE):  # in dependency order
        file = descriptor_pb2.FileDescriptorProto(name=f"nomad-client/{package}.proto", package=package)
        file.syntax = "proto3"
        file.dependency.extend(deps)
        for name, lines in _SCHEMA[package].items():
            msg = file.message_type.add(name=name)
            oneofs: dict[str, int] = {}
            for line in lines:
                _field(msg, package, line, oneofs)
        pool.Add(file)
        deps.append(file.name)
    return {
        f"{p}.{n}": message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{p}.{n}"))
        for p, names in _SCHEMA.items()
        for n in names
    }


M = _classes()


def msg(package: str, name: str, **fields: Any) -> Any:
    return M[f"{package}.{name}"](**fields)


def unary(channel: grpc.Channel, path: str, request: Any, reply: str) -> Any:
    call = channel.unary_unary(
        path, request_serializer=type(request).SerializeToString, response_deserializer=M[reply].FromString
    )
    return call(request, timeout=30)


def stream(channel: grpc.Channel, path: str, request: Any, reply: str) -> Any:
    call = channel.unary_stream(
        path, request_serializer=type(request).SerializeToString, response_deserializer=M[reply].FromString
    )
    return call(request, timeout=60)


def handshake(proc: subprocess.Popen[str]) -> str:
    """go-plugin: one stdout line CORE|APP|NETWORK|ADDR|PROTOCOL; returns a gRPC target."""
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    core, app, network, addr, protocol = line.split("|")[:5]
    assert (core, app, protocol) == ("1", APP_PROTOCOL, "grpc"), line
    assert network in ("unix", "tcp"), line
    return f"unix:{addr}" if network == "unix" else addr
