"""`devicectl support-bundle`: a local archive (tar.gz) for a support case, as DPS 0.11's
`dpsctl support-bundle` makes one: a manifest records each source's result (ok, failed with the
reason, skipped), and exit 0 means the archive was written and verified, not that every source
answered. Unlike DPS's bundle it is masked: every member's text passes one scrubber
(`controller.observability.redact`) on its way into the archive, and the secrets directory, the
environment and raw config files never go in (only the effective settings and a parsed inventory).
"""

from __future__ import annotations

import io
import json
import os
import platform
import sys
import tarfile
import tomllib
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from controller.cli._channel import channel
from controller.cli._click import Group, call, client_options
from controller.cli._errors import UsageError
from controller.cli._options import Options
from controller.cli._render import as_dict, console, print_json
from controller.config import load_settings
from controller.observability.redact import (
    Scrubber,
    is_secret_key,
    redact_document,
    secret_values,
    secrets_in_directory,
)
from controller.observability.version import installed_version

#: lines of each log file kept (its end)
LOG_LINES = 5000
#: requests listed, and the newest of them shown whole (with their receipts)
REQUESTS, RECEIPTS = 200, 50
#: seconds each call to the controller may take
CALL_TIMEOUT = 10.0


@dataclass
class Bundle:
    """The members of the archive and each source's result, every text scrubbed on the way in."""

    scrubber: Scrubber
    members: dict[str, bytes] = field(default_factory=dict)
    sources: list[dict[str, str]] = field(default_factory=list)

    def add(self, name: str, content: Any) -> None:
        text = (
            content
            if isinstance(content, str)
            else json.dumps(content, indent=2, sort_keys=True, default=str)
        )
        self.members[name] = self.scrubber.text(text).encode()

    def source(self, name: str, collect: Callable[[], str | None]) -> None:
        """Run one source: it adds its members and returns None, or says why it was skipped."""
        try:
            skipped = collect()
        except Exception as exc:  # one line per source, never a traceback
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
            self.sources.append({"source": name, "result": "failed", "reason": self.scrubber.text(reason)})
            return
        if skipped:
            self.sources.append({"source": name, "result": "skipped", "reason": self.scrubber.text(skipped)})
        else:
            self.sources.append({"source": name, "result": "ok", "reason": ""})


def register(cli: Group) -> None:
    @cli.command("support-bundle")
    @click.option(
        "-o",
        "--output",
        "out",
        metavar="FILE",
        help="archive to write (default: devicectl-support-<UTC time>.tar.gz here)",
    )
    @click.option("--config", help="TOML config file (env DEVICECTL_CONFIG)")
    @click.option("--inventory", help="inventory TOML (default: the config's)")
    @click.option(
        "--secrets-dir", help="secrets directory: read only to mask its values (default: the config's)"
    )
    @click.option("--database-url", help="database for the schema version (default: the config's)")
    @click.option(
        "--log-file", multiple=True, metavar="FILE", help="a log file whose last lines go in (repeatable)"
    )
    @click.option("--metrics-url", help="URL of /metrics (default: from the config's metrics_listen)")
    @click.option("--json", "as_json", is_flag=True, default=False, help="print the manifest as JSON")
    @client_options
    def _support_bundle(**_: Any) -> int:
        """Write a local archive for a support case: config, inventory, recent logs, status, metrics,
        schema version, recent requests and receipts, and a manifest of each source's result.

        Secrets, tokens, passwords and private keys are masked; nothing is uploaded. Exit 0: the
        archive was written and verified (some sources may have failed: see its manifest)."""
        return call(support_bundle)


def support_bundle(args: Options) -> int:
    overrides = {
        k: getattr(args, k) for k in ("inventory", "secrets_dir", "database_url") if getattr(args, k)
    }
    try:
        settings = load_settings(args.config, overrides=overrides)
    except (OSError, ValueError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"support-bundle: cannot load the settings: {exc}") from None
    scrubber = Scrubber(_known_secrets(settings))
    bundle = Bundle(scrubber)
    now = datetime.now(UTC)
    bundle.add("version.json", _versions(now))
    bundle.source("config", lambda: _config(bundle, settings))
    bundle.source("inventory", lambda: _inventory(bundle, settings.inventory))
    bundle.source("logs", lambda: _logs(bundle, args.log_file))
    bundle.source("status", lambda: _status(bundle, args))
    bundle.source(
        "metrics", lambda: _metrics(bundle, args.metrics_url or _metrics_url(settings.metrics_listen))
    )
    bundle.source("schema", lambda: _schema(bundle, settings.database_url))
    bundle.source("requests", lambda: _requests(bundle, args))
    manifest = {
        "created_at": now.isoformat(),
        "devicectl": installed_version(),
        "masked": "secrets, tokens, passwords and private keys are replaced by ***",
        "sources": bundle.sources,
    }
    bundle.add("manifest.json", manifest)
    bundle.add("summary.txt", _summary(manifest))
    out = Path(args.out or f"devicectl-support-{now:%Y%m%dT%H%M%SZ}.tar.gz")
    _write(out, f"devicectl-support-{now:%Y%m%dT%H%M%SZ}", bundle.members)
    if args.as_json or args.json:  # --json here, or the root's -o json
        print_json({"archive": str(out), **manifest})
    else:
        console.print(f"wrote {out} ({out.stat().st_size} bytes, verified)")
        for s in bundle.sources:
            console.print(f"  {s['source']:<10} {s['result']}" + (f": {s['reason']}" if s["reason"] else ""))
    return 0


