"""Secrets by name: a directory with one entry per name (as a mounted Kubernetes secret), or
environment variables. Values are never stored, logged or echoed; errors name only the secret.

Accepted layouts for secret `node001`:
- `<dir>/node001` — a file holding `{"username": ..., "password": ...}`;
- `<dir>/node001/bmc` — the same JSON (`kubectl create secret ... --from-literal=bmc='{...}'`);
- `<dir>/node001/username` and `<dir>/node001/password` — one value per file;
- environment `DEVICECTL_SECRET_NODE001` holding the JSON (name upper-cased, `-` and `.` as `_`).

A secret file readable by group or others is refused (`secrets_allow_readable` turns that into a
warning), as ssh does with private keys: on a shared host anyone could read the BMC password.

Which secret may be sent where is the operator's decision (`SecretPolicy`): a secret is usable for
the exact BMC origin of each inventory device that names it, and for the hosts or networks its
`[secrets.<name>] allow` list in the inventory gives. A request's model can name a secret, but
never send it to a URL the operator did not allow.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import logging
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from plugins.base import Credentials, HostEnvironmentError

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


class SecretStore:
    """Resolves secret names to credentials, as their files hold them now (rotation-friendly).

    Each lookup stats the secret's files (following links, as a mounted Kubernetes secret swaps
    its `..data` link on rotation) and reads a file again only when its device, inode, size,
    modification time or mode changed since it was last read; a file that is gone or changed is
    read afresh. The stat keeps the mode check on every lookup. Reading the files on every
    request was about 2% of a steady wave's CPU (BENCHMARKS.md, "The collector during a wave")."""

    def __init__(
        self,
        directory: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        *,
        policy: SecretPolicy | None = None,
        allow_readable: bool = False,
    ) -> None:
        self._dir = Path(directory) if directory else None
        self._env = os.environ if env is None else env
        self.policy = policy or SecretPolicy()
        self.allows_readable = allow_readable
        self._warned: set[Path] = set()
        #: path -> (what its stat said when it was read, its text)
        self._texts: dict[Path, tuple[tuple[int, ...], str]] = {}

    def credentials(self, name: str, *, for_url: str | None = None) -> Credentials:
        """The username/password of secret `name`; with `for_url`, only if the policy allows it there.

        Raises:
            HostEnvironmentError: the secret is missing, malformed, readable by others, or not allowed
                for `for_url` (the message names only the secret and the URL's origin).
        """
        if not _NAME.match(name):
            raise HostEnvironmentError(f"secret name {name[:64]!r} is not a valid name")
        if for_url is not None:
            self.policy.check(name, for_url)
        raw = self._read(name)
        if raw is None:
            where = f"{self._dir}/{name}" if self._dir else "no secrets directory configured"
            raise HostEnvironmentError(f"secret {name!r} not found ({where}; or set {self._env_key(name)})")
        if isinstance(raw, tuple):
            return Credentials(raw[0], raw[1])
        try:
            data = json.loads(raw)
            return Credentials(str(data["username"]), str(data["password"]))
        except (ValueError, KeyError, TypeError):
            raise HostEnvironmentError(
                f"secret {name!r} is malformed: expected JSON with username and password"
            ) from None

    def _read(self, name: str) -> str | tuple[str, str] | None:
        if self._dir is None:
            return self._env.get(self._env_key(name))
        path = self._dir / name
        read: list[Path] = []
        found = self._read_files(name, path, read)
        # a file this lookup did not read (gone, or another layout now) keeps no text here
        for candidate in (path, path / "bmc", path / "username", path / "password"):
            if candidate not in read:
                self._texts.pop(candidate, None)
        return found if found is not None else self._env.get(self._env_key(name))

    def _read_files(self, name: str, path: Path, read: list[Path]) -> str | tuple[str, str] | None:
        """The secret from its files under `path` (each file read is added to `read`), if any."""
        found = _stat(path)
        if found is not None and stat.S_ISREG(found.st_mode):
            return self._text(name, path, found, read)
        if found is None or not stat.S_ISDIR(found.st_mode):
            return None
        bmc = path / "bmc"
        found = _stat(bmc)
        if found is not None and stat.S_ISREG(found.st_mode):
            return self._text(name, bmc, found, read)
        user, pw = path / "username", path / "password"
        user_found, pw_found = _stat(user), _stat(pw)
        if (
            user_found is None
            or pw_found is None
            or not stat.S_ISREG(user_found.st_mode)
            or not stat.S_ISREG(pw_found.st_mode)
        ):
            return None
        return (
            self._text(name, user, user_found, read).strip(),
            self._text(name, pw, pw_found, read).rstrip("\n"),
        )

    def files(self, name: str) -> list[Path]:
        """The files secret `name` would be read from (none when it lives in the environment)."""
        if self._dir is None or not _NAME.match(name):
            return []
        path = self._dir / name
        if path.is_file():
            return [path]
        if path.is_dir():
            if (path / "bmc").is_file():
                return [path / "bmc"]
            return [p for p in (path / "username", path / "password") if p.is_file()]
        return []

    def readable_by_others(self, name: str) -> list[str]:
        """A one-line problem per file of secret `name` that group or others may read."""
        problems = []
        for path in self.files(name):
            mode = stat.S_IMODE(path.stat().st_mode)  # follows symlinks (Kubernetes ..data links)
            if mode & 0o077:
                problems.append(
                    f"secret {name!r}: {path} is readable by group or others (mode {mode:04o}); "
                    "chmod 600 it (Kubernetes: defaultMode 0400), or set secrets_allow_readable = true"
                )
        return problems

    def _text(self, name: str, path: Path, found: os.stat_result, read: list[Path]) -> str:
        mode = stat.S_IMODE(found.st_mode)
        if mode & 0o077:
            if not self.allows_readable:
                raise HostEnvironmentError(
                    f"secret {name!r} refused: its file is readable by group or others (mode {mode:04o}); "
                    "chmod 600 it, or set secrets_allow_readable = true"
                )
            if path not in self._warned:
                self._warned.add(path)
                log.warning("secret %r: %s is readable by group or others (mode %04o)", name, path, mode)
        read.append(path)
        seen = (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)
        kept = self._texts.get(path)
        if kept is not None and kept[0] == seen:
            return kept[1]
        text = path.read_text()
        self._texts[path] = (seen, text)
        return text

    @staticmethod
    def _env_key(name: str) -> str:
        return "DEVICECTL_SECRET_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def _stat(path: Path) -> os.stat_result | None:
    """`path`'s stat (links followed), or None where there is nothing to read."""
    try:
        return path.stat()
    except OSError as exc:
        if exc.errno in _ABSENT:
            return None
        raise


