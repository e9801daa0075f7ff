"""One deadline per HTTP request: every request ends within its timeout, however the bytes
arrive.

urllib's ``timeout`` bounds each socket operation, not the request. :class:`Deadline` gives
each operation what is left of the time and a watchdog shuts the request's sockets down when
it is up; sockets are shut and closed only under its lock, so no reused descriptor is touched.
:func:`deadline_opener` is urllib's opener with such sockets; it follows no redirect.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import socket
import ssl
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import IO, Any, cast


class DeadlineExpired(TimeoutError):
    """The request's time is up."""


class Deadline:
    """The time one request may take; sockets registered with it are shut down when it ends.

    Use as a context manager around the request: the watchdog runs inside it only.
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._end = time.monotonic() + timeout_s
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._expired = False
        self._finished = False
        self._timer = threading.Timer(timeout_s, self._expire)
        self._timer.daemon = True  # never keeps `gpumon once` alive

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._timer.cancel()
        with self._lock:
            self._finished = True
            self._sockets.clear()  # closed or about to be: never shut down after this

    @property
    def expired(self) -> bool:
        """The time is up (the watchdog fired, or none is left)."""
        return self._expired or self._end - time.monotonic() <= 0

    def left(self) -> float:
        """Seconds left; raises :class:`DeadlineExpired` when none are."""
        remaining = self._end - time.monotonic()
        if self._expired or remaining <= 0:
            raise DeadlineExpired
        return remaining

    def register(self, sock: socket.socket) -> None:
        """Shut ``sock`` down when the time is up; raises :class:`DeadlineExpired` if it is."""
        with self._lock:
            if self._expired or self._finished:
                raise DeadlineExpired
            self._sockets.append(sock)

    @contextlib.contextmanager
    def closing(self, sock: socket.socket) -> Iterator[None]:
        """Held while ``sock`` closes its descriptor: the watchdog waits, then forgets it."""
        with self._lock:
            self._sockets = [known for known in self._sockets if known is not sock]
            yield

    def _expire(self) -> None:
        with self._lock:
            if self._finished:
                return
            self._expired = True
            for sock in self._sockets:
                # OSError: not connected yet, or its descriptor passed to a TLS socket.
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)  # a blocked read returns at once


class _Bounded(socket.socket):
    """A socket whose every operation is bounded by what is left of its deadline."""

    _deadline: Deadline | None = None

    def _bound(self) -> None:
        if self._deadline is not None and self.gettimeout() != 0.0:  # non-blocking stays so
            self.settimeout(self._deadline.left())

    def recv(self, *args: Any, **kwargs: Any) -> bytes:
        self._bound()
        return super().recv(*args, **kwargs)

    def recv_into(self, *args: Any, **kwargs: Any) -> int:
        self._bound()
        return super().recv_into(*args, **kwargs)

    def send(self, *args: Any, **kwargs: Any) -> int:
        self._bound()
        return super().send(*args, **kwargs)

    def sendall(self, *args: Any, **kwargs: Any) -> None:
        self._bound()
        super().sendall(*args, **kwargs)

    def _real_close(self, *args: Any, **kwargs: Any) -> None:
        # Every path that closes the descriptor (close(), the last makefile() closed) ends
        # here: under the deadline's lock, so the watchdog never shuts down a number reused.
        deadline = self._deadline
        if deadline is None:
            super()._real_close(*args, **kwargs)  # type: ignore[misc]
            return
        with deadline.closing(self):
            super()._real_close(*args, **kwargs)  # type: ignore[misc]


class _DeadlineSocket(_Bounded):
    """A plain TCP socket of one request."""


_ACTIVE = threading.local()  # the deadline of the TLS connection being set up on this thread


class _DeadlineSSLSocket(_Bounded, ssl.SSLSocket):
    """A TLS socket of one request: registered as it is created, before its handshake."""

    def __new__(cls, *args: Any, **kwargs: Any) -> _DeadlineSSLSocket:
        self = super().__new__(cls, *args, **kwargs)
        deadline: Deadline | None = getattr(_ACTIVE, "deadline", None)
        if deadline is not None:
            deadline.register(self)
            self._deadline = deadline
        return self

    def do_handshake(self, *args: Any, **kwargs: Any) -> None:
        self._bound()  # the whole handshake within what is left
        super().do_handshake(*args, **kwargs)


def tls_context(ca_file: str | None) -> ssl.SSLContext:
    """The system's (or ``ca_file``'s) trust, with sockets bounded by their request's deadline;
    raises :class:`OSError` or :class:`ssl.SSLError` for an unusable ``ca_file``.
    """
    context = ssl.create_default_context(cafile=ca_file)
    context.sslsocket_class = _DeadlineSSLSocket
    return context


def _resolve(host: str, port: int, deadline: Deadline) -> list[Any]:
    """getaddrinfo within the deadline: a name server that does not answer cannot hold the
    request (the lookup itself goes on in a daemon thread until the resolver gives up)."""
    try:
        ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        pass
    else:
        return socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
    found: dict[str, Any] = {}

    def look_up() -> None:
        try:
            found["addresses"] = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
        except OSError as error:
            found["error"] = error

    worker = threading.Thread(target=look_up, name="gpumon-resolve", daemon=True)
    worker.start()
    worker.join(deadline.left())
    if worker.is_alive():
        raise DeadlineExpired
    if "error" in found:
        raise found["error"]
    addresses: list[Any] = found["addresses"]
    return addresses


def _connect(
    deadline: Deadline,
    address: tuple[str, int],
    timeout: object = None,
    source_address: tuple[str, int] | None = None,
) -> socket.socket:
    """``socket.create_connection`` with the request's sockets, each registered and bounded."""
    host, port = address
    error: OSError | None = None
    for family, kind, proto, _, where in _resolve(host, port, deadline):
        sock = _DeadlineSocket(family, kind, proto)
        try:
            deadline.register(sock)
            sock._deadline = deadline
            sock.settimeout(deadline.left())
            if source_address is not None:
                sock.bind(source_address)
            sock.connect(where)
            return sock
        except OSError as failed:
            sock.close()
            if deadline.expired:
                raise DeadlineExpired from None
            error = failed
    raise error if error is not None else OSError(f"no address for {host}")


