"""A read-only walk of a real BMC into a directory the simulator can replay (`devicectl bmc-capture`).

The walk starts at `/redfish/v1` and follows every `@odata.id` (and `@Redfish.ActionInfo`) link,
breadth first, bounded by depth and count, at most `rate` requests a second. It only ever sends GET,
plus one session login (POST to `SessionService/Sessions`) and that session's logout (DELETE): nothing
on the BMC is written. With an allow-list (e.g. `--dps-proxy`: the DPS proxy's), paths off the list are
never requested; a 403 (a proxy) or 404 is recorded and the walk goes on.

Skipped: other sessions and accounts (`Sessions/{id}`, `Accounts/{id}`: user names), task monitors,
`JsonSchemas`, `$metadata` and log entries (`…/Entries`): the simulator serves its own sessions,
accounts and tasks.

Every document is scrubbed before it is written (`scrub`), by these rules:

1. credentials: a property whose name contains Password, Passphrase, Secret, Token, Community,
   Credential or ends in Key has its value replaced by null;
2. serial numbers: `SerialNumber`, `PartSerialNumber`, `AssetTag` (any property ending in
   SerialNumber) become "REDACTED";
3. addresses: any MAC address in a string becomes 00:00:5E:00:53:00 (RFC 7042's documentation MAC),
   any IPv4 address 192.0.2.1 (RFC 5737), any IPv6 address 2001:db8::1 (RFC 3849), and `HostName`/
   `FQDN` values "bmc.example" — except in properties whose name contains "Version" (firmware versions
   look like addresses);
4. headers: only their shape is kept (ETag strong/weak/absent, whether it changes between two reads,
   session login behaviour, each resource's `Allow` methods); tokens, cookies and the BMC's address
   are never written.

Output: `DIR/index.json` (= `/redfish/v1`), `DIR/Chassis/1/index.json`, … (DMTF's mockup layout),
plus `DIR/capture.json` (what was observed and skipped). Serve it with `devicectl bmc-sim --model
capture:DIR`. The command line (arguments, the secret store, exit codes) is the controller's
(`controller/cli/_capture.py`); this module takes the credentials as arguments.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import ssl
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

ROOT = "/redfish/v1"
SESSIONS = f"{ROOT}/SessionService/Sessions"
#: paths never requested: other users' sessions and accounts, monitors, schemas, log entries
_SKIP = (
    re.compile(r"/redfish/v1/SessionService/Sessions/.+"),
    re.compile(r"/redfish/v1/AccountService/Accounts/.+"),
    re.compile(r"/redfish/v1/TaskService/TaskMonitors(/.*)?"),
    re.compile(r"/redfish/v1/JsonSchemas(/.*)?"),
    re.compile(r"/redfish/v1/\$metadata"),
    re.compile(r".*/Entries(/.*)?"),
)
_SECRET_NAME = re.compile(r"(?i)(password|passphrase|secret|token|community|credential|key$)")
_SERIAL_NAME = re.compile(r"(?i)(serialnumber$|^assettag$)")
_HOST_NAME = re.compile(r"(?i)^(hostname|fqdn)$")
_MAC = re.compile(r"(?<![0-9A-Fa-f:])[0-9A-Fa-f]{2}(?:[:-][0-9A-Fa-f]{2}){5}(?![0-9A-Fa-f:])")
_IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])")
_IPV6 = re.compile(r"(?<![0-9A-Fa-f:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![0-9A-Fa-f:])")
DOC_MAC, DOC_IPV4, DOC_IPV6, DOC_HOST = "00:00:5E:00:53:00", "192.0.2.1", "2001:db8::1", "bmc.example"
REDACTED = "REDACTED"


def scrub(value: Any, name: str = "") -> Any:
    """A copy of a JSON value with credentials, serial numbers and addresses replaced (module rules)."""
    if isinstance(value, dict):
        return {key: scrub(item, key) for key, item in value.items()}
    if isinstance(value, list):
        return [scrub(item, name) for item in value]
    if not name.startswith("@") and _SECRET_NAME.search(name):
        return None
    if not isinstance(value, str):
        return value
    if _SERIAL_NAME.search(name):
        return REDACTED
    if _HOST_NAME.match(name) and value:
        return DOC_HOST
    if "version" in name.lower():
        return value
    return scrub_addresses(value)


def scrub_addresses(text: str) -> str:
    """`text` with MAC, IPv4 and IPv6 addresses replaced by documentation addresses."""
    text = _MAC.sub(DOC_MAC, text)
    text = _IPV4.sub(lambda m: DOC_IPV4 if _is_ip(m.group(0)) else m.group(0), text)
    return _IPV6.sub(lambda m: DOC_IPV6 if _is_ip(m.group(0)) and m.group(0) != DOC_MAC else m.group(0), text)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


@dataclass
class CaptureOptions:
    """Bounds and manners of a capture walk."""

    max_depth: int = 12
    max_resources: int = 2000
    rate: float = 20.0  # requests per second, at most
    #: GET path patterns (`*` = within one segment) the walk may request; None: any
    allow_list: tuple[str, ...] | None = None
    timeout: float = 30.0


@dataclass
class CaptureResult:
    """What a capture wrote and observed."""

    resources: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


class _Capture:
    def __init__(self, http: aiohttp.ClientSession, base: str, options: CaptureOptions) -> None:
        self.http = http
        self.base = base
        self.options = options
        self.headers: dict[str, str] = {}
        self._last = 0.0
        self._allowed = [_glob(p) for p in options.allow_list] if options.allow_list is not None else None
        # (parent pattern, last segment) of every allow-list entry: what may lie below a refused path
        self._children = [(_glob(p.rsplit("/", 1)[0]), p.rsplit("/", 1)[1]) for p in options.allow_list or ()]

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any, Any]:
        wait = self._last + 1.0 / self.options.rate - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        self._last = time.monotonic()
        timeout = aiohttp.ClientTimeout(total=self.options.timeout)
        async with self.http.request(
            method, self.base + path, json=body, headers=self.headers, timeout=timeout
        ) as resp:
            text = await resp.text()
            try:
                parsed = json.loads(text) if text else None
            except ValueError:
                parsed = None
            return resp.status, resp.headers, parsed

    def allowed(self, path: str) -> bool:
        return self._allowed is None or any(p.fullmatch(path) for p in self._allowed)

    def allowed_children(self, path: str) -> list[str]:
        """Allowed resources right below a path the list refuses (a proxy may allow
        `Chassis/X/EnvironmentMetrics` but not `Chassis/X`, which links it): asked for directly."""
        children = [
            f"{path}/{tail}" for parent, tail in self._children if "*" not in tail and parent.fullmatch(path)
        ]
        return [c for c in children if self.allowed(c)]


def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile("[^/]*".join(re.escape(part) for part in pattern.split("*")))


async def capture(
    url: str,
    username: str,
    password: str,
    out: Path,
    *,
    ssl_context: ssl.SSLContext | bool = True,
    options: CaptureOptions | None = None,
) -> CaptureResult:
    """Walk the BMC at `url` read-only and write the scrubbed capture to `out`."""
    options = options or CaptureOptions()
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError("--url must be an http(s) URL of the BMC, e.g. https://bmc.example")
    base = f"{parts.scheme}://{parts.netloc}"
    out.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - once, before any request
    result = CaptureResult()
    connector = aiohttp.TCPConnector(ssl=ssl_context, limit=1)
    async with aiohttp.ClientSession(connector=connector) as http:
        walker = _Capture(http, base, options)
        session_path = await _login(walker, username, password, result)
        try:
            await _walk(walker, out, result)
            await _etag_behaviour(walker, result)
        finally:
            if session_path:
                status, _, _ = await walker.request("DELETE", session_path)
                result.meta["session"]["logout_status"] = status
    result.meta.update(
        {
            "format": 1,
            "resources": result.resources,
            "skipped": result.skipped,
            "scheme": parts.scheme,
            "scrub_rules": "bmcsim/capture.py (credentials, serials, MAC/IP/host names, headers)",
        }
    )
    (out / "capture.json").write_text(json.dumps(result.meta, indent=2, sort_keys=True) + "\n")
    return result


async def _login(walker: _Capture, username: str, password: str, result: CaptureResult) -> str | None:
    creds = {"UserName": username, "Password": password}
    status, headers, _ = await walker.request("POST", SESSIONS, creds)
    token = headers.get("X-Auth-Token")
    location = headers.get("Location")
    result.meta["session"] = {
        "login_status": status,
        "token_header": bool(token),
        "location_header": bool(location),
    }
    if status not in (200, 201) or not token:
        raise PermissionError(f"login refused (HTTP {status}): check the secret's user name and password")
    walker.headers = {"X-Auth-Token": token}
    return urlsplit(location).path if location else None


async def _walk(walker: _Capture, out: Path, result: CaptureResult) -> None:
    options = walker.options
    queue: deque[tuple[str, int]] = deque([(ROOT, 0)])
    seen = {ROOT}
    etags: dict[str, int] = {"strong": 0, "weak": 0, "none": 0, "odata.etag": 0}
    allow: dict[str, str] = {}
    while queue and result.resources < options.max_resources:
        path, depth = queue.popleft()
        if any(p.fullmatch(path) for p in _SKIP) or not walker.allowed(path):
            result.skipped[path] = "not requested (skip rule or allow-list)"
            for child in walker.allowed_children(path):
                if child not in seen and depth < options.max_depth:
                    seen.add(child)
                    queue.append((child, depth + 1))
            continue
        status, headers, body = await walker.request("GET", path)
        if status != 200 or not isinstance(body, dict):
            result.skipped[path] = f"HTTP {status}"
            continue
        etag = headers.get("ETag")
        if headers.get("Allow"):
            allow[path] = ", ".join(
                m.strip().upper() for m in headers["Allow"].split(",") if m.strip().isalpha()
            )
        etags["none" if etag is None else "weak" if etag.startswith("W/") else "strong"] += 1
        etags["odata.etag"] += "@odata.etag" in body
        body.pop("@odata.etag", None)  # the simulator makes its own
        _write(out, path, scrub(body))
        result.resources += 1
        if depth < options.max_depth:
            for link in _links(body):
                if link not in seen:
                    seen.add(link)
                    queue.append((link, depth + 1))
    for path, _ in queue:
        result.skipped[path] = "beyond --max-resources"
    result.meta["etag"] = etags
    result.meta["allow"] = allow  # methods per resource, as the BMC's Allow header said


async def _etag_behaviour(walker: _Capture, result: CaptureResult) -> None:
    """Whether ETags change between two reads of an unchanged resource (a hash over live readings)."""
    for path in (f"{ROOT}/Chassis", ROOT):
        _, first, _ = await walker.request("GET", path)
        _, second, _ = await walker.request("GET", path)
        if first.get("ETag"):
            result.meta["etag"]["stable_between_reads"] = first.get("ETag") == second.get("ETag")
            return


def _links(body: Any) -> list[str]:
    found: list[str] = []
    stack = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("@odata.id", "@Redfish.ActionInfo") and isinstance(value, str):
                    path = value.split("#")[0].rstrip("/")
                    if path.startswith(f"{ROOT}/"):
                        found.append(path)
                else:  # into Actions too: its ActionInfo links are resources (targets are not followed)
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _write(out: Path, path: str, body: dict[str, Any]) -> None:
    relative = path[len(ROOT) :].strip("/")
    segments = [s for s in relative.split("/") if s]
    if any(s in (".", "..") or "\\" in s or "\0" in s for s in segments):
        raise ValueError(f"refusing to write resource path {path!r}")
    directory = out.joinpath(*segments)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "index.json").write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
