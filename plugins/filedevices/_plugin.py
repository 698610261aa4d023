"""The files of one directory as devices, after Nomad's example device plugin.

- fingerprint: one device per regular file, grouped by extension; healthy when readable; sent at
  once and again whenever files appear, disappear or change readability (polled every `list_period`)
- stats: size and line count of each file, and a digest of its contents
- reserve: a read-only mount of each file under /dev/files/, and FILE_DEVICES naming them
- ping: the power-operation extension's smallest example (counts pings in the device state)

Plugin config (`SetConfig`, or `[[plugin]] config` in the inventory): `dir`, `list_period`.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from plugins.base import (
    Attribute,
    ContainerReservation,
    Device,
    DeviceContext,
    DeviceGroup,
    DeviceGroupStats,
    DevicePlugin,
    DeviceStats,
    DeviceTarget,
    FingerprintResponse,
    HostEnvironmentError,
    InvalidRequestError,
    Mount,
    Outcome,
    Ping,
    PingResult,
    PluginInfo,
    StatObject,
    StatsResponse,
    StatValue,
    UnknownDeviceError,
)
from plugins.base.bounds import check_number

#: how much of a file the stats read (a digest of a huge file would stall the stream)
_READ_LIMIT = 1 << 20


class FileDevicesPlugin(DevicePlugin):
    info = PluginInfo(
        name="filedevices",
        version="0.1.0",
        vendor="devicectl",
        description="the files of a directory as devices (example plugin)",
    )

    def __init__(self) -> None:
        self._dir = Path(os.environ.get("DEVICECTL_FILEDEVICES_DIR", "."))
        self._period = 5.0

    # ---- plugin config ------------------------------------------------------------------------

    def plugin_config_schema(self) -> Mapping[str, Any]:
        return {
            "type": "object",
            "properties": {
                "dir": {
                    "type": "string",
                    "description": "directory whose files are the devices "
                    "(default: $DEVICECTL_FILEDEVICES_DIR, else the working directory)",
                },
                "list_period": {
                    "type": "number",
                    "default": 5,
                    "description": "seconds between directory scans",
                },
            },
        }

    def set_config(self, config: Mapping[str, Any]) -> None:
        """Config decoded with the schema above (unknown keys refused, defaults filled, nulls dropped)."""
        directory = config.get("dir", str(self._dir))
        if not isinstance(directory, str) or not Path(directory).is_dir():
            raise InvalidRequestError(f"dir: {directory!r} is not a directory")
        try:
            period = check_number(config.get("list_period", self._period), "list_period", positive=True)
        except ValueError as exc:
            raise InvalidRequestError(f"{exc} (seconds)") from None
        self._dir, self._period = Path(directory), float(period)

    # ---- Nomad's trio -------------------------------------------------------------------------

    def _files(self) -> dict[str, Path]:
        try:
            return {p.name: p for p in sorted(self._dir.iterdir()) if p.is_file()}
        except OSError as exc:
            raise HostEnvironmentError(f"cannot list {self._dir}: {exc.strerror}") from None

    def _groups(self) -> tuple[DeviceGroup, ...]:
        by_ext: dict[str, list[Path]] = {}
        for path in self._files().values():
            by_ext.setdefault(path.suffix.lstrip(".") or "plain", []).append(path)
        groups = []
        for ext, paths in sorted(by_ext.items()):
            devices = tuple(
                Device(
                    id=p.name,
                    healthy=os.access(p, os.R_OK),
                    health_description="" if os.access(p, os.R_OK) else "file is not readable",
                )
                for p in paths
            )
            total = sum(p.stat().st_size for p in paths)
            # Nomad has no plain byte unit (plugins/shared/structs/units.go): KiB, rounded up
            attributes = {"extension": Attribute(ext), "total_size": Attribute(-(-total // 1024), "KiB")}
            groups.append(
                DeviceGroup(vendor="devicectl", type="file", name=ext, devices=devices, attributes=attributes)
            )
        return tuple(groups)

    async def fingerprint(self, targets: Sequence[DeviceTarget]) -> AsyncIterator[FingerprintResponse]:
        last: tuple[tuple[str, bool], ...] | None = None
        while True:
            try:
                groups = self._groups()
            except HostEnvironmentError as exc:
                yield FingerprintResponse(error=exc)
            else:
                seen = tuple((d.id, d.healthy) for g in groups for d in g.devices)
                if seen != last:
                    last = seen
                    yield FingerprintResponse(groups=groups)
            await asyncio.sleep(self._period)

    async def stats(self, targets: Sequence[DeviceTarget], interval: float) -> AsyncIterator[StatsResponse]:
        while True:
            groups = []
            for group in self._groups():
                instance = {d.id: self._file_stats(self._dir / d.id) for d in group.devices if d.healthy}
                groups.append(DeviceGroupStats("devicectl", "file", group.name, instance))
            yield StatsResponse(groups=tuple(groups))
            await asyncio.sleep(interval)

    @staticmethod
    def _file_stats(path: Path) -> DeviceStats:
        with path.open("rb") as fh:
            data = fh.read(_READ_LIMIT)
        size = path.stat().st_size
        values = {
            "size": StatValue(int_numerator=size, unit="B", desc="file size"),
            "lines": StatValue(int_numerator=data.count(b"\n"), desc="newlines in the first MiB"),
            "sha256": StatValue(string=hashlib.sha256(data).hexdigest()[:16], desc="digest of the first MiB"),
        }
        return DeviceStats(
            summary=StatValue(int_numerator=size, unit="B", desc="file size"),
            stats=StatObject(attributes=values),
            timestamp=datetime.now(UTC),
        )

    async def reserve(self, device_ids: Sequence[str]) -> ContainerReservation:
        files = self._files()
        unknown = [d for d in device_ids if d not in files]
        if unknown:
            raise UnknownDeviceError(f"no such file device(s): {', '.join(unknown)}")
        mounts = tuple(Mount(f"/dev/files/{d}", str(files[d].resolve()), read_only=True) for d in device_ids)
        return ContainerReservation(envs={"FILE_DEVICES": ",".join(device_ids)}, mounts=mounts)

    # ---- a power operation --------------------------------------------------------------------

    async def ping(self, ctx: DeviceContext, req: Ping) -> Outcome[PingResult]:
        name = str(ctx.model.get("file", ctx.device_id))
        path = self._dir / name
        if not path.is_file():
            return Outcome(PingResult(ok=False, error=f"no file {name!r} in {self._dir}"))
        if not os.access(path, os.R_OK):
            return Outcome(PingResult(ok=False, error=f"file {name!r} is not readable"))
        pings = int(ctx.state.get("pings", 0)) + 1
        return Outcome(PingResult(ok=True), state={**ctx.state, "pings": pings}, reached_at=datetime.now(UTC))
