"""`python -m bench.reply_parse`: CPU per reply parsed by the Redfish HTTP client's connection, alone.

The reply framing (`plugins.redfish._http_connection.Connection`: the status line, headers, body,
keep-alive) is fed the bytes of a typical BMC reply through its `asyncio.Protocol` methods, with
no socket, TLS or event-loop turn around it, so a change of parser can be compared with the code
before it (run this module with that checkout first on PYTHONPATH). Replies: the simulator's GET
of a power resource (Content-Length, about 1 KiB of JSON) whole and in two reads, and a chunked one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from plugins.redfish._http_connection import Connection

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


def _run(loop: asyncio.AbstractEventLoop, parts: list[bytes], n: int) -> float:
    conn = Connection(loop)
    conn.connection_made(_Sink())
    started = time.process_time()
    for _ in range(n):
        waiter = conn.send(_REQUEST, False)
        for part in parts:
            conn.data_received(part)
        assert waiter.result().status == 200 and conn.reusable
    return (time.process_time() - started) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000, help="replies per round (default 20000)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="rounds; the least is shown (the least disturbed by other work on the host) (default 5)",
    )
    args = parser.parse_args()
    loop = asyncio.new_event_loop()
    cut = WHOLE.index(b"\r\n\r\n") + 100
    cases = {"content-length": [WHOLE], "two reads": [WHOLE[:cut], WHOLE[cut:]], "chunked": [CHUNKED]}
    for name, parts in cases.items():
        rounds = [_run(loop, parts, args.calls) * 1e6 for _ in range(args.rounds)]
        shown = " ".join(f"{r:.2f}" for r in rounds)
        print(f"{name:15} {min(rounds):6.2f} µs per reply, the least of {len(rounds)} rounds ({shown})")
    loop.close()


if __name__ == "__main__":
    main()
