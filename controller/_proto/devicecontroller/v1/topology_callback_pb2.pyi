from google.protobuf import empty_pb2 as _empty_pb2
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as _devicecontroller_pb2
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor
