"""One simulated BMC: its listening socket, request pipeline and per-BMC knobs.

Pipeline of every request: count it, apply the configured latency, inject a front-end fault (hang, reset,
500, 503), refuse an unsupported OData version or `$` query, authenticate (session token or Basic), route,
check the account's role, inject an NVIDIA busy error, check `If-Match`,
run the resource handler, apply its write now or through a task, then optionally turn the reply into an
NVIDIA "timeout but applied" error or truncated JSON, or hold it back (`late-reply`).
"""

from __future__ import annotations

import asyncio
import json
import math
import secrets
import ssl
import zlib
from collections.abc import Callable
from typing import Any

from aiohttp import web

from bmcsim import _errors, _messages, _protocol
from bmcsim._account_store import AccountStore
from bmcsim._accounts import authorize
from bmcsim._bmcweb import RETRY_AFTER, allowed, body_etag, forbidden, if_match_ok
from bmcsim._config import BEHAVIOUR, BmcConfig, checked
from bmcsim._faults import PRE_AUTH_MODES, FaultMode, Faults, reset_connection
from bmcsim._http import BmcHttpServer, read_json
from bmcsim._platforms import get_platform
from bmcsim._routing import Reply, Route, SimRequest, Write, normalize_path
from bmcsim._sessions import SessionStore
from bmcsim._stats import UNMATCHED, BmcStats
from bmcsim._tasks import Task, TaskStore
from bmcsim.tls import compact_tls_factory

_BODY_METHODS = frozenset({"PATCH", "POST", "PUT", "DELETE"})
#: faults whose write lands while the BMC answers that it timed out inside, and the answer
_TIMED_OUT_INSIDE: dict[FaultMode, Callable[[], _errors.RedfishError]] = {
    FaultMode.NVIDIA_TIMEOUT: _errors.nvidia_timeout,
    FaultMode.OPERATION_TIMEOUT: _errors.operation_timeout,
}


