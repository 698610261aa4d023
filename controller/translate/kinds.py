"""The request kinds on the controller's API: each row of `plugins.base.kinds.KINDS` (name, domain
request and result types, plugin coroutine, whether it only reads) with what the controller adds:
how its oneof member is checked (`controller.api.checks`) and translated both ways, how its
response member says it failed, how success is read back out of it, and any role a request of the
kind needs beyond `topology` (`controller.security.authz`).

Validation (`controller.api.validate`), translation (`controller.translate`), the dispatcher's
supersede rule and the plugin call (`plugins.base.run_operation`) all look a kind up here, so a new
kind is its proto member, its row in `plugins.base.kinds`, its row here and its plugin coroutine.
`register` adds a kind at run time (`registered` for the length of a `with` block).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.api.checks import Checker
from controller.translate import _failures as fail
from controller.translate import _health as health
from controller.translate import _requests as req
from controller.translate import _responses as resp
from controller.translate._metrics import raw_metrics_to_proto
from plugins.base import RequestKind
from plugins.base.kinds import KINDS, Kind

_Resp = pb.DeviceControllerResponse


@dataclass(frozen=True)
class KindTranslation:
    """One request kind as the controller's API carries it (the member named `kind.name`)."""

    kind: Kind
    #: `check(checker, path, member)`: add each problem of the request member to the checker
    check: Callable[[Checker, str, Any], None]
    #: `request_from_proto(member, path)`: the domain request (raises `Untranslatable` naming a field)
    request_from_proto: Callable[[Any, str], Any]
    #: the request member of a domain request
    request_to_proto: Callable[[Any], Message]
    #: the response member of a domain result
    result_to_proto: Callable[[Any], Message]
    #: `result_from_proto(member, path)`: the domain result (raises ValueError naming a field)
    result_from_proto: Callable[[Any, str], Any]
    #: `failure(error, request_or_None)`: the response member of a failed request
    failure: Callable[[str, Any], Message]
    #: `success(member)`: whether the response member reports success, and its error text
    success: Callable[[Any], tuple[bool, str]]
    #: `role(member)`: a role the request needs beyond `SendDeviceRequest`'s `topology`, or None
    #: (`controller.security.authz`)
    role: Callable[[Any], str | None] = lambda member: None

    @property
    def name(self) -> str:
        return self.kind.name


_TRANSLATIONS: dict[str, KindTranslation] = {}
#: kinds whose plugin-facing row `register` added (and `unregister` removes)
_ADDED: set[str] = set()


def register(translation: KindTranslation) -> None:
    """Add a kind; its plugin-facing row joins `plugins.base.kinds.KINDS` unless it is there already
    (a plugin module that registers its own kind). Raises ValueError for a name already taken."""
    name = translation.name
    if name in _TRANSLATIONS:
        raise ValueError(f"request kind {name!r} already has a translation")
    if KINDS.get(name) is None:
        KINDS.register(translation.kind)
        _ADDED.add(name)
    elif KINDS[name] != translation.kind:
        raise ValueError(f"request kind {name!r} is registered with another row: {KINDS[name]}")
    _TRANSLATIONS[name] = translation


def unregister(name: str) -> None:
    """Remove a kind `register` added (its plugin-facing row too, unless it was there before)."""
    del _TRANSLATIONS[name]
    if name in _ADDED:
        _ADDED.discard(name)
        KINDS.unregister(name)


@contextlib.contextmanager
def registered(translation: KindTranslation) -> Iterator[KindTranslation]:
    """The kind registered for the length of a `with` block."""
    register(translation)
    try:
        yield translation
    finally:
        unregister(translation.name)


def translation_of(name: str) -> KindTranslation:
    """The translation of a kind name (a `RequestKind` is one). Raises KeyError for an unknown one."""
    found = _TRANSLATIONS.get(name)
    if found is None:
        raise KeyError(f"unknown request kind {str(name)!r} (known: {', '.join(_TRANSLATIONS)})")
    return found


def translations() -> tuple[KindTranslation, ...]:
    return tuple(_TRANSLATIONS.values())


# ---- the built-in kinds ------------------------------------------------------------------------


