"""The NVML plugin's plugin-level config: what a Nomad operator writes in
`plugin "nvml" { config { ... } }` (or devicectl's `[[plugin]] config`).

The first three settings are nomad-device-nvidia's (`enabled`, `ignored_gpu_ids`,
`fingerprint_period`), so a node moving from that plugin keeps its config; `stream_timeout` is
ours. Every attribute may be null (not set): Nomad sends them all, and the defaults fill in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from plugins.base import DeviceGroup, DeviceGroupStats, InvalidRequestError
from plugins.base.bounds import check_number
from plugins.base.plugin_config import parse_duration

SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "enabled": {"type": "boolean", "default": True, "description": "report this node's GPUs at all"},
        "ignored_gpu_ids": {
            "type": "array",
            "items": {"type": "string"},
            "default": [],
            "description": "GPU UUIDs never fingerprinted, measured or reserved",
        },
        "fingerprint_period": {
            "type": "string",
            "default": "30s",
            "description": "how often to look for GPUs (a Go duration; nomad-device-nvidia's default is 1m)",
        },
        "stream_timeout": {
            "type": "number",
            "default": 10,
            "description": "the most seconds one fingerprint/stats poll or reserve waits for NVML",
        },
    },
}


@dataclass(frozen=True)
class PluginConfig:
    enabled: bool = True
    ignored_gpu_ids: frozenset[str] = frozenset()
    fingerprint_period: float = 30.0
    stream_timeout: float = 10.0

    @classmethod
    def parse(cls, config: Mapping[str, Any]) -> PluginConfig:
        period = parse_duration(str(config.get("fingerprint_period", "30s")), "fingerprint_period")
        try:
            period = check_number(period, "fingerprint_period", positive=True)
            timeout = float(check_number(config.get("stream_timeout", 10.0), "stream_timeout", positive=True))
        except ValueError as exc:
            raise InvalidRequestError(f"config: {exc}") from None
        ids = frozenset(str(i) for i in config.get("ignored_gpu_ids", ()))
        return cls(bool(config.get("enabled", True)), ids, period, timeout)

    def visible(self, groups: tuple[Any, ...]) -> tuple[Any, ...]:
        """Fingerprint or stats groups without the ignored GPUs (none at all when disabled)."""
        if not self.enabled:
            return ()
        if not self.ignored_gpu_ids:
            return groups
        out: list[Any] = []
        for group in groups:
            if isinstance(group, DeviceGroup):
                devices = tuple(d for d in group.devices if d.id not in self.ignored_gpu_ids)
                if devices:
                    out.append(replace(group, devices=devices))
            elif isinstance(group, DeviceGroupStats):
                stats = {k: v for k, v in group.instance_stats.items() if k not in self.ignored_gpu_ids}
                if stats:
                    out.append(replace(group, instance_stats=stats))
        return tuple(out)

    def check_reserve(self, device_ids: Sequence[str]) -> None:
        refused = [d for d in device_ids if d in self.ignored_gpu_ids or not self.enabled]
        if refused:
            raise InvalidRequestError(f"GPU(s) {', '.join(refused)} are not offered (this plugin's config)")
