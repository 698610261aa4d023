"""TLS session resumption for connections to one BMC: the last session offered on the next connect.

A full TLS handshake costs the client a certificate chain verification and a key exchange; a
resumed one (TLS 1.3 PSK from a session ticket, or a TLS 1.2 ticket or session id) skips the
certificate and its verification, and in TLS 1.2 the key exchange too (OpenSSL resumes TLS 1.3
with a fresh ECDHE exchange: forward secrecy kept). Figures: docs/redfish.md. Each `Origin`
(`plugins.redfish._wire.http`) keeps the session of its last connection and offers it when it
opens the next one; nothing here is shared between origins.

asyncio opens a TLS connection without a way to pass a session: its `SSLProtocol` calls
`SSLContext.wrap_bio(incoming, outgoing, server_side=..., server_hostname=...)` with no `session`
(CPython 3.11 `Lib/asyncio/sslproto.py`, `SSLProtocol.__init__`). That protocol is built by
`_SelectorEventLoop._make_ssl_transport` (`Lib/asyncio/selector_events.py`), called from
`BaseEventLoop._create_connection_transport` (`Lib/asyncio/base_events.py`), inside the
`create_connection` coroutine: in the task (and so the `contextvars` context) of its caller. The
handshake then starts in `connection_made`, scheduled with `call_soon` from the transport's
`__init__`, which copies that same context. So `offering(session)` sets a context variable around
`create_connection`, and `ResumingSSLObject`, the context's `sslobject_class` (an attribute the
`ssl` module documents as overridable per context instance), hands it to OpenSSL before the
ClientHello is written. Concurrent connects in other tasks see their own value, or none.

What this never changes: the certificate checks. A session is only taken from a connection whose
handshake verified the BMC as its context requires (CA and host name, or nothing for an `insecure`
device), only offered to the same host and port under the same `SSLContext` object (OpenSSL's
`ssl` module refuses a session from another context). Only a server that holds the ticket key (or
the session cache) of the one that made the session can resume it: any other server at that
address, or the same BMC restarted with a new certificate (OpenSSL, and so nginx and Python's
`ssl`, make new ticket keys at start unless configured with a key file), gets a full handshake,
checked as before. A resumed connection still reports the certificate the session was verified
with (`getpeercert()`).
"""

from __future__ import annotations

import contextlib
import contextvars
import ssl
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["ResumingSSLObject", "enable_resumption", "offering", "resumable_session", "still_valid"]

#: the session the connection being opened in this task offers (None: a full handshake)
_OFFER: contextvars.ContextVar[ssl.SSLSession | None] = contextvars.ContextVar(
    "devicectl_tls_session_offer", default=None
)


class ResumingSSLObject(ssl.SSLObject):
    """`ssl.SSLObject` that offers the session `offering` set, when its caller passed none."""

    @classmethod
    def _create(  # type: ignore[override]  # ssl.SSLObject's private factory, called by wrap_bio
        cls,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: Any = None,
        session: ssl.SSLSession | None = None,
        context: ssl.SSLContext | None = None,
    ) -> ssl.SSLObject:
        offer = _OFFER.get() if session is None and not server_side else None
        if offer is not None:
            try:
                return super()._create(  # type: ignore[misc]
                    incoming,
                    outgoing,
                    server_side=server_side,
                    server_hostname=server_hostname,
                    session=offer,
                    context=context,
                )
            except ValueError:  # the session belongs to another context: a full handshake instead
                pass
        return super()._create(  # type: ignore[misc, no-any-return]
            incoming,
            outgoing,
            server_side=server_side,
            server_hostname=server_hostname,
            session=session,
            context=context,
        )


def enable_resumption(context: ssl.SSLContext) -> bool:
    """Let connections made with `context` offer a session (`offering`); False when the context
    already has an `sslobject_class` of its own (left as it is: those connections never resume).

    Without `offering` around a connect, the context works exactly as before."""
    if context.sslobject_class is ResumingSSLObject:
        return True
    if context.sslobject_class is not ssl.SSLObject:
        return False
    context.sslobject_class = ResumingSSLObject
    return True


@contextlib.contextmanager
def offering(session: ssl.SSLSession | None) -> Iterator[None]:
    """Offer `session` on the TLS connections this task opens inside the block."""
    token = _OFFER.set(session)
    try:
        yield
    finally:
        _OFFER.reset(token)


def resumable_session(tls: ssl.SSLObject) -> ssl.SSLSession | None:
    """The session of a connection whose first reply was read, if a later connection can resume it:
    one with a ticket (TLS 1.3 sends its tickets after the handshake, so before the first reply it
    has none), or a TLS 1.2 session id the server may keep in its cache."""
    session = tls.session
    if session is None:
        return None
    if session.has_ticket or (tls.version() == "TLSv1.2" and session.id):
        return session
    return None


def still_valid(session: ssl.SSLSession, now: float | None = None) -> bool:
    """Whether `session` is within the lifetime it was issued with (a server refuses it after)."""
    return (time.time() if now is None else now) < session.time + session.timeout