def _built_in(
    name: RequestKind,
    check: Callable[[Checker, str, Any], None],
    request: tuple[Callable[[Any, str], Any], Callable[[Any], Message]],
    result: tuple[Callable[[Any], Message], Callable[[Any, str], Any]],
    failure: Callable[[str, Any], Message],
    success: Callable[[Any], tuple[bool, str]] = fail.error_success,
    role: Callable[[Any], str | None] = lambda member: None,
) -> None:
    register(KindTranslation(KINDS[name], check, *request, *result, failure, success, role))


K = RequestKind
_ALLOCATION = (req.allocation_from_proto, req.allocation_to_proto)
_ALLOCATION_RESULT = (resp.allocation_result_to_proto, resp.allocation_result_from_proto)
_POLICY = (req.policy_change_from_proto, req.policy_change_to_proto)
_PROFILES = (req.profiles_from_proto, req.profiles_to_proto)
_PROFILES_RESULT = (resp.profiles_result_to_proto, resp.profiles_result_from_proto)
_EMPTY = (req.empty_from_proto, req.empty_to_proto)

for _name in (K.RESOURCE_GROUP_ACTIVATE, K.RESOURCE_GROUP_DEACTIVATE, K.RESOURCE_GROUP_UPDATE):
    _built_in(_name, Checker.allocation, _ALLOCATION, _ALLOCATION_RESULT, fail.allocation_failure)
for _name in (K.TOPOLOGY_ACTIVATE, K.TOPOLOGY_DEACTIVATE):
    _built_in(_name, Checker.policy_set, _POLICY, _ALLOCATION_RESULT, fail.allocation_failure)
_built_in(
    K.GPU_POLICIES_UPDATE,
    Checker.gpu_policies_set,
    (req.gpu_policies_from_proto, req.gpu_policies_to_proto),
    (resp.gpu_policies_result_to_proto, resp.gpu_policies_result_from_proto),
    fail.gpu_policies_failure,
    fail.gpu_policies_success,
)
for _name in (K.ENABLE_WORKLOAD_PROFILE, K.DISABLE_WORKLOAD_PROFILE, K.UPDATE_WORKLOAD_PROFILE):
    _built_in(
        _name, Checker.profiles, _PROFILES, _PROFILES_RESULT, fail.error_failure(_Resp.PowerProfileResponse)
    )
_built_in(
    K.PING,
    Checker.ping,
    (req.ping_from_proto, req.ping_to_proto),
    (resp.ping_result_to_proto, resp.ping_result_from_proto),
    fail.error_failure(_Resp.PingResponse),
)
_built_in(
    K.GPU_METRICS,
    Checker.gpu_metrics,
    (req.gpu_metrics_from_proto, req.gpu_metrics_to_proto),
    (resp.gpu_metrics_result_to_proto, resp.gpu_metrics_result_from_proto),
    fail.error_failure(_Resp.GPUMetricsResponse),
)
_built_in(
    K.RAW_METRICS,
    Checker.nothing,
    _EMPTY,
    (raw_metrics_to_proto, resp.raw_metrics_result_from_proto),
    fail.error_failure(_Resp.RawMetricsResponse),
)
_built_in(
    K.STD_METRICS,
    Checker.nothing,
    _EMPTY,
    (resp.std_metrics_result_to_proto, resp.std_metrics_result_from_proto),
    fail.error_failure(_Resp.StdMetricsResponse),
)
_built_in(
    K.MODIFY_ENTITY_MODEL,
    Checker.entity,
    (req.entity_from_proto, req.entity_to_proto),
    (resp.entity_result_to_proto, resp.entity_result_from_proto),
    fail.entity_failure,
    fail.entity_success,
)
_built_in(
    K.BMC_HEALTH,
    Checker.bmc_health,
    (req.health_query_from_proto, health.query_to_proto),
    (health.result_to_proto, health.result_from_proto),
    fail.error_failure(_Resp.BMCHealthResponse),
    # a write cycle needs `admin`, as StartWriteCycle does (one rule for both doors)
    role=lambda member: "admin" if health.wants_write_cycle(member) else None,
)
