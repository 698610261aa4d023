"""What a BMC's error reply says: the Redfish error body's code, message and
`@Message.ExtendedInfo` entries, NVIDIA bmcweb's status codes anywhere in it, and the `Retry-After`
header. `plugins.redfish._wire.errors` turns them into the typed errors.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from plugins.redfish._wire.document import loads

#: NVIDIA bmcweb: SMBPBI busy, "retry after 60 seconds" (HTTP 500).
NVIDIA_BUSY = "0x50A"
#: NVIDIA bmcweb: D-Bus timeout, "settings may or may not have applied" (HTTP 500).
NVIDIA_TIMEOUT = "0x600"

_NVIDIA_CODE = re.compile(r"\b0x(50a|600)\b", re.IGNORECASE)


@dataclass(frozen=True)
class ExtendedInfo:
    """One `@Message.ExtendedInfo` entry."""

    message_id: str = ""
    message: str = ""
    resolution: str = ""
    severity: str = ""
    args: tuple[str, ...] = ()
    related: tuple[str, ...] = ()

    def describe(self) -> str:
        """`MessageId: Message` with the related properties, if any."""
        text = self.message or ", ".join(self.args)
        head = f"{_short_id(self.message_id)}: {text}" if self.message_id else text
        if self.related:
            head += f" [{', '.join(self.related)}]"
        return head


def parse_extended_info(body: Any) -> tuple[str, str, tuple[ExtendedInfo, ...]]:
    """Split a Redfish error body into (code, message, extended infos).

    Accepts the standard `{"error": {...}}` envelope and bodies that carry
    `@Message.ExtendedInfo` at top level (partial-success PATCH replies).
    """
    if not isinstance(body, Mapping):
        return "", "", ()
    container: Mapping[str, Any] = body
    error = body.get("error")
    if isinstance(error, Mapping):
        container = error
    code = str(container.get("code") or "")
    message = str(container.get("message") or "")
    infos: list[ExtendedInfo] = []
    for item in container.get("@Message.ExtendedInfo") or ():
        if not isinstance(item, Mapping):
            continue
        infos.append(
            ExtendedInfo(
                message_id=str(item.get("MessageId") or ""),
                message=str(item.get("Message") or ""),
                resolution=str(item.get("Resolution") or ""),
                severity=str(item.get("Severity") or item.get("MessageSeverity") or ""),
                args=tuple(str(a) for a in item.get("MessageArgs") or () if a is not None),
                related=tuple(str(p) for p in item.get("RelatedProperties") or () if p is not None),
            )
        )
    return code, message, tuple(infos)


def nvidia_code(body: Any, text: str = "") -> str | None:
    """The NVIDIA bmcweb status code (`0x50A` or `0x600`) carried anywhere in an error body."""
    # NOTE: NVIDIA bmcweb reports SMBPBI "busy" and D-Bus "timeout" as HTTP 500 with the hex code in
    # the message text or arguments (redfish.md §2.2, NVIDIA/bmcweb redfish-core/lib/control.hpp);
    # the exact field differs between firmware drops, so scan all of them.
    haystack = [text]
    code, message, infos = parse_extended_info(body)
    haystack += [code, message]
    for info in infos:
        haystack += [info.message_id, info.message, info.resolution, *info.args]
    for piece in haystack:
        found = _NVIDIA_CODE.search(piece or "")
        if found:
            return "0x" + found.group(1).upper()
    return None


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a `Retry-After` header (delta-seconds or HTTP-date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (now if now is not None else time.time()))


def extended_info_messages(body: Any) -> list[str]:
    """Human-readable `@Message.ExtendedInfo` lines of a successful reply (partial PATCH success)."""
    _, _, infos = parse_extended_info(body)
    return [i.describe() for i in infos if not i.message_id.endswith(".Success")]


def describe_error(code: str, message: str, infos: Sequence[ExtendedInfo], raw: str) -> str:
    """The BMC's own words for an error message: its extended infos (else its code and message,
    else the raw text, clipped) and the first resolution it offers."""
    parts = [i.describe() for i in infos]
    resolutions = [i.resolution for i in infos if i.resolution]
    if not parts and (code or message):
        parts.append(f"{_short_id(code)}: {message}" if code and message else code or message)
    elif message and not any(message in p for p in parts) and not message.startswith("A general error"):
        parts.insert(0, message)
    if not parts and raw.strip():
        parts.append(_clip(" ".join(raw.split()), 200))
    text = "; ".join(parts)
    if resolutions:
        text += f" (resolution: {resolutions[0]})"
    return text


def _short_id(message_id: str) -> str:
    """`Base.1.12.PropertyValueNotInList` -> `Base.PropertyValueNotInList` (keeps the registry)."""
    pieces = message_id.split(".")
    if len(pieces) >= 3:
        return f"{pieces[0]}.{pieces[-1]}"
    return message_id


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def json_or_none(text: str) -> Any:
    """A reply's text as JSON, or None when it is not a JSON document."""
    if not text or not text.lstrip().startswith(("{", "[")):
        return None
    try:
        return loads(text)
    except ValueError:  # `JsonOverBound` too
        return None
