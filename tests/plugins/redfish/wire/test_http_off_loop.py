"""A large Redfish document is decoded off the event loop: its inflate, its bounds scan and its
JSON parse run in a worker thread (`plugins.redfish._wire.off_loop`), while small replies stay
inline. Each document comes from a real TLS peer; what is asserted is where the decode ran (the
worker's thread, never the loop's) and that a coroutine beside it kept getting turns, never how
long anything took (that is `bench/bench_large_documents.py`)."""

from __future__ import annotations

import gzip
import json
import threading
import time
from typing import Any

from bmcsim import TlsFiles
from plugins.redfish._client.client import BmcClient
from plugins.redfish._wire import off_loop
from plugins.redfish._wire.http import HttpConnections
from tests.plugins.redfish.wire.test_http_bounds import (
    _JSON,
    Turns,
    _basic,
    _in_parts,
    _transport,
    tls_server,
)
from tests.plugins.redfish.wire.test_http_client import _WAIT, ok, serve, tls_files

__all__ = ["serve", "tls_files", "tls_server"]  # fixtures, imported to be used here

ENTRIES = "/redfish/v1/Systems/1/LogServices/SEL/Entries"


def _collection(members: int) -> bytes:
    """A Redfish collection of `members` log entries (about 160 bytes each)."""
    return json.dumps(
        {
            "@odata.id": ENTRIES,
            "Members": [
                {
                    "@odata.id": f"{ENTRIES}/{i}",
                    "Id": str(i),
                    "Message": "Power supply input lost",
                    "Severity": "Warning",
                }
                for i in range(members)
            ],
            "Members@odata.count": members,
        }
    ).encode()


async def test_a_multi_mib_document_is_scanned_and_parsed_in_a_worker_thread(
    tls_server: Any, tls_files: TlsFiles
) -> None:
    body = _collection(25_000)
    assert len(body) > 3 << 20
    server = await tls_server(ok(body, _JSON))
    client = BmcClient(HttpConnections(30.0), _basic(server), tls_files.client_context())
    before = off_loop.STATS.decodes
    async with Turns() as turns:
        doc = await client.get(
            "/redfish/v1/Systems/1/LogServices/SEL/Entries", deadline=time.monotonic() + _WAIT
        )
        turns_seen = turns.count
    assert len(doc.body["Members"]) == 25_000 and doc.body["Members"][-1]["Id"] == "24999"
    assert off_loop.STATS.decodes == before + 2  # the bounds scan, then the parse
    assert off_loop.STATS.last_thread not in (None, threading.get_ident())  # not the loop's thread
    assert turns_seen > 1  # the loop ran other coroutines meanwhile
    client.transport.close()


async def test_a_body_inflating_to_mibs_is_inflated_in_a_worker_thread(
    tls_server: Any, tls_files: TlsFiles
) -> None:
    body = _collection(25_000)
    packed = gzip.compress(body)
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(packed)}\r\nContent-Encoding: gzip\r\n{_JSON}\r\n\r\n"
    server = await tls_server(head.encode(), *_in_parts(packed, 16 << 10))
    transport = _transport(server, tls_files)
    before = off_loop.STATS.decodes
    reply = await transport.exchange("GET", ENTRIES, {}, None)
    assert reply.body == body
    # the rest of the inflate past the inline budget, then the bounds scan: both in the worker
    assert off_loop.STATS.decodes == before + 2
    assert off_loop.STATS.last_thread not in (None, threading.get_ident())
    transport.close()


async def test_a_small_document_is_decoded_inline(tls_server: Any, tls_files: TlsFiles) -> None:
    body = _collection(10)
    packed = gzip.compress(body)
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(packed)}\r\nContent-Encoding: gzip\r\n{_JSON}\r\n\r\n"
    server = await tls_server(head.encode() + packed)
    client = BmcClient(HttpConnections(30.0), _basic(server), tls_files.client_context())
    before = off_loop.STATS.decodes
    doc = await client.get(ENTRIES, deadline=time.monotonic() + _WAIT)
    assert len(doc.body["Members"]) == 10
    assert off_loop.STATS.decodes == before  # no thread hop for a reply this small
    client.transport.close()