#: what `Path.is_file()` counts as "no file" (CPython's pathlib `_IGNORED_ERRNOS`)
_ABSENT = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)


def origin(url: str) -> str:
    """`scheme://host:port` of a URL, lower-cased, with the default port filled in ("" if unusable)."""
    try:
        parts = urlsplit(url if "://" in url else f"https://{url}")
        port = parts.port
    except ValueError:
        return ""
    if parts.scheme not in ("https", "http") or not parts.hostname:
        return ""
    host = parts.hostname.lower()
    port = port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{f'[{host}]' if ':' in host else host}:{port}"


class SecretPolicy:
    """Which secret may be sent to which BMC: the operator's inventory decides, never a request.

    `bound`: secret -> the exact origins of the inventory devices that use it. `allow`: secret ->
    patterns from the inventory's `[secrets.<name>] allow`: a host name, `*.domain`, an IP address
    or a CIDR network, each optionally with `:port`; `*` allows any host (not recommended).
    """

    def __init__(
        self,
        bound: Mapping[str, Iterable[str]] | None = None,
        allow: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self._bound = {k: {origin(u) for u in v} - {""} for k, v in (bound or {}).items()}
        self._allow = {k: tuple(v) for k, v in (allow or {}).items()}

    def check(self, secret: str, url: str) -> None:
        """Raise HostEnvironmentError unless `secret` may be sent to `url`."""
        target = origin(url)
        if target and (
            target in self._bound.get(secret, ()) or _allowed(target, self._allow.get(secret, ()))
        ):
            return
        shown = target or "(no usable URL)"
        raise HostEnvironmentError(
            f"secret {secret!r} is not allowed for {shown}: the operator binds secrets to the inventory "
            f"devices that use them and to the hosts listed in [secrets.{secret}] allow"
        )


def _allowed(target: str, patterns: Sequence[str]) -> bool:
    parts = urlsplit(target)
    host, port = (parts.hostname or "").lower(), parts.port
    for pattern in patterns:
        pattern = pattern.strip().lower()
        want_port: int | None = None
        if pattern.count(":") == 1 and "/" not in pattern.split(":")[1]:
            pattern, _, port_text = pattern.partition(":")
            want_port = int(port_text) if port_text.isdigit() else -1
        pattern = pattern.strip("[]")
        if want_port is not None and want_port != port:
            continue
        if pattern == "*" or pattern == host:
            return True
        if pattern.startswith("*.") and host.endswith(pattern[1:]):
            return True
        try:
            network = ipaddress.ip_network(pattern, strict=False)
            if ipaddress.ip_address(host) in network:
                return True
        except ValueError:
            continue
    return False
