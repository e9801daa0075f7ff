"""An accepted connection as an asyncio stream, in TLS when the server has a context: the
part of :mod:`gpumon.commands.export.server` that ``tls_server_config`` adds.

Everything happens within the connection's request deadline: a client speaking plain HTTP
to the HTTPS port gets a one-line ``400``; the handshake gets what is left of the deadline;
a TLS close waits at most :data:`CLOSE_GRACE_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import sys
from typing import Any

#: How long a connection closed gracefully may take to say goodbye (the TLS close_notify, or
#: what is left in the write buffer) before it is aborted.
CLOSE_GRACE_S = 2.0
#: A TLS connection's first byte: the record type of a handshake.
_TLS_HANDSHAKE = 0x16
_NOT_TLS = (
    b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Connection: close\r\nContent-Length: 51\r\n\r\n"
    b"this exporter speaks HTTPS only: use https:// URLs\n"
)


class NotTls(ConnectionError):
    """The client spoke something other than TLS to a TLS port (answered and closed)."""


async def open_stream(
    sock: socket.socket,
    context: ssl.SSLContext | None,
    *,
    limit: int,
    deadline: float,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """``sock`` (accepted) as a stream; in TLS, handshaken, when ``context`` is given.

    ``deadline`` is on the loop's clock. Raises ``OSError`` (``ssl.SSLError``, a handshake
    that timed out, :class:`NotTls`...) or ``asyncio.TimeoutError``, with ``sock`` closed.
    """
    loop = asyncio.get_running_loop()
    handed = False  # once the transport holds the socket, closing it is the transport's job
    try:
        if context is not None:
            await _first_byte_is_tls(loop, sock, deadline)
        reader = asyncio.StreamReader(limit=limit, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        options: dict[str, Any] = {}
        if context is not None:
            options["ssl_handshake_timeout"] = max(0.01, deadline - loop.time())
            if sys.version_info >= (3, 11):
                options["ssl_shutdown_timeout"] = CLOSE_GRACE_S
        handed = True  # the call makes the transport before its first wait
        transport, _ = await loop.connect_accepted_socket(
            lambda: protocol, sock, ssl=context, **options
        )
    except BaseException:
        if not handed:
            sock.close()
        raise
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


async def _first_byte_is_tls(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, deadline: float
) -> None:
    """Wait (until ``deadline``) for the client's first byte and look at it without reading
    it; answer and raise :class:`NotTls` when it does not begin a TLS handshake."""
    sock.setblocking(False)
    await _readable(loop, sock, deadline - loop.time())
    first = sock.recv(1, socket.MSG_PEEK)
    if not first:
        raise ConnectionResetError("closed before its first byte")
    if first[0] == _TLS_HANDSHAKE:
        return
    with contextlib.suppress(OSError):
        sock.send(_NOT_TLS)  # a few dozen bytes into an empty send buffer: never blocks
        sock.shutdown(socket.SHUT_WR)
        # Read what the client sent (its request) before closing: closing with it unread
        # would reset the connection, and the client might never see the answer.
        with contextlib.suppress(asyncio.TimeoutError):
            while True:
                await _readable(loop, sock, min(1.0, deadline - loop.time()))
                if not sock.recv(16 * 1024):
                    break
    raise NotTls("plain HTTP on a TLS port")


async def _readable(loop: asyncio.AbstractEventLoop, sock: socket.socket, timeout: float) -> None:
    """Wait until ``sock`` has something to read (or its peer closed), at most ``timeout``."""
    ready: asyncio.Future[None] = loop.create_future()
    fd = sock.fileno()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await asyncio.wait_for(ready, max(0.0, timeout))
    finally:
        loop.remove_reader(fd)