class SimulatedBmc:
    """A simulated BMC listening on its own HTTPS port.

    Attributes:
        index: position in the fleet (also seeds the readings).
        config: the `BmcConfig`.
        state: the model's state (`state.caps[name].set_point`, profiles on GB200).
        stats: `BmcStats` counters.
        faults: `Faults` settings, changeable at any time.
        sessions: the `SessionStore`.
        tasks: the `TaskStore`.
    """

    def __init__(self, index: int, config: BmcConfig, *, host: str = "127.0.0.1") -> None:
        self.index = index
        self.config = config
        self.platform = get_platform(config.model)
        self.state = self.platform.make_state(index)
        self.sessions = SessionStore(
            config.username, config.password, limit=config.session_limit, timeout=config.session_timeout
        )
        self.accounts: AccountStore = self.sessions.accounts
        self.stats = BmcStats(open_sessions=self.sessions.__len__)
        self.faults = Faults()
        self.tasks = TaskStore()
        self.host = host
        self.port = 0
        # ETags differ between BMCs and between runs, as they do after a BMC reboot
        self._etag_salt = secrets.randbits(32)
        self._server: asyncio.Server | None = None
        self._web: BmcHttpServer | None = None
        self._timers: set[asyncio.TimerHandle] = set()

    # --- identity and knobs ----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL, e.g. `https://127.0.0.1:40001`."""
        return f"https://{self.host}:{self.port}"

    @property
    def username(self) -> str:
        """The BMC account name."""
        return self.config.username

    @property
    def password(self) -> str:
        """The BMC account password."""
        return self.config.password

    @property
    def model(self) -> str:
        """The topology model string for inventories (e.g. "DGX_GB200")."""
        return self.platform.topology_model

    @property
    def firmware_version(self) -> str:
        """The BMC firmware version it reports."""
        return self.config.firmware_version or self.platform.default_firmware

    @property
    def latency(self) -> float:
        """Seconds added to every request."""
        return self.config.latency

    @latency.setter
    def latency(self, value: float) -> None:
        self.config.latency = max(0.0, float(value))

    def configure(self, **settings: Any) -> None:
        """Change runtime settings: latency, async_writes, task_delay, session_limit, session_timeout."""
        for key, value in settings.items():
            if key == "latency":
                self.latency = value
            elif key == "async_writes":
                self.config.async_writes = bool(value)
            elif key == "task_delay":
                self.config.task_delay = max(0.0, float(value))
            elif key == "session_limit":
                self.config.session_limit = self.sessions.limit = int(value)
            elif key == "session_timeout":
                self.config.session_timeout = self.sessions.timeout = float(value)
            elif key in BEHAVIOUR:
                setattr(self.config, key, checked(key, value))
            else:
                raise ValueError(f"unknown setting {key!r}")

    def expire_sessions(self) -> int:
        """Invalidate every Redfish session at once; clients get 401 and must log in again."""
        expired = self.sessions.expire_all()
        self.stats.sessions_expired += expired
        return expired

    def describe(self) -> dict[str, Any]:
        """JSON-friendly identity and settings (no password)."""
        return {
            "index": self.index,
            "url": self.url,
            "port": self.port,
            "platform": self.platform.name,
            "model": self.model,
            "username": self.username,
            "firmware_version": self.firmware_version,
            "latency": self.config.latency,
            "async_writes": self.config.async_writes,
            "task_delay": self.config.task_delay,
            "session_limit": self.sessions.limit,
            "session_timeout": self.sessions.timeout,
        }

    # --- lifecycle -------------------------------------------------------------------------------------

    async def start(self, ssl_context: ssl.SSLContext, port: int = 0) -> None:
        """Listen on `host:port` (0 picks a free port) with TLS."""
        loop = asyncio.get_running_loop()
        web_server = self._web = BmcHttpServer(self.handle, self.stats)
        self._server = await loop.create_server(
            compact_tls_factory(loop, web_server, ssl_context),
            self.host,
            port,
            reuse_address=True,
            backlog=256,
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening, cut open connections and cancel pending tasks and reverts."""
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        if self._server is not None:
            self._server.close()
        if self._web is not None:
            # short grace: hung (fault-injected) handlers are cancelled and unanswered TLS closes
            # aborted rather than awaited; every connection's socket is closed when this returns
            await self._web.close_all(grace=0.05)
        if self._server is not None:
            await self._server.wait_closed()
        self._server = None
        self._web = None

    # --- request pipeline ------------------------------------------------------------------------------

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """aiohttp entry point for every request to this BMC."""
        method = request.method
        path = normalize_path(request.path)
        matched = self.platform.router.match(path)
        # the session the token names identifies the client (each controller logs in on its own)
        token = request.headers.get("X-Auth-Token")
        session = self.sessions.id_of(token) if token else None
        template = matched[0].template if matched else UNMATCHED
        self.stats.request_started(method, template, session)
        if not token and request.headers.get("Authorization", "")[:6].lower() == "basic ":
            self.stats.basic_auth_calls[(method, template)] += 1
        status: int | None = None
        try:
            response, status = await self._process(request, method, path, matched)
            return response
        finally:
            self.stats.request_finished(status, session)

    async def _process(
        self,
        request: web.BaseRequest,
        method: str,
        path: str,
        matched: tuple[Route, dict[str, str]] | None,
    ) -> tuple[web.StreamResponse, int | None]:
        if self.config.latency > 0:
            await asyncio.sleep(self.config.latency)
        fault = self.faults.pending(method, path)
        # the settings of the fault that hit this request: firing it may switch to its `then`
        hang, retry_after = self.faults.hang_seconds, self.faults.retry_after
        if fault in PRE_AUTH_MODES:
            self._fault_fired(fault)
            return await self._transport_fault(request, fault, hang, retry_after)
        route, params = matched if matched else (None, {})
        try:
            if self.config.allow_list is not None and not allowed(self.config.allow_list, method, path):
                raise forbidden(method, path)
            _protocol.check_request(method, request.headers, request.query)
            if route is None or method not in route.public:
                username = self._authenticate(request)
                authorize(self, username, method, path)
            if route is None:
                raise _errors.resource_not_found(path)
            if fault is FaultMode.NOT_FOUND:
                self._fault_fired(fault)
                raise _errors.resource_not_found(path)
            handler = route.handler(method)
            if handler is None:
                raise _errors.method_not_allowed(method, route.allowed())
            body = await read_json(request) if method in _BODY_METHODS else None
            if fault is FaultMode.NVIDIA_BUSY:
                self._fault_fired(fault)
                raise _errors.nvidia_busy()
            req = SimRequest(method, path, params, body, request.remote or "")
            if method in ("PATCH", "PUT") and "If-Match" in request.headers:
                self._check_if_match(route, req, request.headers["If-Match"])
            result = handler(self, req)
            force_sync = fault in _TIMED_OUT_INSIDE
            reply = self._perform(route, req, result, force_sync) if isinstance(result, Write) else result
            if fault in _TIMED_OUT_INSIDE and 200 <= reply.status < 300:
                self._fault_fired(fault)
                raise _TIMED_OUT_INSIDE[fault]()
        except _errors.RedfishError as err:
            reply = Reply(status=err.status, body=err.body, headers=err.headers)
        mangle = fault is FaultMode.INVALID_JSON and reply.body is not None
        if mangle:
            self._fault_fired(fault)
        if fault is FaultMode.LATE_REPLY:  # processed (a write has landed); the answer comes late
            self._fault_fired(fault)
            await asyncio.sleep(hang)
        _protocol.add_headers(method, reply, route.allowed() if route else None, reply.headers)
        return self._render(method, path, reply, mangle), reply.status

    def _authenticate(self, request: web.BaseRequest) -> str:
        """The account name of the request's session or Basic credentials; 401 without one."""
        token = request.headers.get("X-Auth-Token")
        if token:
            session = self.sessions.touch(token)
            if session is None:
                raise _errors.no_valid_session()
            return session.username
        authorization = request.headers.get("Authorization", "")
        if authorization[:6].lower() == "basic ":
            user = self.sessions.basic_user(authorization)
            if user is not None:
                return user
        raise _errors.no_valid_session()

    @property
    def bmcweb(self) -> bool:
        """Whether this BMC follows the `bmcweb` behaviour profile."""
        return self.config.profile == "bmcweb"

    def _check_if_match(self, route: Route, req: SimRequest, header: str) -> None:
        if self.bmcweb:
            if not if_match_ok(self, route, req, header):
                raise _errors.precondition_failed()
            return
        if route.get is None:
            return
        current = route.get(self, SimRequest("GET", req.path, req.params))
        if not isinstance(current, Reply) or current.revision is None:
            return
        etag = self.etag(_resource_id(current, req.path), current.revision)
        wanted = {_strip_weak(tag.strip()) for tag in header.split(",")}
        if "*" not in wanted and _strip_weak(etag) not in wanted:
            raise _errors.precondition_failed()

    def _perform(self, route: Route, req: SimRequest, write: Write, force_sync: bool) -> Reply:
        if write.deferrable and self.config.async_writes and not force_sync:
            task = self.tasks.create(req.method, req.path, req.body)
            self.stats.tasks_created += 1
            delay = self.config.task_delay
            self.call_later(delay, self._complete_task, task, write, self.config.task_failure)
            if self.bmcweb:
                headers = {"Location": task.monitor, "Retry-After": str(RETRY_AFTER)}
            else:
                headers = {"Location": task.path, "Retry-After": str(max(1, math.ceil(delay)))}
            return Reply(status=202, body=task.document(), headers=headers)
        self.apply(write)
        if write.reply == "resource" and route.get is not None:
            after = route.get(self, SimRequest("GET", req.path, req.params))
            if isinstance(after, Reply):
                return after
        return Reply(body=_messages.success_body())

    def apply(self, write: Write) -> None:
        """Apply a validated write now, bump the caps' revisions and arm the revert fault."""
        before = [(cap, cap.snapshot()) for cap in write.caps]
        write.apply()
        self.stats.writes_applied += 1
        for cap in write.caps:
            cap.revision += 1
        revert_after = self.faults.revert_after
        if revert_after is not None and before:
            revisions = [(cap, snap, cap.revision) for cap, snap in before]
            self.call_later(revert_after, _revert, revisions)

    def _complete_task(self, task: Task, write: Write, failure: str | None) -> None:
        if failure:
            task.fail(failure)
            return
        self.apply(write)
        task.complete()

    def call_later(self, delay: float, func: Callable[..., None], *args: Any) -> None:
        """Run `func(*args)` after `delay` seconds unless the BMC stops first."""
        loop = asyncio.get_running_loop()
        holder: list[asyncio.TimerHandle] = []

        def run() -> None:
            self._timers.discard(holder[0])
            func(*args)

        handle = loop.call_later(delay, run)
        holder.append(handle)
        self._timers.add(handle)

    def _fault_fired(self, fault: FaultMode) -> None:
        self.faults.consume()
        self.stats.faults_injected[fault.value] += 1

    async def _transport_fault(
        self, request: web.BaseRequest, fault: FaultMode, hang: float, retry_after: int
    ) -> tuple[web.StreamResponse, int | None]:
        if fault is FaultMode.HTTP_500:
            err = _errors.internal_error()
            return self._error_response(err), err.status
        if fault is FaultMode.HTTP_503:
            err = _errors.service_unavailable(retry_after)
            return self._error_response(err), err.status
        if fault is FaultMode.HANG:
            await asyncio.sleep(hang)
        reset_connection(request)
        # aiohttp swallows the ConnectionError of writing to the aborted transport
        return web.Response(status=500), None

    def _error_response(self, err: _errors.RedfishError) -> web.Response:
        return self._render("GET", "", Reply(status=err.status, body=err.body, headers=err.headers), False)

    def etag(self, resource_id: str, revision: int) -> str:
        """The strong ETag of a resource at a revision."""
        return f'"{zlib.crc32(resource_id.encode()) ^ self._etag_salt:08x}-{revision}"'

    def _render(self, method: str, path: str, reply: Reply, mangle: bool) -> web.Response:
        headers = {"OData-Version": "4.0", "Cache-Control": "no-store", **reply.headers}
        if reply.text is not None:
            text = "" if method == "HEAD" else reply.text
            return web.Response(
                status=reply.status, text=text, content_type=reply.content_type, headers=headers
            )
        body = reply.body
        if body is None:
            return web.Response(status=reply.status, headers=headers)
        if self.bmcweb:
            if reply.status == 200 and body:
                headers["ETag"] = body_etag(body)
        elif reply.revision is not None:
            etag = self.etag(_resource_id(reply, path), reply.revision)
            headers["ETag"] = etag
            body = {**body, "@odata.etag": etag}
        text = json.dumps(body)
        if mangle:
            text = text[: max(1, len(text) // 2)]
        if method == "HEAD":
            return web.Response(status=reply.status, headers=headers, content_type="application/json")
        return web.Response(status=reply.status, text=text, content_type="application/json", headers=headers)


def _resource_id(reply: Reply, path: str) -> str:
    if reply.body is not None and isinstance(reply.body.get("@odata.id"), str):
        return str(reply.body["@odata.id"])
    return path


def _strip_weak(tag: str) -> str:
    # lenient: treat W/"x" like "x", since some clients echo weak tags back in If-Match
    return tag[2:] if tag.startswith("W/") else tag


def _revert(revisions: list[tuple[Any, tuple[Any, ...], int]]) -> None:
    for cap, snap, revision in revisions:
        # only undo our own write: a later write (or revert) wins
        if cap.revision == revision:
            cap.restore(snap)
