"""Resource routing shared by all platform models.

A platform is a static table of `Route`s (shared by every BMC of that model) plus a factory for the
compact per-BMC state; resource documents are built on demand from that state, so a BMC costs only its
state, not its JSON. Templates use `{id}`-style parameters, and the template string is also the key of
the per-BMC call counters.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from bmcsim import _errors, _messages

if TYPE_CHECKING:
    from bmcsim._account_store import AccountStore
    from bmcsim._config import BmcConfig
    from bmcsim._sessions import SessionStore
    from bmcsim._state import Cap, PlatformState
    from bmcsim._stats import BmcStats
    from bmcsim._tasks import TaskStore

JsonDict = dict[str, Any]


@dataclass(frozen=True, slots=True)
class SimRequest:
    """What a resource handler sees of a request."""

    method: str
    path: str
    params: Mapping[str, str]
    body: Any = None
    #: the client's IP address as the server sees it (a session's `ClientOriginIPAddress`)
    client: str = ""


@dataclass(slots=True)
class Reply:
    """A handler's answer. With `revision` set, the reply gets an ETag (header and `@odata.etag`).

    `text` (with its `content_type`) is a non-JSON body, such as the XML `$metadata`.
    """

    status: int = 200
    body: JsonDict | None = None
    headers: dict[str, str] = field(default_factory=dict)
    revision: int | None = None
    text: str | None = None
    content_type: str = "application/json"


@dataclass(slots=True)
class Write:
    """A validated state change, returned by write handlers instead of applying it themselves.

    The BMC applies it now, or later through a task when asynchronous writes are on (`deferrable`), and
    arms the cap-revert fault on `caps`. Keeping validation and application apart is what lets one
    handler serve 200, 202 and "500 but applied" replies.
    """

    apply: Callable[[], None]
    caps: tuple[Cap, ...] = ()
    deferrable: bool = False
    #: "resource": reply with the resource after the change (PATCH); "success": Base.Success (actions)
    reply: Literal["resource", "success"] = "resource"


class Bmc(Protocol):
    """What the resource handlers use of a BMC (`_bmc.SimulatedBmc`, which routes to them: so they
    name this protocol, not the class)."""

    @property
    def index(self) -> int: ...

    @property
    def config(self) -> BmcConfig: ...

    @property
    def platform(self) -> Platform: ...

    @property
    def state(self) -> PlatformState: ...

    @property
    def sessions(self) -> SessionStore: ...

    @property
    def accounts(self) -> AccountStore: ...

    @property
    def stats(self) -> BmcStats: ...

    @property
    def tasks(self) -> TaskStore: ...

    @property
    def firmware_version(self) -> str: ...


Handler = Callable[[Bmc, SimRequest], "Reply | Write"]


@dataclass(frozen=True)
class Route:
    """One resource template and its method handlers."""

    template: str
    get: Handler | None = None
    patch: Handler | None = None
    post: Handler | None = None
    delete: Handler | None = None
    #: methods that need no authentication (service root, login)
    public: frozenset[str] = frozenset()

    def handler(self, method: str) -> Handler | None:
        """The handler for an HTTP method (HEAD is served by GET)."""
        return {
            "GET": self.get,
            "HEAD": self.get,
            "PATCH": self.patch,
            "POST": self.post,
            "DELETE": self.delete,
        }.get(method)

    def allowed(self) -> list[str]:
        """Methods for the `Allow` header."""
        names = [("GET", self.get), ("HEAD", self.get), ("PATCH", self.patch), ("POST", self.post)]
        names.append(("DELETE", self.delete))
        return [name for name, handler in names if handler is not None]


class Router:
    """Matches normalized request paths to routes: exact templates first, then parameterized ones."""

    def __init__(self, routes: Iterable[Route]) -> None:
        self._exact: dict[str, Route] = {}
        self._patterns: list[tuple[re.Pattern[str], Route]] = []
        for route in routes:
            if "{" in route.template:
                regex = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(route.template))
                self._patterns.append((re.compile(regex + "$"), route))
            elif route.template in self._exact:
                raise ValueError(f"duplicate route {route.template}")
            else:
                self._exact[route.template] = route

    def match(self, path: str) -> tuple[Route, dict[str, str]] | None:
        """The route and parameters for `path`, or None."""
        route = self._exact.get(path)
        if route is not None:
            return route, {}
        for pattern, candidate in self._patterns:
            found = pattern.match(path)
            if found:
                return candidate, found.groupdict()
        return None

    def templates(self) -> list[str]:
        """Every template, for documentation and tests."""
        return [*self._exact, *(route.template for _, route in self._patterns)]


def normalize_path(path: str) -> str:
    """`/redfish/v1/` and `/redfish/v1` are the same resource; trailing slashes are dropped."""
    stripped = path.rstrip("/")
    return stripped or "/"


@dataclass(frozen=True)
class Platform:
    """A simulated BMC model: its identity, resource table and state factory."""

    name: str
    #: the DPS topology model / inventory `model` string (e.g. "DGX_GB200")
    topology_model: str
    vendor: str
    product: str
    manager_id: str
    default_firmware: str
    router: Router
    make_state: Callable[[int], PlatformState]
    systems: tuple[str, ...] = ()
    chassis: tuple[str, ...] = ()
    #: FirmwareInventory members (the BMC firmware version is a readiness gate on NVIDIA platforms)
    firmware_inventory: tuple[str, ...] = ()
    description: str = ""


# --- small document helpers ---------------------------------------------------------------------------


def link(path: str) -> JsonDict:
    """`{"@odata.id": path}`."""
    return {"@odata.id": path}


def collection(path: str, odata_type: str, name: str, members: Iterable[str]) -> JsonDict:
    """A Redfish resource collection document."""
    items = [link(m) for m in members]
    return {
        "@odata.id": path,
        "@odata.type": odata_type,
        "Name": name,
        "Members": items,
        "Members@odata.count": len(items),
    }


def status_ok() -> JsonDict:
    """`Status` of a healthy, enabled resource."""
    return {"State": "Enabled", "Health": "OK"}


def require_object(body: Any) -> JsonDict:
    """The request body as a JSON object, or 400 MalformedJSON."""
    if not isinstance(body, dict):
        raise _errors.malformed_json()
    return body


def action_body(body: Any, action: str, allowed: Iterable[str] = ()) -> JsonDict:
    """Parameters of an action POST (empty body allowed); unknown parameters give 400."""
    params: JsonDict = {} if body is None else require_object(body)
    unknown = [key for key in params if key not in set(allowed)]
    if unknown:
        raise _errors.bad_request([_messages.action_parameter_unknown(action, key) for key in unknown])
    return params


def is_int(value: object) -> bool:
    """JSON integer (bool is not a number to a BMC)."""
    return isinstance(value, int) and not isinstance(value, bool)
