"""The login part of `BmcClient`: one Redfish session per BMC, opened on first use, opened again
after a 401 on a write (single flight), forgotten when a login fails, deleted at `logout()`.

`SessionLimitExceeded` at login hands over to `LeftoverSessions`, which frees the table (or falls
back to Basic auth with `basic_fallback`).
"""

from __future__ import annotations

import logging
import time

from redfish.aio import exceptions as dmtf

from plugins.base import HostEnvironmentError
from plugins.base.schema import clip
from plugins.redfish._client.readbacks import ReadBacks
from plugins.redfish._client.sessions import LeftoverSessions
from plugins.redfish._wire.errors import AccessError, RedfishError, RedfishHTTPError
from plugins.redfish._wire.telemetry import SESSIONS_OPEN
from plugins.redfish._wire.transport import deadline_scope

#: the client's logger (these lines were always logged under its name)
log = logging.getLogger("plugins.redfish._client.client")


class BmcLogin(LeftoverSessions):
    """Logging in and out of one BMC (the rest of `BmcClient` is in `plugins.redfish._client.client`)."""

    read_backs: ReadBacks
    _session_counted: bool
    _closed: bool

    async def _ensure_login(self) -> None:
        if self._auth is not None:
            return
        async with self._login_lock:
            if self._auth is None:
                await self._login(self.settings.auth)

    async def _relogin(self, generation: int) -> None:
        async with self._login_lock:
            if self.transport.session_generation == generation:
                log.info("%s: Redfish session rejected (401); logging in again", self.origin)
                await self._login("session")

    async def _login(self, mode: str) -> None:
        s = self.settings
        if not s.username or s.password is None:
            raise HostEnvironmentError(
                f"{self.origin}: no credentials for this BMC; give the device a secret in the inventory"
            )
        try:
            await self._open(mode)
        except BaseException:
            # NOTE: `login()` dropped the library's credentials before it tried: a failed login
            # leaves no session, so the next request must log in again (not send without a token).
            self._forget_login()
            raise

    async def _open(self, mode: str) -> None:
        s = self.settings
        try:
            await self._redfish.login(auth=mode)
        except dmtf.RedfishPasswordChangeRequiredError as exc:
            raise AccessError(
                f"{self.origin}: login refused: the BMC requires a password change for {s.username!r}",
                status=403,
                method="POST",
            ) from exc
        except dmtf.RedfishAuthenticationError as exc:
            raise AccessError(
                f"{self.origin}: login refused for user {s.username!r} (HTTP 401/403): check the "
                "device's secret",
                status=401,
                method="POST",
            ) from exc
        except dmtf.RedfishHTTPError as exc:
            error = self._map_dmtf(exc, "POST", "/redfish/v1/SessionService/Sessions")
            assert isinstance(error, RedfishHTTPError)
            if mode == "session" and self.transport.login_context and _refuses_context(error):
                # NOTE: a service that does not read Context may refuse it as unknown (bmcweb's
                # readJson answers 400 PropertyUnknown to any property its handler does not read):
                # log in without it from now on; leftovers are then found as on a BMC that drops it
                self.transport.login_context = ""
                log.warning(
                    "%s: the BMC refuses the Redfish Session.Context devicectl sets at login (%s); "
                    "logging in without it",
                    self.origin,
                    clip(str(error), 300),
                )
                await self._open(mode)
                return
            if mode == "session" and error.has_message("SessionLimitExceeded"):
                await self._session_table_full(error)  # raises, or logs in some other way
                self._swept = True
                if self._auth == "session":
                    await self._record_login()
                if self._auth == "session" and not self._session_counted:
                    self._session_counted = True
                    SESSIONS_OPEN.inc()
                return
            raise error from exc
        except dmtf.RedfishError as exc:
            raise self._map_dmtf(exc, "POST", "/redfish/v1/SessionService/Sessions") from exc
        if mode == "session":
            # NOTE: in the identity's record before any request may use it (requests take a
            # session once `_auth` is set)
            await self._record_login()
        self._auth = mode
        self.read_backs.clear()  # a new login: the BMC may have restarted since the last read-backs
        if mode == "session" and not self._session_counted:
            self._session_counted = True
            SESSIONS_OPEN.inc()
        if mode == "session":
            log.debug("%s: Redfish session opened", self.origin)
            self._after_login()

    async def logout(self) -> None:
        """Delete the Redfish session (best effort, bounded by `logout_timeout`) and stop."""
        self._closed = True
        await self._stop_sweeping()
        if self._auth is None:
            return
        try:
            with deadline_scope(time.monotonic() + self.settings.logout_timeout):
                await self._redfish.logout()
            self._note_logout()
        except (dmtf.RedfishError, RedfishError, OSError, TimeoutError) as exc:
            log.warning("%s: could not delete the Redfish session: %s", self.origin, clip(str(exc), 300))
        finally:
            self._forget_login()

    def _forget_login(self) -> None:
        """No credentials are held any more: the next authenticated request logs in."""
        self._auth = None
        self.read_backs.clear()
        if self._session_counted:
            self._session_counted = False
            SESSIONS_OPEN.dec()


def _refuses_context(error: RedfishHTTPError) -> bool:
    """Whether a refused login names the `Context` property (unknown, or not accepted)."""
    if error.status != 400:
        return False
    for info in error.infos:
        if "Context" in info.args or any(r.rstrip("/").endswith("/Context") for r in info.related):
            return True
    return False
