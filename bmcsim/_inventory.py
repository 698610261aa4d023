"""Inventory and secrets files describing a (simulated) fleet, for the controller, demo and benchmarks.

The inventory is TOML with one `[[device]]` table per BMC; credentials live apart from it, one file per
secret name holding `{"username": ..., "password": ...}`, like a Kubernetes secret mounted as files.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class InventoryEntry:
    """One device of an inventory file."""

    id: str
    url: str
    model: str
    secret: str
    ca_bundle: str
    username: str
    password: str = field(repr=False)
    plugin: str = "redfish"


def device_id(prefix: str, index: int, count: int) -> str:
    """`node001`-style ids: 1-based, zero-padded to at least three digits."""
    return f"{prefix}{index + 1:0{max(3, len(str(count)))}d}"


def render_inventory(entries: Iterable[InventoryEntry], *, header: str = "") -> str:
    """The TOML text of an inventory (no credentials in it)."""
    lines = [f"# {line}" for line in header.splitlines()]
    for entry in entries:
        lines += [
            "",
            "[[device]]",
            f"id = {_toml_str(entry.id)}",
            f"plugin = {_toml_str(entry.plugin)}",
            f"model = {_toml_str(entry.model)}",
            "[device.redfish]",
            f"url = {_toml_str(entry.url)}",
            f"secret = {_toml_str(entry.secret)}",
            f"ca_bundle = {_toml_str(entry.ca_bundle)}",
        ]
    return "\n".join(lines).lstrip("\n") + "\n"


def write_secrets(entries: Iterable[InventoryEntry], secrets_dir: str | os.PathLike[str]) -> list[Path]:
    """Write one 0600 file per secret name; entries sharing a secret must share credentials."""
    directory = Path(secrets_dir)
    directory.mkdir(parents=True, exist_ok=True)
    secrets: dict[str, tuple[str, str]] = {}
    for entry in entries:
        if not entry.secret or "/" in entry.secret or entry.secret.startswith("."):
            raise ValueError(f"invalid secret name {entry.secret!r}")
        creds = (entry.username, entry.password)
        if secrets.setdefault(entry.secret, creds) != creds:
            raise ValueError(f"secret {entry.secret!r} is used with different credentials")
    written = []
    for name, (username, password) in secrets.items():
        path = directory / name
        _atomic_write(path, json.dumps({"username": username, "password": password}) + "\n", mode=0o600)
        written.append(path)
    return written


def write_inventory(
    entries: Sequence[InventoryEntry],
    inventory_path: str | os.PathLike[str],
    secrets_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """Write the TOML inventory and the secrets directory; returns the secrets directory.

    `secrets_dir` defaults to `secrets/` next to the inventory file; its path is noted in a comment at
    the top of the inventory.
    """
    path = Path(inventory_path)
    secrets = Path(secrets_dir) if secrets_dir is not None else path.parent / "secrets"
    write_secrets(entries, secrets)
    header = f"devicectl inventory written by the BMC simulator\nsecrets: {secrets.resolve()}"
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(path, render_inventory(entries, header=header), mode=0o644)
    return secrets


def _toml_str(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    escaped = "".join(ch if ch >= " " and ch != "\x7f" else f"\\u{ord(ch):04x}" for ch in escaped)
    return f'"{escaped}"'


def _atomic_write(path: Path, text: str, *, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
