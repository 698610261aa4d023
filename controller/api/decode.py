"""Undecodable requests are answered `INVALID_ARGUMENT`, with one log line and no traceback.

grpc decodes a request before any servicer code runs, and a deserializer that raises makes the
call fail with `UNKNOWN` and a traceback in the log. `DecodeGuard` wraps every method's request
deserializer so a decode failure becomes a marker value, and the method's behaviour answers the
marker with `INVALID_ARGUMENT` before the servicer (or anything else) sees it. It covers every
service on the server, present and future.

The admin service's requests are also refused when a string field holds a NUL: their strings
(device ids, request ids, kinds, page positions, verification ids) go into SQL as they are, and
PostgreSQL refuses a NUL in text with an error the handler would not expect. No admin request has
a use for one. (`SendDeviceRequest`'s strings are checked field by field by `validate`.)
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from controller.observability.logs import clip

log = logging.getLogger(__name__)


class Undecodable:
    """Stands in for a request whose bytes could not be decoded."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


#: the service whose request strings go into SQL as they are (see the module docstring)
ADMIN_SERVICE = "/devicecontroller.v1.DeviceControllerAdmin/"


def nul_field(message: Message, path: str = "") -> str:
    """The path of the first string field (nested and repeated ones too) holding a NUL; '' if none."""
    for field, value in message.ListFields():
        where = f"{path}.{field.name}" if path else field.name
        repeated = field.is_repeated
        values = value if repeated else (value,)
        for index, item in enumerate(values):
            at = f"{where}[{index}]" if repeated else where
            if field.type == FieldDescriptor.TYPE_STRING and "\x00" in item:
                return at
            if isinstance(item, Message):
                found = nul_field(item, at)
                if found:
                    return found
    return ""


def _guarded_deserializer(method: str, inner: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    admin = method.startswith(ADMIN_SERVICE)

    def deserialize(data: bytes) -> Any:
        try:
            message = inner(data)
        except Exception as exc:  # DecodeError, or anything a hostile payload provokes
            # the library's message names the type, not the bytes: safe to echo, but keep it one line
            detail = clip(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, 160)
            return Undecodable(
                f"{method}: request is not a valid protobuf message ({len(data)} bytes): {detail}"
            )
        if admin and isinstance(message, Message):
            field = nul_field(message)
            if field:
                return Undecodable(f"{method}: {clip(field, 120)}: a NUL character is never part of a value")
        return message

    return deserialize


async def _refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
    if isinstance(request, Undecodable):
        log.info("rejected: %s", request.reason)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)


def guard(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    """`handler` with a deserializer that never raises and behaviour that refuses undecodable input."""
    if handler.request_deserializer is None:
        return handler
    deserializer = _guarded_deserializer(method, handler.request_deserializer)
    if handler.unary_unary is not None:
        inner_uu = handler.unary_unary

        async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await _refuse(request, context)
            return await inner_uu(request, context)

        return grpc.unary_unary_rpc_method_handler(unary_unary, deserializer, handler.response_serializer)
    if handler.unary_stream is not None:
        inner_us = handler.unary_stream
        if inspect.iscoroutinefunction(inner_us):  # it writes with context.write (health's Watch)

            async def unary_writer(request: Any, context: grpc.aio.ServicerContext) -> None:
                await _refuse(request, context)
                await inner_us(request, context)

            return grpc.unary_stream_rpc_method_handler(
                unary_writer, deserializer, handler.response_serializer
            )

        async def unary_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            await _refuse(request, context)
            async for item in inner_us(request, context):
                yield item

        return grpc.unary_stream_rpc_method_handler(unary_stream, deserializer, handler.response_serializer)

    async def checked(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        async for request in requests:
            await _refuse(request, context)
            yield request

    if handler.stream_unary is not None:
        inner_su = handler.stream_unary

        async def stream_unary(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
            return await inner_su(checked(requests, context), context)

        return grpc.stream_unary_rpc_method_handler(stream_unary, deserializer, handler.response_serializer)
    inner_ss = handler.stream_stream
    if inspect.iscoroutinefunction(inner_ss):  # it writes with context.write

        async def stream_writer(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> None:
            await inner_ss(checked(requests, context), context)

        return grpc.stream_stream_rpc_method_handler(stream_writer, deserializer, handler.response_serializer)

    async def stream_stream(
        requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        async for item in inner_ss(checked(requests, context), context):
            yield item

    return grpc.stream_stream_rpc_method_handler(stream_stream, deserializer, handler.response_serializer)


class DecodeGuard(grpc.aio.ServerInterceptor):
    """Applies `guard` to every method the server serves."""

    def __init__(self) -> None:
        # NOTE: a method's handler is the same object on every call: it is guarded once (per
        # call, building the closures and the handler was a measurable share of a call's cost)
        self._guarded: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method
        cached = self._guarded.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        guarded = guard(handler, method)
        self._guarded[method] = (handler, guarded)
        return guarded
