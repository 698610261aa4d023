"""A Redfish resource as read: the one value the client, the read-back cache and discovery share."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Document:
    """A resource as read: its JSON body and its ETag (header, else `@odata.etag`)."""

    path: str
    body: Mapping[str, Any]
    etag: str | None = None

    def get(self, key: str, default: Any = None) -> Any:
        """Shortcut for `body.get`."""
        return self.body.get(key, default)
