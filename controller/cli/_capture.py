"""`devicectl bmc-capture`: the command line around `bmcsim.capture`.

Takes the flags, reads the BMC's user name and password from the controller's secret store and
turns the outcome into an exit status and one line (never a traceback, never the password).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
from pathlib import Path
from typing import Any

import click

from controller.cli._options import Options


def capture_options(f: Any) -> Any:
    """`devicectl bmc-capture` flags."""
    for decorator in reversed(
        (
            click.option("--url", required=True, help="the BMC's base URL, e.g. https://10.0.0.5"),
            click.option(
                "--secret", required=True, help="name of the secret holding the BMC user name and password"
            ),
            click.option(
                "--secrets-dir",
                default=None,
                help="secrets directory (default: DEVICECTL_SECRET_<NAME> variables)",
            ),
            click.option(
                "--out",
                type=click.Path(path_type=Path),
                required=True,
                help="directory to write the capture to",
            ),
            click.option("--ca-bundle", default=None, help="CA bundle to verify the BMC's certificate"),
            click.option(
                "--insecure",
                "skip_tls_verify",  # not the root's --insecure, which is about the controller's address
                is_flag=True,
                default=False,
                help="do not verify the BMC's TLS certificate",
            ),
            click.option(
                "--max-depth", type=int, default=12, help="links to follow from the service root (default 12)"
            ),
            click.option(
                "--max-resources", type=int, default=2000, help="resources to read at most (default 2000)"
            ),
            click.option("--rate", type=float, default=20.0, help="requests per second at most (default 20)"),
            click.option(
                "--dps-proxy", is_flag=True, default=False, help="read only what NVIDIA's DPS proxy allows"
            ),
            click.option(
                "--topology-model", default=None, help="model string to record for replays (e.g. DGX_GB200)"
            ),
        )
    ):
        f = decorator(f)
    return f


def cmd_capture(args: Options) -> int:
    """Run a capture; returns the process exit status (errors are one line, never a traceback)."""
    from bmcsim.capture import CaptureOptions, capture  # the capture tool, only for this command
    from controller.security.secrets import SecretStore

    if args.max_depth < 1 or args.max_resources < 1 or args.rate <= 0:
        print("bmc-capture: --max-depth, --max-resources and --rate must be positive", file=sys.stderr)
        return 2
    allow: tuple[str, ...] | None = None
    if args.dps_proxy:
        from bmcsim import DPS_ALLOW_LIST  # the simulator, only for this flag

        allow = tuple(pattern for methods, pattern in DPS_ALLOW_LIST if "GET" in methods.split(","))
    options = CaptureOptions(args.max_depth, args.max_resources, args.rate, allow)
    ctx: ssl.SSLContext | bool = (
        False if args.skip_tls_verify else ssl.create_default_context(cafile=args.ca_bundle)
    )
    try:
        creds = SecretStore(args.secrets_dir).credentials(args.secret)
        result = asyncio.run(
            capture(args.url, creds.username, creds.password, args.out, ssl_context=ctx, options=options)
        )
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # one line for the operator, never a traceback (and never the password)
        print(f"bmc-capture: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.topology_model:
        meta_file = args.out / "capture.json"
        meta = json.loads(meta_file.read_text())
        meta["topology_model"] = args.topology_model
        meta_file.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    print(f"bmc-capture: {result.resources} resources in {args.out} ({len(result.skipped)} skipped)")
    return 0
