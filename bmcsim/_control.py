"""Plain-HTTP JSON control endpoint, so another process (a benchmark) can read counters and set faults.

Routes (`{i}` is a BMC index; bodies and replies are JSON):

    GET    /health                     {"ok": true, "bmcs": n}
    GET    /bmcs                       identity and settings of every BMC (no passwords)
    GET    /bmcs/{i}                   one BMC
    GET    /stats                      {"totals": {...}, "bmcs": [...]}
    GET    /bmcs/{i}/stats             one BMC's counters
    POST   /stats/reset                zero every BMC's counters
    POST   /bmcs/{i}/stats/reset       zero one BMC's counters
    GET    /bmcs/{i}/state             caps (and GPU profile masks) of one BMC
    GET    /bmcs/{i}/faults            fault settings
    PUT    /bmcs/{i}/faults            set faults, body e.g. {"mode": "http503", "count": 3, "retry_after": 2}
    DELETE /bmcs/{i}/faults            clear faults
    PUT    /faults                     same body, for all BMCs (or those listed in "bmcs": [...])
    DELETE /faults                     clear faults everywhere
    POST   /bmcs/{i}/sessions/expire   invalidate one BMC's Redfish sessions
    POST   /sessions/expire            ... of every BMC
    PATCH  /bmcs/{i}/config            settings: latency, async_writes, task_delay, session_limit,
                                       session_timeout
    PATCH  /config                     same, for all BMCs (or those listed in "bmcs": [...])
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

if TYPE_CHECKING:
    from bmcsim._bmc import SimulatedBmc


class ControlledFleet(Protocol):
    """What the endpoint uses of `_fleet.SimulatorFleet` (which starts it: so this module names a
    protocol, not the class)."""

    @property
    def bmcs(self) -> Sequence[SimulatedBmc]: ...

    def stats(self) -> dict[str, Any]: ...

    def reset_stats(self) -> None: ...

    def clear_faults(self) -> None: ...


_FLEET: web.AppKey[ControlledFleet] = web.AppKey("fleet")
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def start_control_server(fleet: ControlledFleet, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve the control API on `host:port` (0 picks a port); returns the runner and the bound port."""
    app = web.Application(middlewares=[_errors_as_json])
    app[_FLEET] = fleet
    app.add_routes(
        [
            web.get("/health", _health),
            web.get("/bmcs", _list_bmcs),
            web.get("/bmcs/{i}", _get_bmc),
            web.get("/stats", _all_stats),
            web.get("/bmcs/{i}/stats", _bmc_stats),
            web.post("/stats/reset", _reset_all),
            web.post("/bmcs/{i}/stats/reset", _reset_bmc),
            web.get("/bmcs/{i}/state", _state),
            web.get("/bmcs/{i}/faults", _get_faults),
            web.put("/bmcs/{i}/faults", _put_faults),
            web.delete("/bmcs/{i}/faults", _clear_faults),
            web.put("/faults", _put_all_faults),
            web.delete("/faults", _clear_all_faults),
            web.post("/bmcs/{i}/sessions/expire", _expire),
            web.post("/sessions/expire", _expire_all),
            web.patch("/bmcs/{i}/config", _configure),
            web.patch("/config", _configure_all),
        ]
    )
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    return runner, int(runner.addresses[0][1])


@web.middleware
async def _errors_as_json(request: web.Request, handler: _Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return web.json_response({"error": exc.reason}, status=exc.status)
    except (ValueError, TypeError, KeyError) as exc:
        return web.json_response({"error": str(exc)}, status=400)


def _fleet(request: web.Request) -> ControlledFleet:
    return request.app[_FLEET]


def _bmc(request: web.Request) -> SimulatedBmc:
    fleet = _fleet(request)
    raw = request.match_info["i"]
    if not raw.isdigit() or int(raw) >= len(fleet.bmcs):
        raise web.HTTPNotFound(reason=f"no BMC {raw}")
    return fleet.bmcs[int(raw)]


async def _json(request: web.Request) -> dict[str, Any]:
    text = await request.text()
    if not text.strip():
        return {}
    body = json.loads(text)
    if not isinstance(body, dict):
        raise ValueError("body must be a JSON object")
    return body


def _targets(request: web.Request, body: dict[str, Any]) -> list[SimulatedBmc]:
    fleet = _fleet(request)
    indices = body.pop("bmcs", None)
    if indices is None:
        return list(fleet.bmcs)
    return [fleet.bmcs[int(i)] for i in indices]


async def _health(request: web.Request) -> web.Response:
    return web.json_response({"ok": True, "bmcs": len(_fleet(request).bmcs)})


async def _list_bmcs(request: web.Request) -> web.Response:
    return web.json_response([b.describe() for b in _fleet(request).bmcs])


async def _get_bmc(request: web.Request) -> web.Response:
    return web.json_response(_bmc(request).describe())


async def _all_stats(request: web.Request) -> web.Response:
    return web.json_response(_fleet(request).stats())


async def _bmc_stats(request: web.Request) -> web.Response:
    bmc = _bmc(request)
    return web.json_response({"index": bmc.index, "url": bmc.url, **bmc.stats.to_dict()})


async def _reset_all(request: web.Request) -> web.Response:
    _fleet(request).reset_stats()
    return web.json_response({"ok": True})


async def _reset_bmc(request: web.Request) -> web.Response:
    _bmc(request).stats.reset()
    return web.json_response({"ok": True})


async def _state(request: web.Request) -> web.Response:
    return web.json_response(_bmc(request).state.describe())


async def _get_faults(request: web.Request) -> web.Response:
    return web.json_response(_bmc(request).faults.to_dict())


async def _put_faults(request: web.Request) -> web.Response:
    bmc = _bmc(request)
    bmc.faults.update(await _json(request))
    return web.json_response(bmc.faults.to_dict())


async def _clear_faults(request: web.Request) -> web.Response:
    bmc = _bmc(request)
    bmc.faults.clear()
    return web.json_response(bmc.faults.to_dict())


async def _put_all_faults(request: web.Request) -> web.Response:
    body = await _json(request)
    targets = _targets(request, body)
    for bmc in targets:
        bmc.faults.update(dict(body))
    return web.json_response({"ok": True, "bmcs": len(targets)})


async def _clear_all_faults(request: web.Request) -> web.Response:
    _fleet(request).clear_faults()
    return web.json_response({"ok": True})


async def _expire(request: web.Request) -> web.Response:
    return web.json_response({"expired": _bmc(request).expire_sessions()})


async def _expire_all(request: web.Request) -> web.Response:
    return web.json_response({"expired": sum(b.expire_sessions() for b in _fleet(request).bmcs)})


async def _configure(request: web.Request) -> web.Response:
    bmc = _bmc(request)
    bmc.configure(**await _json(request))
    return web.json_response(bmc.describe())


async def _configure_all(request: web.Request) -> web.Response:
    body = await _json(request)
    targets = _targets(request, body)
    for bmc in targets:
        bmc.configure(**body)
    return web.json_response({"ok": True, "bmcs": len(targets)})
