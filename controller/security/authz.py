"""Roles from client-certificate identities, enforced per RPC by a server interceptor.

A verified client certificate's identities are its subject CN and every subject-alternative name.
The operator maps identities to roles (`roles` setting): `topology` may call SendDeviceRequest
(a `bmc_health` request asking for a write cycle needs `admin` too, as StartWriteCycle does),
`operator` the admin API's reads (Get*, List*, Wait*), read-only readiness verifications
(StartVerify) and server reflection, `admin` everything an
operator may plus the admin API's writes. Health is open to every client. Anything else is refused
with PERMISSION_DENIED and a log line naming the identity. `*` as an identity matches any verified
certificate.

Without client-certificate verification (no client CA) there is no identity to check: every call is
allowed, as before roles existed; that is only acceptable on loopback or behind another gate (see
docs/security.md).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import grpc

from controller.security.tls import is_loopback
from controller.translate.kinds import translation_of

if TYPE_CHECKING:
    from controller.config import Settings

log = logging.getLogger(__name__)

ROLES = ("topology", "operator", "admin")
ANY_IDENTITY = "*"

_CONTROLLER = "/devicecontroller.v1.DeviceController/"
_ADMIN = "/devicecontroller.v1.DeviceControllerAdmin/"
_REFLECTION = ("/grpc.reflection.v1alpha.ServerReflection/", "/grpc.reflection.v1.ServerReflection/")
_HEALTH = "/grpc.health.v1.Health/"
_READ_PREFIXES = ("Get", "List", "Wait", "Watch")
#: admin writes an operator may call: a read-only readiness verification (its write cycle: admin)
_OPERATOR_WRITES = frozenset({"StartVerify"})


def parse_roles(text: str | Mapping[str, Any]) -> dict[str, frozenset[str]]:
    """`identity=role[+role],...` (or a TOML table identity -> role or [roles]) as a mapping.

    Raises:
        ValueError: an entry without `=`, or an unknown role (the message lists the known ones).
    """
    pairs: list[tuple[str, list[str]]] = []
    if isinstance(text, Mapping):
        for key, value in text.items():
            roles = [str(v) for v in value] if isinstance(value, list | tuple) else str(value).split("+")
            pairs.append((str(key), roles))
    else:
        for item in text.split(","):
            if not item.strip():
                continue
            identity, sep, roles_text = item.partition("=")
            if not sep or not identity.strip():
                raise ValueError(f"roles: {item.strip()!r} is not identity=role")
            pairs.append((identity, roles_text.split("+")))
    out: dict[str, frozenset[str]] = {}
    for identity, roles in pairs:
        clean = {r.strip() for r in roles if r.strip()}
        unknown = sorted(clean - set(ROLES))
        if unknown or not clean:
            raise ValueError(
                f"roles: identity {identity.strip()!r} has unknown role(s) {', '.join(unknown) or '(none)'}"
                f" (known: {', '.join(ROLES)})"
            )
        out[identity.strip()] = out.get(identity.strip(), frozenset()) | frozenset(clean)
    return out


def required_role(method: str) -> str | None:
    """The role a full method name needs; None for open methods; "" when no role may call it."""
    if method.startswith(_HEALTH):
        return None
    if method.startswith(_CONTROLLER):
        return "topology" if method == _CONTROLLER + "SendDeviceRequest" else ""
    if method.startswith(_ADMIN):
        name = method.removeprefix(_ADMIN)
        return "operator" if name.startswith(_READ_PREFIXES) or name in _OPERATOR_WRITES else "admin"
    if method.startswith(_REFLECTION):
        return "operator"
    return ""


def required_for_request(method: str, request: Any) -> str | None:
    """A role the call's content needs beyond its method's: its kind's row says (a `bmc_health`
    request that asks for a write cycle needs `admin`, as StartWriteCycle does: one rule for both
    doors); None otherwise."""
    if method != _CONTROLLER + "SendDeviceRequest":
        return None
    try:
        member = request.WhichOneof("request")
        return translation_of(member).role(getattr(request, member)) if member else None
    except (AttributeError, ValueError, KeyError):
        return None


def allows(roles: frozenset[str], needed: str) -> bool:
    if not needed:
        return False
    return needed in roles or (needed == "operator" and "admin" in roles)


def identities(auth: Mapping[str, list[bytes]]) -> list[str]:
    """The verified peer's CN and SANs, from grpc's auth context."""
    names: list[str] = []
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        for value in auth.get(key, ()):
            name = value.decode(errors="replace")
            if name not in names:
                names.append(name)
    return names


class RoleInterceptor(grpc.aio.ServerInterceptor):
    """Checks each call's certificate identities against the method's required role."""

    def __init__(self, roles: Mapping[str, frozenset[str]]) -> None:
        self._roles = dict(roles)

    def roles_of(self, names: list[str]) -> frozenset[str]:
        found: frozenset[str] = self._roles.get(ANY_IDENTITY, frozenset()) if names else frozenset()
        for name in names:
            found |= self._roles.get(name, frozenset())
        return found

    def denial(self, method: str, context: grpc.aio.ServicerContext, request: Any = None) -> str | None:
        """None when the call may proceed, else the reason (already logged)."""
        needed = required_role(method)
        if needed is None:
            return None
        names = identities(context.auth_context())
        roles = self.roles_of(names)
        who = ", ".join(names) if names else "no client certificate"
        if allows(roles, needed):
            extra = required_for_request(method, request) if request is not None else None
            if extra is None or allows(roles, extra):
                return None
            reason = f"{method}: {who} may not ask for a bmc_health write cycle (needs role {extra})"
            log.warning("permission denied: %s (peer %s)", reason, context.peer())
            return reason
        reason = f"{method}: {who} may not call this (needs role {needed or 'none can'})"
        log.warning("permission denied: %s (peer %s)", reason, context.peer())
        return reason

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or required_role(handler_call_details.method) is None:
            return handler
        return _guarded(handler, handler_call_details.method, self)


def _guarded(handler: grpc.RpcMethodHandler, method: str, guard: RoleInterceptor) -> grpc.RpcMethodHandler:
    # The peer's certificate is only visible on the call's context, so the check wraps the behaviour.
    async def refuse(context: grpc.aio.ServicerContext, request: Any = None) -> None:
        reason = guard.denial(method, context, request)
        if reason is not None:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, reason)

    if handler.unary_unary is not None:
        inner_uu = handler.unary_unary

        async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await refuse(context, request)
            return await inner_uu(request, context)

        return grpc.unary_unary_rpc_method_handler(
            unary_unary, handler.request_deserializer, handler.response_serializer
        )
    if handler.unary_stream is not None:
        inner_us = handler.unary_stream
        if inspect.iscoroutinefunction(inner_us):  # it writes with context.write (health's Watch)

            async def unary_writer(request: Any, context: grpc.aio.ServicerContext) -> None:
                await refuse(context)
                await inner_us(request, context)

            return grpc.unary_stream_rpc_method_handler(
                unary_writer, handler.request_deserializer, handler.response_serializer
            )

        async def unary_stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await refuse(context)
            async for item in inner_us(request, context):
                yield item

        return grpc.unary_stream_rpc_method_handler(
            unary_stream, handler.request_deserializer, handler.response_serializer
        )
    if handler.stream_unary is not None:
        inner_su = handler.stream_unary

        async def stream_unary(requests: Any, context: grpc.aio.ServicerContext) -> Any:
            await refuse(context)
            return await inner_su(requests, context)

        return grpc.stream_unary_rpc_method_handler(
            stream_unary, handler.request_deserializer, handler.response_serializer
        )
    inner_ss = handler.stream_stream
    if inspect.iscoroutinefunction(inner_ss):  # it writes with context.write

        async def stream_writer(requests: Any, context: grpc.aio.ServicerContext) -> None:
            await refuse(context)
            await inner_ss(requests, context)

        return grpc.stream_stream_rpc_method_handler(
            stream_writer, handler.request_deserializer, handler.response_serializer
        )

    async def stream_stream(requests: Any, context: grpc.aio.ServicerContext) -> Any:
        await refuse(context)
        async for item in inner_ss(requests, context):
            yield item

    return grpc.stream_stream_rpc_method_handler(
        stream_stream, handler.request_deserializer, handler.response_serializer
    )


def server_interceptors(settings: Settings) -> list[grpc.aio.ServerInterceptor]:
    """The role interceptor when mutual TLS is on; validates the role settings (ValueError)."""
    roles = parse_roles(settings.roles)
    if not settings.tls_client_ca:
        if roles:
            raise ValueError("roles are given but tls_client_ca is not: roles need client certificates")
        if settings.tls_cert and not is_loopback(settings.listen):
            log.warning(
                "TLS without client certificates on %s: any client that reaches it may call every "
                "method (set tls_client_ca and roles)",
                settings.listen,
            )
        return []
    if not roles:
        raise ValueError(
            "tls_client_ca is set but no roles are: map certificate identities to roles, e.g. "
            'roles = "topology-service=topology,ops=operator,alice=admin"'
        )
    return [RoleInterceptor(roles)]
