"""A small HTTP/1.1 server that stays up whatever its clients do: asyncio streams on one
thread (what it answers is :mod:`gpumon.commands.export.http`).

A connection costs a coroutine and a socket, never a thread; deadlines, size limits and a
connection cap (the oldest waiter is closed, never the new one) bound what a client can
hold, with or without TLS. Details: docs/prometheus.md, "The HTTP server".
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import errno
import http
import os
import socket
import ssl
import sys
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from gpumon.commands.export.messages import (
    Handler,
    Refused,
    Request,
    Response,
    parse_request,
    plain,
    read_head,
)
from gpumon.commands.export.tls import CLOSE_GRACE_S, open_stream

#: Refuses a request (its answer) or lets it through (``None``), before the handler; the
#: second argument is the client's address.
Gate = Callable[[Request, str], Awaitable[Response | None]]

#: Request line and headers, in bytes.
MAX_HEAD_BYTES = 16 * 1024
#: From the connection (or a kept-alive request's first byte) to the end of its headers.
REQUEST_TIMEOUT_S = 5.0
#: Between requests on a kept-alive connection: longer than Prometheus' default 1 min scrape
#: interval, so that it keeps its connection.
IDLE_TIMEOUT_S = 75.0
#: To take one whole answer. A scrape takes milliseconds.
WRITE_TIMEOUT_S = 10.0
#: Connections held at once at most, whatever the descriptor limit allows: an idle one costs
#: a few KiB, a busy one at most about 3 x _PIECE of buffers.
MAX_CONNECTIONS = 4096
#: The same under TLS: asyncio (3.11+) gives every TLS connection a 256 KiB read buffer, so
#: 4096 would be a gigabyte; 512 is about 150 MiB at worst.
MAX_TLS_CONNECTIONS = 512
#: Descriptors left to the rest of the process: NVML's device files (a few per GPU), the
#: sampler's /proc reads, the event loops' own.
DESCRIPTOR_RESERVE = 128
#: Refused requests: how long the rest of the request is read (and dropped) after the
#: answer, so that closing does not reset the connection before the client reads it.
_LINGER_S = 1.0
#: Out of descriptors (another part of the process holds them): wait before accepting again.
_ACCEPT_RETRY_S = 0.1
_PIECE = 16 * 1024
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def connection_cap(most: int = MAX_CONNECTIONS, reserve: int = DESCRIPTOR_RESERVE) -> int:
    """Connections to hold at once: ``most``, or fewer where the descriptor limit
    (``RLIMIT_NOFILE``) less those open now and ``reserve`` allows fewer (at least half of
    those still free under a tiny limit)."""
    try:
        import resource

        limit, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        unlimited = limit == resource.RLIM_INFINITY
    except (ImportError, OSError, ValueError):  # no such limit here
        return most
    if unlimited:
        return most
    try:
        in_use = len(os.listdir("/proc/self/fd"))
    except OSError:
        in_use = 32
    free = limit - in_use
    return max(1, min(most, max(free - reserve, free // 2)))


@dataclass(frozen=True, slots=True)
class Limits:
    """What one client may hold: connections, deadlines and sizes (docs/prometheus.md)."""

    max_connections: int = field(default_factory=connection_cap)
    request_timeout_s: float = REQUEST_TIMEOUT_S
    idle_timeout_s: float = IDLE_TIMEOUT_S
    write_timeout_s: float = WRITE_TIMEOUT_S
    max_head_bytes: int = MAX_HEAD_BYTES


@dataclass(eq=False, slots=True)  # compared and hashed by identity: a key of the server's
class _Connection:
    """One accepted connection: its socket, its task, and its transport once it is a stream."""

    sock: socket.socket
    started: bool = False  # its task has begun: from then on the task closes the socket
    task: asyncio.Task[None] | None = None
    transport: asyncio.BaseTransport | None = None

    def close(self) -> None:
        """Now, whatever it is doing: a stream's coroutine ends at its next read or write;
        one still in its TLS handshake is cancelled (which closes it); one whose task has not
        begun (and never will) is closed here."""
        if isinstance(self.transport, asyncio.WriteTransport):
            self.transport.abort()
            return
        if self.task is not None:
            self.task.cancel()
        if not self.started:
            self.sock.close()


class HttpServer:
    """Serves ``handler``'s answers on ``listening`` from one thread, started at once (TLS with
    ``tls``, after ``gate``). ``handler`` runs on that thread: it must never block.
    """

    def __init__(
        self,
        listening: socket.socket,
        handler: Handler,
        limits: Limits | None = None,
        *,
        name: str = "gpumon-http",
        tls: ssl.SSLContext | None = None,
        gate: Gate | None = None,
    ) -> None:
        self.limits = limits or Limits()
        listening.setblocking(False)  # accepted by the event loop
        self._listening = listening
        self._handler = handler
        self._tls = tls
        self._gate = gate
        self._loop = asyncio.new_event_loop()
        # Every connection, the one whose wait or answer began the longest ago first.
        self._connections: OrderedDict[_Connection, None] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()  # asyncio keeps only weak references
        self._warned: set[str] = set()
        self._date = (0, "")
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def connections(self) -> int:
        """Connections held now."""
        return len(self._connections)

    def stop(self, timeout_s: float = 1.0) -> None:
        """Stop listening and close every connection; returns within about ``timeout_s``.
        Again: waits again (a second stop of the loop would break the closing under way)."""
        if not self._stopping:
            self._stopping = True
            with contextlib.suppress(RuntimeError):  # the loop has ended already
                self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout_s)
        self._listening.close()  # closed by the loop's end already, unless it hangs

    def _run(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        loop.set_exception_handler(self._quiet)
        self._start(self._accept())
        try:
            loop.run_forever()
        finally:
            for connection in self._connections:
                connection.close()
            for task in self._tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*self._tasks, return_exceptions=True))
            loop.run_until_complete(asyncio.sleep(0))  # the aborted transports close here
            self._listening.close()
            loop.close()

    def _start(self, work: Any) -> asyncio.Task[None]:
        task = self._loop.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _quiet(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if not isinstance(context.get("exception"), OSError):
            loop.default_exception_handler(context)  # a bug: worth its traceback
        # An OSError is a client that left.

    # -- connections -------------------------------------------------------------------

    async def _accept(self) -> None:
        """Accept connections one at a time, each counted before the next is accepted and
        closing the oldest first when at the cap: the cap holds at accept (asyncio's own
        server accepts up to its backlog in one go, a descriptor each, before any of those
        connections could close another)."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                connection, peer = await loop.sock_accept(self._listening)
            except OSError as error:
                if error.errno in _OUT_OF_RESOURCES:  # free one, let the rest catch up
                    if str(error) not in self._warned:  # said once
                        self._warned.add(str(error))
                        print(
                            f"gpumon export: warning: cannot accept a connection: {error}",
                            file=sys.stderr,
                        )
                    self._close_oldest()
                    await asyncio.sleep(_ACCEPT_RETRY_S)
                continue  # else: a client that gave up before it was accepted
            while len(self._connections) >= self.limits.max_connections:
                self._close_oldest()
            # asyncio sets it only on sockets made as IPPROTO_TCP: without it, an answer's
            # second write waits for the client's delayed ACK (40 ms on Linux).
            with contextlib.suppress(OSError):  # not TCP
                connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # Counted from now, also while its TLS handshake goes on.
            entry = _Connection(connection)
            self._connections[entry] = None
            entry.task = self._start(self._connected(connection, entry, str(peer[0])))

    def _close_oldest(self) -> None:
        if self._connections:
            oldest, _ = self._connections.popitem(last=False)
            oldest.close()

    def _busy_since_now(self, entry: _Connection) -> bool:
        """A wait or an answer begins: the connection goes last in line for closing. False
        when it was closed to make room."""
        if entry not in self._connections:
            return False
        self._connections.move_to_end(entry)
        return True

    async def _connected(self, connection: socket.socket, entry: _Connection, client: str) -> None:
        entry.started = True
        limits = self.limits
        deadline = self._loop.time() + limits.request_timeout_s  # for the first request
        try:  # plain: one turn of the loop; TLS: the handshake, within the deadline
            reader, writer = await open_stream(
                connection, self._tls, limit=limits.max_head_bytes, deadline=deadline
            )
        except (OSError, asyncio.TimeoutError):
            self._connections.pop(entry, None)
            return  # a client that left, ran out of time, or does not speak TLS
        transport = entry.transport = writer.transport
        # Reads of at most a piece (asyncio's selector transport reads up to 256 KiB at once
        # into each connection's buffer otherwise), writes paused above a piece.
        if hasattr(transport, "max_size"):
            transport.max_size = _PIECE
        transport.set_write_buffer_limits(high=_PIECE)
        graceful = False
        try:
            graceful = await self._converse(reader, writer, entry, client, deadline)
        except (OSError, EOFError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            pass  # the client left, or ran out of time
        finally:
            self._connections.pop(entry, None)
            if graceful:
                writer.close()  # after what is still buffered (and TLS's close_notify)...
                self._loop.call_later(CLOSE_GRACE_S, transport.abort)  # ...for so long
            else:
                transport.abort()

    async def _converse(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        entry: _Connection,
        client: str,
        deadline: float,
    ) -> bool:
        """Answer requests until one asks to close (True), or the client leaves (False).
        The first request's line and headers must have arrived by ``deadline``."""
        limits = self.limits
        start = b""
        while True:
            try:
                head = await asyncio.wait_for(
                    read_head(reader, start, limits.max_head_bytes),
                    max(0.0, deadline - self._loop.time()),
                )
                request = parse_request(head)
            except Refused as refused:
                await self._refuse(reader, writer, refused)
                return True
            if not self._busy_since_now(entry):  # the answer begins
                return False
            response = await self._let_through(request, client) or self._answer(request)
            keep = request.keep_alive
            body = () if request.method == "HEAD" else response.parts
            await asyncio.wait_for(
                self._send(writer, self._head(response, keep), body), limits.write_timeout_s
            )
            if not keep:
                return True
            if not self._busy_since_now(entry):  # the wait for the next request begins
                return False
            try:  # its first byte: the request's own deadline runs from there
                start = await asyncio.wait_for(reader.readexactly(1), limits.idle_timeout_s)
            except asyncio.IncompleteReadError:
                return True  # the client closed its kept-alive connection
            deadline = self._loop.time() + limits.request_timeout_s

    async def _let_through(self, request: Request, client: str) -> Response | None:
        """The gate's refusal, or ``None``: the request may be answered."""
        if self._gate is None:
            return None
        try:
            return await asyncio.wait_for(self._gate(request, client), self.limits.write_timeout_s)
        except asyncio.TimeoutError:
            return plain(503, "busy: try again\n", ("Retry-After", "1"))

    def _answer(self, request: Request) -> Response:
        try:
            return self._handler(request)
        except Exception as error:  # a bug: its traceback, and the server goes on
            self._loop.call_exception_handler(
                {"message": "gpumon export: answering a request failed", "exception": error}
            )
            return plain(500, "internal error\n")

    def _head(self, response: Response, keep: bool) -> bytes:
        status = http.HTTPStatus(response.status)
        lines = [
            f"HTTP/1.1 {status.value} {status.phrase}",
            f"Date: {self._now()}",
            *(f"{name}: {value}" for name, value in response.headers),
            f"Content-Length: {sum(len(part) for part in response.parts)}",
            f"Connection: {'keep-alive' if keep else 'close'}",
        ]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _now(self) -> str:
        second = int(self._loop.time())
        if self._date[0] != second:  # an HTTP date changes once a second
            self._date = (second, email.utils.formatdate(usegmt=True))
        return self._date[1]

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, head: bytes, parts: tuple[bytes, ...]) -> None:
        writer.write(head)
        for part in parts:
            view = memoryview(part)
            for offset in range(0, len(view), _PIECE):
                writer.write(view[offset : offset + _PIECE])
                await writer.drain()  # waits while more than a piece is unsent
        await writer.drain()

    async def _refuse(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, refused: Refused
    ) -> None:
        response = plain(refused.status, f"{refused}\n")
        writer.write(self._head(response, False) + response.parts[0])
        with contextlib.suppress(OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            await asyncio.wait_for(_linger(reader, writer), _LINGER_S)


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Send what is buffered and the end of our side, then drop what the client still sends
    until it closes: closing with its bytes unread would reset the connection, and the
    client might never read the answer."""
    await writer.drain()
    if writer.can_write_eof():
        writer.write_eof()
    while await reader.read(_PIECE):
        pass
