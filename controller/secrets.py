"""Secrets by name: a directory with one entry per name (as a mounted Kubernetes secret), or
environment variables. Values are never stored, logged or echoed; errors name only the secret.

Accepted layouts for secret `node001`:
- `<dir>/node001` — a file holding `{"username": ..., "password": ...}`;
- `<dir>/node001/bmc` — the same JSON (`kubectl create secret ... --from-literal=bmc='{...}'`);
- `<dir>/node001/username` and `<dir>/node001/password` — one value per file;
- environment `DEVICECTL_SECRET_NODE001` holding the JSON (name upper-cased, `-` and `.` as `_`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

from plugins.base import Credentials, HostEnvironmentError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


class SecretStore:
    """Resolves secret names to credentials, reading them afresh each time (rotation-friendly)."""

    def __init__(self, directory: str | Path | None = None, env: Mapping[str, str] | None = None) -> None:
        self._dir = Path(directory) if directory else None
        self._env = os.environ if env is None else env

    def credentials(self, name: str) -> Credentials:
        """The username/password of secret `name`.

        Raises:
            HostEnvironmentError: the secret is missing or malformed (the message names only the secret).
        """
        if not _NAME.match(name):
            raise HostEnvironmentError(f"secret name {name!r} is not a valid name")
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
        if self._dir is not None:
            path = self._dir / name
            if path.is_file():
                return path.read_text()
            if path.is_dir():
                if (path / "bmc").is_file():
                    return (path / "bmc").read_text()
                user, pw = path / "username", path / "password"
                if user.is_file() and pw.is_file():
                    return (user.read_text().strip(), pw.read_text().rstrip("\n"))
        return self._env.get(self._env_key(name))

    @staticmethod
    def _env_key(name: str) -> str:
        return "DEVICECTL_SECRET_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()
