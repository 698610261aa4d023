"""What can go wrong with one HTTP request to a BMC: an `HttpFailure` that says whether the request
may have reached the BMC (`sent`). The transport (`plugins.redfish._wire.transport`) turns each into
the plugin's typed errors."""

from __future__ import annotations

import ssl


class HttpFailure(Exception):
    """A request that got no complete reply. `sent`: whether it may have reached the BMC."""

    sent = True


class ConnectFailure(HttpFailure):
    """No connection (refused, unreachable, name unknown). `os_error`: the cause."""

    sent = False

    def __init__(self, message: str, os_error: OSError | None = None) -> None:
        super().__init__(message)
        self.os_error = os_error


class ConnectTimeout(HttpFailure):
    """No connection (TCP and TLS) within the connect timeout."""

    sent = False


class TlsFailure(HttpFailure):
    """The TLS handshake failed. `verification`: the certificate's rejection, when that was why."""

    sent = False

    def __init__(self, message: str, verification: ssl.SSLCertVerificationError | None = None) -> None:
        super().__init__(message)
        self.verification = verification


class ReplyTimeout(HttpFailure):
    """The request was sent and no complete reply came within the reply timeout."""


class Disconnected(HttpFailure):
    """The connection ended before the reply was complete as framed (the request may have landed)."""


class MalformedReply(HttpFailure):
    """The bytes that came back are not an HTTP/1.x reply this client reads (the request may have
    landed)."""


class ReplyOverBound(MalformedReply):
    """A reply past one of the client's bounds (`bound`: which one, `limit`: its value): its reading
    stopped there and its connection was dropped (the request may have landed)."""

    def __init__(self, bound: str, limit: int, message: str) -> None:
        super().__init__(f"{message} (bound {bound} = {limit})")
        self.bound = bound
        self.limit = limit
