"""`python -m bench.reply_parse`: CPU per reply parsed by the Redfish HTTP client's connection, alone.

The reply framing (`plugins.redfish._wire.http_connection.Connection`: the status line, headers, body,
keep-alive) is fed the bytes of a typical BMC reply through its `asyncio.Protocol` methods, with
no socket, TLS or event-loop turn around it, so a change of parser can be compared with the code
before it (`--against`). Replies: the simulator's GET
of a power resource (Content-Length, about 1 KiB of JSON) whole and in two reads, and a chunked one.
`--against FILE` alternates the rounds with another checkout's parser in this same process.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from plugins.redfish._wire.http_connection import Connection

_BODY = json.dumps(
    {
        "@odata.id": "/redfish/v1/Chassis/1/EnvironmentMetrics",
        "@odata.type": "#EnvironmentMetrics.v1_3_0.EnvironmentMetrics",
        "@odata.etag": '"1a2b3c4d"',
        "Id": "EnvironmentMetrics",
        "Name": "Chassis Environment Metrics",
        "PowerLimitWatts": {
            "SetPoint": 500,
            "AllowableMin": 100,
            "AllowableMax": 1000,
            "ControlMode": "Manual",
        },
        "PowerWatts": {"Reading": 412.5, "DataSourceUri": "/redfish/v1/Chassis/1/Sensors/Power"},
        "Oem": {"Vendor": {"Note": "x" * 600}},
    }
).encode()
_HEAD = (
    "HTTP/1.1 200 OK\r\n"
    "Content-Type: application/json; charset=utf-8\r\n"
    'ETag: "1a2b3c4d"\r\n'
    "OData-Version: 4.0\r\n"
    "Link: <https://redfish.dmtf.org/schemas/v1/EnvironmentMetrics.v1_3_0.json>; rel=describedby\r\n"
    "Cache-Control: no-cache\r\n"
    "Date: Sat, 28 Nov 2026 15:00:00 GMT\r\n"
    "Server: Python/3.11 aiohttp/3.14.5\r\n"
    "Allow: GET, PATCH\r\n"
)
WHOLE = f"{_HEAD}Content-Length: {len(_BODY)}\r\n\r\n".encode() + _BODY
CHUNKED = f"{_HEAD}Transfer-Encoding: chunked\r\n\r\n".encode() + b"%x\r\n%s\r\n0\r\n\r\n" % (
    len(_BODY),
    _BODY,
)
_REQUEST = b"GET /redfish/v1/Chassis/1/EnvironmentMetrics HTTP/1.1\r\nHost: bmc\r\n\r\n"


class _Sink(asyncio.Transport):
    """A transport that takes writes and nothing else (no socket: only the parse is measured)."""

    def write(self, data: Any) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def _run(connection: type[Connection], loop: asyncio.AbstractEventLoop, parts: list[bytes], n: int) -> float:
    conn = connection(loop)
    conn.connection_made(_Sink())
    started = time.process_time()
    for _ in range(n):
        waiter = conn.send(_REQUEST, False)
        for part in parts:
            conn.data_received(part)
        assert waiter.result().status == 200 and conn.reusable
    return (time.process_time() - started) / n


def _other(path: str) -> type[Connection]:
    """`Connection` of another checkout's `_http_connection.py` (it imports nothing of the project)."""
    spec = importlib.util.spec_from_file_location("other_http_connection", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Connection  # type: ignore[no-any-return]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10000, help="replies per round (default 10000)")
    parser.add_argument("--rounds", type=int, default=15, help="rounds; the least is shown (default 15)")
    parser.add_argument(
        "--against",
        metavar="FILE",
        help="another `plugins/redfish/_wire/http_connection.py` (e.g. a checkout of the code before a "
        "change): its rounds alternate with this tree's in this process",
    )
    args = parser.parse_args(argv)
    loop = asyncio.new_event_loop()
    sides: dict[str, type[Connection]] = {"this tree": Connection}
    if args.against:
        sides = {"against": _other(args.against), **sides}
    cut = WHOLE.index(b"\r\n\r\n") + 100
    cases = {"content-length": [WHOLE], "two reads": [WHOLE[:cut], WHOLE[cut:]], "chunked": [CHUNKED]}
    for name, parts in cases.items():
        rounds: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(args.rounds):  # alternating: a host getting busier weighs on both alike
            for side, connection in sides.items():
                rounds[side].append(_run(connection, loop, parts, args.calls) * 1e6)
        least = {side: min(values) for side, values in rounds.items()}
        line = ", ".join(f"{side} {value:.2f}" for side, value in least.items())
        ratio = f" (this tree ÷ against {least['this tree'] / least['against']:.3f})" if args.against else ""
        print(f"{name:15} µs per reply, the least of {args.rounds} rounds: {line}{ratio}")
    loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
