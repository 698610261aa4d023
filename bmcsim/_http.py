"""The simulated BMC's HTTP side: aiohttp's low-level server, counting connections for the BMC's
stats and closing them all on stop, and the JSON body of a request."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from bmcsim import _errors, _protocol
from bmcsim._stats import BmcStats

log = logging.getLogger(__name__)

_Handle = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


class BmcHttpServer(web.Server):
    """aiohttp's low-level server, plus connection counting for the BMC's stats."""

    def __init__(self, handle: _Handle, stats: BmcStats) -> None:
        # handler_cancellation: a client that gives up on a hung request must free the handler
        super().__init__(handle, handler_cancellation=True, access_log=None)
        self._stats = stats
        self._open: dict[Any, asyncio.Transport] = {}  # handler -> its transport, until lost
        self._none_open = asyncio.Event()
        self._none_open.set()

    def __call__(self) -> RequestHandler:
        return _protocol.RedfishRequestHandler(self, loop=self._loop, **self._kwargs)

    def connection_made(self, handler: Any, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        self._open[handler] = transport
        self._none_open.clear()
        self._stats.connection_opened()

    def connection_lost(self, handler: Any, exc: BaseException | None = None) -> None:
        super().connection_lost(handler, exc)
        self._open.pop(handler, None)
        if not self._open:
            self._none_open.set()
        self._stats.connection_closed()

    async def close_all(self, grace: float) -> None:
        """Close every connection and return only when all are gone (their sockets closed).

        A graceful TLS close waits for the client's close_notify, which a hung or vanished client
        never sends, and Python 3.11's `Server.wait_closed()` does not wait for connections: so
        connections still open after `grace` are aborted, then waited for (bounded).
        """
        await self.shutdown(timeout=grace)  # cancels hung (fault-injected) handlers, closes the rest
        if not await self._wait(grace):
            for transport in list(self._open.values()):
                transport.abort()
        if not await self._wait(1.0):
            log.warning("BMC simulator: %d connections did not close", len(self._open))

    async def _wait(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self._none_open.wait(), timeout)
        except TimeoutError:
            return False
        return True


async def read_json(request: web.BaseRequest) -> Any:
    """The body as JSON (None when empty); 400 MalformedJSON when it is not JSON."""
    raw = await request.read()
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise _errors.malformed_json() from None
