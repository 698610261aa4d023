"""A TCP proxy in front of PostgreSQL that a drill can close (connections refused, open ones cut)
and reopen on the same port: the database "going away" without touching the real server."""

from __future__ import annotations

import asyncio
import contextlib

from bench.processes import free_port


class TcpProxy:
    """Forwards `listen_host`:`port` to `upstream_host`:`upstream_port` while open."""

    def __init__(self, upstream_host: str, upstream_port: int, listen_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self.listen_host = listen_host
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        #: each open connection's client end -> its upstream end
        self._pairs: dict[asyncio.StreamWriter, asyncio.StreamWriter] = {}
        #: upstream ends left open by `cut_clients` (the server still sees a live client)
        self._lingering: set[asyncio.StreamWriter] = set()
        self.connections = 0

    async def open(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, self.listen_host, self.port, reuse_address=True
        )

    async def close(self) -> None:
        """Stop listening (new connections are refused) and reset every open connection."""
        await self.stop_listening()
        for writer in [*self._pairs, *self._pairs.values(), *self._lingering]:
            writer.transport.abort()
        self._lingering.clear()
        self._pairs.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def stop_listening(self) -> None:
        """Refuse new connections, leaving open ones (and lingering upstream ends) as they are;
        `open()` listens again on the same port."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def cut_clients(self) -> None:
        """Reset every open connection on the clients' side only, and keep listening: each upstream
        end stays open and silent, as after a cut that reached one side (a middlebox's reset, a
        NAT entry dropped), so the server keeps the session (and its locks) until it closes it."""
        pairs, self._pairs = self._pairs, {}
        self._lingering.update(pairs.values())
        for client in pairs:
            client.transport.abort()
        await asyncio.sleep(0)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        self._pairs[writer] = up_writer
        pumps = [
            asyncio.create_task(self._pump(reader, up_writer)),
            asyncio.create_task(self._pump(up_reader, writer)),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
                self._tasks.discard(task)
            self._pairs.pop(writer, None)
            writer.transport.abort()
            if up_writer not in self._lingering:
                up_writer.transport.abort()

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