class _HTTPConnection(http.client.HTTPConnection):
    def __init__(self, *args: Any, deadline: Deadline, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline = deadline
        self._create_connection = lambda *where: _connect(deadline, *where)


class _HTTPSConnection(_HTTPConnection, http.client.HTTPSConnection):
    def connect(self) -> None:
        _ACTIVE.deadline = self._deadline  # for the TLS socket the context creates
        try:
            super().connect()
        finally:
            _ACTIVE.deadline = None


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def http_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(cast(Any, _HTTPConnection), req, deadline=self._deadline)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: Deadline, context: ssl.SSLContext) -> None:
        super().__init__(context=context)
        self._deadline = deadline
        self._tls = context

    def https_open(self, req: urllib.request.Request) -> Any:
        connection = cast(Any, _HTTPSConnection)
        return self.do_open(connection, req, context=self._tls, deadline=self._deadline)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Takes the place of urllib's redirect handler: a 3xx answer becomes an HTTPError."""

    def http_error_302(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
    ) -> None:
        return None  # not handled here: urllib's default handler raises HTTPError

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


def deadline_opener(deadline: Deadline, context: ssl.SSLContext) -> urllib.request.OpenerDirector:
    """urllib's opener (proxies from the environment included) whose connections are bounded
    by ``deadline`` and which follows no redirect."""
    return urllib.request.build_opener(
        _HTTPHandler(deadline), _HTTPSHandler(deadline, context), _NoRedirects()
    )
