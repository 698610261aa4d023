"""The per-process registry of BMC clients and their connections.

One `BmcClient` per BMC URL, whatever the number of devices behind it, so the per-BMC concurrency
limit and the Redfish session are shared by everything that talks to that BMC. Clients are created
on first use and retired (their Redfish session deleted) when the last device using them is
forgotten, when their settings change (a rotated secret, a new CA bundle), and on `close()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import ssl
import time
from collections.abc import Iterable

from plugins.base import Endpoint
from plugins.base.identity import ProcessIdentity
from plugins.redfish._client.client import BmcClient
from plugins.redfish._client.session_table import session_marker
from plugins.redfish._config import ConnectionSettings, RedfishSettings, check_ca_bundle
from plugins.redfish._wire.http import HttpConnections

log = logging.getLogger(__name__)

#: endpoints whose merged settings are kept (one a BMC URL: far more than a controller serves)
_SETTINGS_KEPT = 100_000
#: sessions refreshed at once by the keep-warm task
_REFRESHING = 32


class BmcPool:
    """BMC clients keyed by URL, plus their connections and TLS contexts.

    Args:
        defaults: plugin-wide settings (each device's options override them).
        client_id: who this process acts for (the controller's instance id): stable across its
            restarts, distinct between controllers that run at once. Default: the environment's
            `DEVICECTL_INSTANCE_ID`, else the host name. The identity our sessions carry is the
            lease `plugins.base.identity` grants for it at `start()` (this id while no other live
            process holds it).
    """

    def __init__(self, defaults: RedfishSettings | None = None, client_id: str = "") -> None:
        self.defaults = defaults or RedfishSettings()
        self.client_id = client_id or os.environ.get("DEVICECTL_INSTANCE_ID") or socket.gethostname()
        #: this process's identity lease, held from `start()` to `close()`
        self.identity: ProcessIdentity | None = None
        self._http: HttpConnections | None = None
        self._clients: dict[str, BmcClient] = {}
        self._users: dict[str, set[str]] = {}  # BMC URL -> device ids using it
        self._device_bmc: dict[str, str] = {}  # device id -> BMC URL
        self._ssl: dict[str, ssl.SSLContext] = {}  # CA bundle path -> context
        self._warned_insecure: set[str] = set()
        self._lock = asyncio.Lock()
        #: endpoint URL -> (endpoint, defaults, merged settings) of its last request
        self._settings: dict[str, tuple[Endpoint, RedfishSettings, ConnectionSettings]] = {}
        self._keeper: asyncio.Task[None] | None = None

    @property
    def started(self) -> bool:
        """Whether the pool is open."""
        return self._http is not None and not self._http.closed

    @property
    def boot(self) -> str:
        """Random per identity lease: tells this process's sessions from earlier holders' ('' before
        `start()`)."""
        return self.identity.boot if self.identity is not None else ""

    def set_client_id(self, client_id: str) -> None:
        """Act for another client id from now on (a started pool swaps its identity lease)."""
        self.client_id = client_id
        if self.identity is not None:
            self._take_identity()

    def _take_identity(self) -> None:
        if self.identity is None or self.identity.wanted != self.client_id:
            if self.identity is not None:
                self.identity.release()
            self.identity = ProcessIdentity(self.client_id).acquire()

    async def start(self) -> None:
        """Open the pool (idempotent) and take this process's identity lease."""
        if self.started:
            return
        self._take_identity()
        self._http = HttpConnections(self.defaults.keepalive_timeout, self.defaults.max_document_bytes)
        if self.defaults.session_refresh_after > 0:
            self._keeper = asyncio.get_running_loop().create_task(self._keep_warm(), name="redfish keep-warm")

    async def _keep_warm(self) -> None:
        """Refresh every session idle for `session_refresh_after` seconds (a few at a time), so that
        neither it nor its kept-alive connection has expired when the next wave comes."""
        after = self.defaults.session_refresh_after
        slots = asyncio.Semaphore(_REFRESHING)

        async def refresh(client: BmcClient) -> None:
            async with slots:
                try:
                    await client.refresh_session(deadline=time.monotonic() + client.settings.read_timeout)
                except Exception as exc:  # the next request logs in again if it must
                    log.debug("%s: session refresh failed: %s", client.origin, exc)

        while True:
            await asyncio.sleep(after / 4)
            now = time.monotonic()
            idle = [
                c for c in self._clients.values() if now - c.last_used >= after and c.auth_mode == "session"
            ]
            if idle:
                await asyncio.gather(*(refresh(c) for c in idle))

    async def client(self, settings: ConnectionSettings, device_id: str = "") -> BmcClient:
        """The client for a BMC, created (or re-created after a settings change) on demand."""
        await self.start()
        assert self._http is not None
        retired: BmcClient | None = None
        async with self._lock:
            current = self._clients.get(settings.url)
            if current is not None and current.settings.transport_key() != settings.transport_key():
                log.info("%s: connection settings changed; opening a new connection", settings.origin)
                retired = current
                current = None
            if current is None:
                identity = self.identity
                assert identity is not None
                marker = session_marker(identity.client_id, identity.boot)
                current = BmcClient(self._http, settings, self._tls_for(settings), marker, identity)
                self._clients[settings.url] = current
            elif current.settings != settings:
                # same connection, other tuning (timeouts, back-off): keep the session, take the values
                current.retune(settings)
            if device_id:
                previous = self._device_bmc.get(device_id)
                if previous is not None and previous != settings.url:
                    self._users.get(previous, set()).discard(device_id)
                self._device_bmc[device_id] = settings.url
                self._users.setdefault(settings.url, set()).add(device_id)
        if retired is not None:
            await _retire(retired)
        return current

    def settings_for(self, endpoint: Endpoint, defaults: RedfishSettings) -> ConnectionSettings:
        """`ConnectionSettings.from_endpoint`, merged again only when the endpoint or the defaults
        changed (every request of a device carries an equal endpoint; the merge was ~1.5% of a
        fan-out's CPU)."""
        key = endpoint.url
        cached = self._settings.get(key)
        if cached is not None and cached[1] is defaults and cached[0] == endpoint:
            return cached[2]
        settings = ConnectionSettings.from_endpoint(endpoint, defaults)
        if len(self._settings) >= _SETTINGS_KEPT:
            self._settings.clear()  # endpoints come and go with the inventory: start over
        self._settings[key] = (endpoint, defaults, settings)
        return settings

    def get(self, url: str) -> BmcClient | None:
        """The existing client for a BMC URL, if any."""
        return self._clients.get(url)

    def clients(self) -> list[BmcClient]:
        """Every live client."""
        return list(self._clients.values())

    async def forget(self, device_id: str) -> None:
        """Drop a device; the BMC's session is deleted when no other device uses it."""
        retired: BmcClient | None = None
        async with self._lock:
            url = self._device_bmc.pop(device_id, None)
            if url is None:
                return
            users = self._users.get(url, set())
            users.discard(device_id)
            if not users:
                self._users.pop(url, None)
                retired = self._clients.pop(url, None)
        if retired is not None:
            await _retire(retired)

    async def close(self) -> None:
        """Delete every Redfish session, then close every connection."""
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
        async with self._lock:
            clients = list(self._clients.values())
            self._clients.clear()
            self._users.clear()
            self._device_bmc.clear()
        await _logout_all(clients)
        if self._http is not None:
            await self._http.close()
            self._http = None
        if self.identity is not None:
            self.identity.release()
            self.identity = None

    def _tls_for(self, settings: ConnectionSettings) -> ssl.SSLContext:
        """The BMC's TLS context: its CA bundle's, the system store's, or none checked (insecure)."""
        if settings.insecure:
            if settings.url not in self._warned_insecure:
                self._warned_insecure.add(settings.url)
                log.warning(
                    "%s: TLS certificate verification is OFF for this BMC (insecure); its identity is "
                    "not checked",
                    settings.origin,
                )
            return self._unchecked_tls
        bundle = settings.ca_bundle
        if not bundle:
            return self._system_tls
        context = self._ssl.get(bundle)
        if context is None:
            check_ca_bundle(bundle)
            context = ssl.create_default_context(cafile=bundle)
            self._ssl[bundle] = context
        return context

    @functools.cached_property
    def _system_tls(self) -> ssl.SSLContext:
        return ssl.create_default_context()

    @functools.cached_property
    def _unchecked_tls(self) -> ssl.SSLContext:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context


async def _retire(client: BmcClient) -> None:
    """Log a client out, then close its connections."""
    try:
        await client.logout()
    finally:
        client.transport.close()


async def _logout_all(clients: Iterable[BmcClient]) -> None:
    await asyncio.gather(*(c.logout() for c in clients), return_exceptions=True)
