"""What a BMC's redirect (3xx) may make the client do: a read is sent again to the new place when
that place is on the BMC's own origin, within the Redfish tree, at most `MAX_HOPS` times; a write is
never sent again, nor anything to another origin; and a 3xx is never taken as the reply.

Behind nginx (and on BMCs that do the same), `GET /redfish/v1` is answered `301` to `/redfish/v1/`;
taking that 301's HTML page as the service root failed every request. A write redirected is
refused rather than repeated: the BMC's answer to it is not known (it may have landed).
"""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit

from plugins.redfish._wire.errors import READS, ProtocolError

#: redirects followed for one read before it fails
MAX_HOPS = 5
#: the statuses that say "the resource is elsewhere" (300, 304, 305 and 306 say other things)
_FOLLOWED = frozenset((301, 302, 303, 307, 308))


_USERINFO = re.compile(r"//[^/@]*@")


def without_userinfo(url: str) -> str:
    """`url` with any `user:password@` taken out of its authority: a BMC's `Location` is shown in
    errors and logs, never a credential it may carry."""
    return _USERINFO.sub("//", url)


def redirect_target(url: str, where: str, method: str, status: int, location: str | None, hops: int) -> str:
    """The target (path and query) to send the read `method` to after a `status` redirect to
    `location`, or `ProtocolError` with the reason it is not followed.

    Args:
        url: the request's URL, `scheme://host:port/path?query` (the port always given).
        where: `origin: METHOD path`, for messages.
        hops: redirects already followed for this request.
    """
    shown = repr(without_userinfo(location)[:120]) if location else "nowhere"
    if status not in _FOLLOWED or not location:
        raise ProtocolError(f"{where}: the BMC answered {status} (to {shown}), not a reply")
    if method not in READS:
        raise ProtocolError(
            f"{where}: the BMC redirected the write ({status}) to {shown}; a write is never sent "
            "again to another address, so whether it landed is not known"
        )
    if hops >= MAX_HOPS:
        raise ProtocolError(f"{where}: over {MAX_HOPS} redirects (the last {status} to {shown})")
    lowered = location.lower()
    if "%2f" in lowered or "%5c" in lowered or "\\" in location or any(c <= " " for c in location):
        raise ProtocolError(f"{where}: the BMC redirected to {shown}, which is no plain path; not followed")
    try:
        raw_path = urlsplit(location).path
        there = urlsplit(urljoin(url, location))
        here = urlsplit(url)
        same = (there.scheme, there.hostname, _port(there.scheme, there.port)) == (
            here.scheme,
            here.hostname,
            here.port,
        )
    except ValueError:  # e.g. a port that is not a number
        raise ProtocolError(
            f"{where}: the BMC redirected to {shown}, which is no URL; not followed"
        ) from None
    if any(segment in (".", "..") or "%2e" in segment.lower() for segment in raw_path.split("/")):
        raise ProtocolError(f"{where}: the BMC redirected to {shown}, a path with dot segments; not followed")
    if not same or there.username is not None:
        raise ProtocolError(f"{where}: the BMC redirected to {shown}, another origin; not followed")
    path = there.path
    if path != "/redfish" and not path.startswith("/redfish/"):
        raise ProtocolError(f"{where}: the BMC redirected to {shown}, outside /redfish; not followed")
    return f"{path}?{there.query}" if there.query else path


def _port(scheme: str, port: int | None) -> int:
    return port if port is not None else (443 if scheme == "https" else 80)
