"""Redaction for what leaves the controller in a support bundle: secrets, tokens, passwords and private
keys never do.

Three layers, each enough on its own for what it knows:
- structured: in a parsed document (settings, an inventory), the value of every key whose name says
  it holds a secret (`password`, `token`, `private_key`, ...) becomes `***`, and a URL's password
  is masked;
- known values: every secret value the operator's files hold (the secrets directory, passwords in
  URLs, values under secret-named keys) is replaced wherever it appears, in any text;
- patterns: PEM private keys, `Authorization`/`X-Auth-Token` headers, bearer tokens and
  `password=...` pairs are replaced in free text (log lines), whatever their value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from controller.config import mask_url

MASK = "***"

#: key names (any case, `-` or `_`) whose values are secrets
_SECRET_KEY = re.compile(
    r"(pass(word|wd|phrase)?|secret_?value|token|api_?key|private_?key|client_?secret|credential|"
    r"auth(orization)?|cookie|session_?key|bearer)s?$",
    re.IGNORECASE,
)
#: names that look like secrets but hold none: a secret's *name*, a file's path, a flag
_NOT_SECRET = frozenset(
    {"secret", "secrets_dir", "secrets_allow_readable", "tls_key", "callback_key", "key_file"}
)

_PEM = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.DOTALL
)
_HEADER = re.compile(
    r"(?i)\b(authorization|x-auth-token|proxy-authorization|cookie|set-cookie)([\"']?\s*[:=]\s*[\"']?)"
    r"[^\s\"',}]+(?: [^\s\"',}]+)?"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}")
_PAIR = re.compile(
    r"(?i)\b([A-Za-z0-9_-]*(?:password|passwd|secret_value|token|api_key|private_key|client_secret))"
    r"([\"']?\s*[:=]\s*[\"']?)([^\s\"',}&]+)"
)
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@]+:)([^\s@/]+)(@)")


def is_secret_key(name: str) -> bool:
    key = name.replace("-", "_").lower()
    return key not in _NOT_SECRET and bool(_SECRET_KEY.search(key))


def redact_document(value: Any) -> Any:
    """A parsed document with the values of secret-named keys masked and URL passwords hidden."""
    if isinstance(value, Mapping):
        return {
            k: MASK if is_secret_key(str(k)) and v not in (None, "") else redact_document(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact_document(v) for v in value]
    if isinstance(value, str) and "://" in value:
        return mask_url(value)
    return value


def secret_values(document: Any) -> set[str]:
    """The secret values a document holds: under secret-named keys, and URL passwords."""
    found: set[str] = set()
    if isinstance(document, Mapping):
        for k, v in document.items():
            if is_secret_key(str(k)) and isinstance(v, str | int) and str(v):
                found.add(str(v))
            else:
                found |= secret_values(v)
    elif isinstance(document, list | tuple):
        for v in document:
            found |= secret_values(v)
    elif isinstance(document, str) and "://" in document:
        try:
            password = urlsplit(document).password
        except ValueError:
            password = None
        if password:
            found.add(password)
    return found


def secrets_in_directory(directory: str | Path) -> set[str]:
    """The secret values in a secrets directory (controller/security/secrets.py: a JSON file per
    secret with `username` and `password`, or a directory with `username` and `password` files):
    every password, and the whole text of any other file that is not a username."""
    found: set[str] = set()
    root = Path(directory)
    if not str(directory) or not root.is_dir():
        return found
    for path in root.rglob("*"):
        try:
            if not path.is_file() or path.name == "username" or path.stat().st_size > 1 << 20:
                continue
            text = path.read_text(errors="replace").strip()
        except OSError:
            continue
        try:
            document = json.loads(text)
        except ValueError:
            document = None
        if isinstance(document, Mapping):
            found |= secret_values(document)
        elif text:
            found.add(text)
    return found


class Scrubber:
    """Replaces known secret values and secret patterns in text."""

    def __init__(self, known: Iterable[str] = ()) -> None:
        # short values (a 1-3 character word) would mask ordinary text and hide nothing: a secret
        # that short is not one; longest first, so a value inside another is not left half-shown
        self._known = sorted({v for v in known if len(v) >= 4}, key=len, reverse=True)

    def add(self, values: Iterable[str]) -> None:
        self._known = sorted({*self._known, *(v for v in values if len(v) >= 4)}, key=len, reverse=True)

    def text(self, text: str) -> str:
        for value in self._known:
            text = text.replace(value, MASK)
        text = _PEM.sub("-----PRIVATE KEY REDACTED-----", text)
        text = _URL_PASSWORD.sub(rf"\g<1>{MASK}\g<3>", text)
        text = _HEADER.sub(rf"\g<1>\g<2>{MASK}", text)
        text = _BEARER.sub(rf"\g<1> {MASK}", text)
        return _PAIR.sub(rf"\g<1>\g<2>{MASK}", text)