def _known_secrets(settings: Any) -> set[str]:
    """Every secret value this host's configuration knows, to mask wherever it appears."""
    known = secret_values({"database_url": settings.database_url})
    known |= secrets_in_directory(settings.secrets_dir)
    for name, value in os.environ.items():
        if is_secret_key(name) and value:
            known.add(value)
        elif "://" in value:
            known |= secret_values(value)
    if settings.inventory and Path(settings.inventory).is_file():
        try:
            known |= secret_values(tomllib.loads(Path(settings.inventory).read_text()))
        except (OSError, ValueError):
            pass
    return known


def _versions(now: datetime) -> dict[str, Any]:
    return {
        "devicectl": installed_version(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "created_at": now.isoformat(),
    }


def _config(bundle: Bundle, settings: Any) -> None:
    bundle.add("config.json", redact_document(settings.display()))


def _inventory(bundle: Bundle, path: str) -> str | None:
    if not path:
        return "no inventory configured"
    data = tomllib.loads(Path(path).read_text())
    bundle.add("inventory.json", redact_document(data))
    return None


def _logs(bundle: Bundle, files: tuple[str, ...]) -> str | None:
    if not files:
        return "no log file given (--log-file; a pod's logs: kubectl logs)"
    problems = []
    for index, name in enumerate(files):
        try:
            with open(name, "rb") as fh:
                lines = fh.read().decode(errors="replace").splitlines()[-LOG_LINES:]
        except OSError as exc:
            problems.append(f"{name}: {exc.strerror or exc}")
            continue
        bundle.add(f"logs/{index}-{Path(name).name}", "\n".join(lines) + "\n")
    if problems:
        raise OSError("; ".join(problems))
    return None


def _status(bundle: Bundle, args: Options) -> None:
    from google.protobuf import empty_pb2

    from controller._proto.devicecontroller.v1 import admin_pb2_grpc as agrpc

    with channel(args) as chan:
        status = agrpc.DeviceControllerAdminStub(chan).GetStatus(empty_pb2.Empty(), timeout=CALL_TIMEOUT)
    bundle.add("status.json", as_dict(status))


def _metrics_url(listen: str) -> str:
    if not listen:
        return ""
    host, _, port = listen.rpartition(":")
    host = "127.0.0.1" if host in ("", "0.0.0.0", "[::]", "::") else host
    return f"http://{host}:{port}/metrics"


def _metrics(bundle: Bundle, url: str) -> str | None:
    if not url:
        return "no metrics address (metrics_listen, or --metrics-url)"
    with urllib.request.urlopen(url, timeout=CALL_TIMEOUT) as reply:
        bundle.add("metrics.txt", reply.read().decode(errors="replace"))
    return None


def _schema(bundle: Bundle, url: str) -> None:
    from controller.store import Store

    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///").split("?", 1)[0]).is_file():
        raise FileNotFoundError(f"no SQLite database at {url.removeprefix('sqlite:///')}")
    status = Store.from_url(url).schema_status()
    bundle.add(
        "schema.json",
        {
            "current": status.current,
            "head": status.head,
            "up_to_date": status.up_to_date,
            "newer": status.newer,
        },
    )


def _requests(bundle: Bundle, args: Options) -> None:
    from controller._proto.devicecontroller.v1 import admin_pb2 as apb
    from controller._proto.devicecontroller.v1 import admin_pb2_grpc as agrpc

    with channel(args) as chan:
        admin = agrpc.DeviceControllerAdminStub(chan)
        rows = admin.ListRequests(apb.ListRequestsRequest(limit=REQUESTS), timeout=CALL_TIMEOUT).requests
        bundle.add("requests/list.json", [as_dict(r) for r in rows])
        whole = [
            as_dict(admin.GetRequest(apb.GetRequestRequest(request_id=r.request_id), timeout=CALL_TIMEOUT))
            for r in rows[:RECEIPTS]
        ]
    bundle.add("requests/recent-with-receipts.json", whole)


def _summary(manifest: dict[str, Any]) -> str:
    lines = [f"devicectl support bundle, {manifest['created_at']} (devicectl {manifest['devicectl']})", ""]
    for s in manifest["sources"]:
        lines.append(f"{s['source']:<10} {s['result']}" + (f": {s['reason']}" if s["reason"] else ""))
    return "\n".join(lines) + "\n"


def _write(out: Path, top: str, members: dict[str, bytes]) -> None:
    """Write the archive next to its final name, verify it reads back whole, then rename it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.partial")
    with tarfile.open(partial, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mode, info.mtime = len(data), 0o600, int(datetime.now(UTC).timestamp())
            tar.addfile(info, io.BytesIO(data))
    with tarfile.open(partial, "r:gz") as tar:
        names = {m.name for m in tar.getmembers()}
        if names != {f"{top}/{n}" for n in members}:
            raise OSError(f"{partial}: the archive did not read back whole")
    os.chmod(partial, 0o600)
    partial.replace(out)
