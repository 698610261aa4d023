"""URIs that come from outside (a request's device state, a BMC's `Location` or listing) checked
before any request is sent to them.

The Redfish library resolves dot segments and percent-escapes in a path before it sends it
(`tests/plugins/redfish/client/test_request_target.py`), so a prefix check proves nothing:
`/redfish/v1/SessionService/Sessions/../../AccountService/Accounts/3` starts with the sessions
collection and is sent as `DELETE /redfish/v1/AccountService/Accounts/3`. A member of a collection
is therefore exactly one plain path segment under the collection's path: no dot segment, no
percent-encoded `/`, `\\` or `.`, no backslash, no query or fragment, no control character, and
when absolute, on the BMC's own origin.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

SESSIONS_PATH = "/redfish/v1/SessionService/Sessions"
#: escapes that decode to a separator or a dot (RFC 3986 lets either case stand for the same octet)
_ENCODED = re.compile(r"%(2[eEfF]|5[cC])")
_UNSAFE = re.compile(r"[\x00-\x20\x7f\\?#]")


def collection_member(uri: object, collection: str, origin: str = "") -> str | None:
    """The path of `uri` when it is exactly one member of `collection` (on `origin` if absolute),
    else None. Never raises."""
    if not isinstance(uri, str) or len(uri) > 512:
        return None
    path = uri
    if not uri.startswith("/"):
        try:
            parts = urlsplit(uri)
        except ValueError:
            return None
        if not origin or f"{parts.scheme}://{parts.netloc}".lower() != origin.lower():
            return None
        if parts.query or parts.fragment or "#" in uri or "?" in uri:
            return None
        path = parts.path
    prefix = collection.rstrip("/") + "/"
    if not path.startswith(prefix):
        return None
    segment = path[len(prefix) :]
    if not segment or "/" in segment or segment in (".", "..") or _ENCODED.search(segment):
        return None
    return None if _UNSAFE.search(segment) else path


def session_member(uri: object, origin: str = "") -> str | None:
    """`collection_member` of the BMC's session collection."""
    return collection_member(uri, SESSIONS_PATH, origin)


def redfish_path(uri: object) -> bool:
    """Whether a resource path kept in state stays within the Redfish tree as sent: under
    `/redfish/v1/`, with no dot segment, no encoded separator or dot, no backslash and no control
    character (a fragment, as in `…/Power#/PowerControl/0`, is never sent)."""
    if not isinstance(uri, str) or not uri.startswith("/redfish/v1/") or len(uri) > 1024:
        return False
    path = uri.partition("#")[0].partition("?")[0]
    if _ENCODED.search(path) or re.search(r"[\x00-\x1f\x7f\\]", uri):
        return False
    return not any(segment in (".", "..") for segment in path.split("/"))
