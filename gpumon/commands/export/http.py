"""The exporter's HTTP side and its sampling thread (``gpumon export``; see
gpumon/commands/export/collector.py).

The sampling thread runs the same :class:`~gpumon.sampling.poller.Poller` as the dashboard, into a
:class:`~gpumon.sampling.store.Store` that the metrics collector follows.

The server is prometheus_client's own ``ThreadingWSGIServer`` (what ``start_http_server``
runs), with three things added so that no client can hurt the exporter or the machine:

- **A bound.** At most ``max_connections`` connections are handled at once, each on a daemon
  thread. One more is answered ``503`` and closed at once on the accepting thread: idle or
  hostile clients can hold neither threads nor file descriptors beyond the bound, so the
  sampling thread (which opens /proc files) never runs out of descriptors.
- **A deadline.** Each connection has ``timeout_s`` from its accept to send its request and
  read the answer. The serving loop shuts late sockets down, so a client that trickles a byte
  every few seconds (slowloris) or never reads its answer is cut off all the same.
- **Quiet errors.** A client that leaves or runs out of time is no news: no traceback.

The WSGI app is read-only: ``GET`` and ``HEAD`` (the same answer without its body) on
``/metrics`` and ``/``; ``405`` for any other method, ``404`` for any other path, and ``503``
on ``/metrics`` until the first sample has been read.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import ThreadingWSGIServer, make_wsgi_app

from gpumon.commands.export.collector import SampleCollector
from gpumon.commands.export.listen import is_loopback
from gpumon.data.model import GpuUnavailable, Sample
from gpumon.sampling.poller import Poller, PollerThread, clamp_interval
from gpumon.sampling.snapshot import no_gpu_data, report_unavailable
from gpumon.sampling.store import Store

#: Connections handled at once. Prometheus scrapes one at a time per server; 16 leaves room
#: for several servers, curl and a browser, and bounds threads and descriptors.
MAX_CONNECTIONS = 16
#: From accept to the last byte of the answer. A scrape takes milliseconds.
CONNECTION_TIMEOUT_S = 5.0
#: How often the serving loop checks deadlines and a shutdown request.
_POLL_S = 0.2
#: How long ``stop()`` waits for a sample in progress (a slow driver call is not waited for).
STOP_WAIT_S = 0.5
#: Without a driver the exporter ends within this long; a slow first sample gets the banner.
_QUIET_START_S = 1.0

_TEXT = ("Content-Type", "text/plain; charset=utf-8")
_BUSY = b"too many connections\n"
_BUSY_REPLY = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_BUSY), _BUSY)
)

Headers = list[tuple[str, str]]
App = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class MetricsServer(ThreadingWSGIServer):
    """prometheus_client's threading WSGI server with a connection bound and deadlines."""

    daemon_threads = True
    block_on_close = False  # stop() must not wait for a slow client
    request_queue_size = 64  # a burst waits in the kernel's queue, not in threads

    def __init__(
        self, address: tuple[Any, ...], family: int, *, max_connections: int, timeout_s: float
    ) -> None:
        self.address_family = family
        self.max_connections = max_connections
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._deadlines: dict[socket.socket, float] = {}
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # As HTTPServer.server_bind, without its reverse DNS lookup of the host's full name
        # (seconds with a slow resolver, and only used in a CGI variable).
        socketserver.TCPServer.server_bind(self)
        self.server_name = str(self.server_address[0])
        self.server_port = int(self.server_address[1])
        self.setup_environ()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            busy = len(self._deadlines) >= self.max_connections
            if not busy:
                self._deadlines[request] = time.monotonic() + self.timeout_s
        if busy:
            _refuse(request)
            self.shutdown_request(request)
            return
        request.settimeout(self.timeout_s)  # no single read or write waits longer
        super().process_request(request, client_address)  # a daemon thread

    def shutdown_request(self, request: Any) -> None:
        with self._lock:  # forgotten before it is closed: service_actions never sees it closed
            self._deadlines.pop(request, None)
        super().shutdown_request(request)

    def service_actions(self) -> None:
        """Called by the serving loop every poll: end connections past their deadline."""
        now = time.monotonic()
        with self._lock:
            for request, deadline in self._deadlines.items():
                if deadline <= now:
                    # Wakes the handler's blocked read or write; the handler then closes it.
                    with contextlib.suppress(OSError):
                        request.shutdown(socket.SHUT_RDWR)

    @property
    def connections(self) -> int:
        """Connections being handled now."""
        with self._lock:
            return len(self._deadlines)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # the client left, or ran out of time
        super().handle_error(request, client_address)


def _refuse(request: socket.socket) -> None:
    """Answer 503 without a thread and without waiting: best effort, then the caller closes."""
    with contextlib.suppress(OSError):
        request.setblocking(False)
        request.send(_BUSY_REPLY)


class _QuietServerHandler(ServerHandler):
    def log_exception(self, exc_info: Any) -> None:
        if not isinstance(exc_info[1], OSError):  # a client that left is not a bug
            super().log_exception(exc_info)


class _Handler(WSGIRequestHandler):
    """One request per connection (HTTP/1.0), no access log, quiet when the client leaves."""

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a scrape every 15 s is not news

    def handle(self) -> None:
        # WSGIRequestHandler.handle, with _QuietServerHandler.
        self.raw_requestline = self.rfile.readline(65537)
        if len(self.raw_requestline) > 65536:
            self.requestline = self.request_version = self.command = ""
            self.send_error(414)
            return
        if not self.parse_request():  # an error has been sent
            return
        handler = _QuietServerHandler(
            self.rfile,
            self.wfile,  # type: ignore[arg-type]  # a socket file, as in wsgiref
            self.get_stderr(),
            self.get_environ(),
            multithread=False,
        )
        handler.request_handler = self  # type: ignore[attr-defined]  # as wsgiref does
        handler.run(self.server.get_app())  # type: ignore[attr-defined]


def make_app(collector: SampleCollector) -> App:
    """The read-only WSGI app around prometheus_client's own ``make_wsgi_app``.

    The collector's ``describe()`` names every family, so ``/metrics?name[]=...`` filters.
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    metrics_app = make_wsgi_app(registry)

    def route(environ: dict[str, Any]) -> tuple[str, Headers, bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            waiting = collector.not_ready
            if waiting is not None:
                return "503 Service Unavailable", [_TEXT, ("Retry-After", "1")], waiting.encode()
            return _call(metrics_app, {**environ, "REQUEST_METHOD": "GET"})
        if path == "/":
            return "200 OK", [_TEXT], b"gpumon exporter: metrics at /metrics\n"
        return "404 Not Found", [_TEXT], b"not found: metrics are at /metrics\n"

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        method = environ.get("REQUEST_METHOD", "")
        if method in ("GET", "HEAD"):
            status, headers, body = route(environ)
        else:
            status = "405 Method Not Allowed"
            headers = [_TEXT, ("Allow", "GET, HEAD")]
            body = b"read-only: only GET and HEAD\n"
        # HEAD: the same status and headers, Content-Length included, and no body.
        start_response(status, [*headers, ("Content-Length", str(len(body)))])
        return [] if method == "HEAD" else [body]

    return app


def _call(app: App, environ: dict[str, Any]) -> tuple[str, Headers, bytes]:
    """Run a WSGI app to completion: its status, headers and whole body."""
    answer: dict[str, Any] = {}

    def start_response(status: str, headers: Headers, exc_info: Any = None) -> None:
        answer.update(status=status, headers=headers)

    body = b"".join(app(environ, start_response))
    headers = [(k, v) for k, v in answer["headers"] if k.lower() != "content-length"]
    return answer["status"], headers, body


class Exporter:
    """The HTTP server plus the sampling thread. ``stop()`` ends both.

    Listens at once; ``/metrics`` answers 503 until the first sample has been read (seconds
    with a slow driver). The sampling thread is the dashboard's :class:`Poller` (on a
    :class:`PollerThread`): it reads the source every ``interval_s`` seconds, starting at
    once, whatever the clients do, into :attr:`store`; the collector follows the store.
    """

    def __init__(
        self,
        source: Any,
        collector: SampleCollector,
        host: str,
        port: int,
        interval_s: float,
        *,
        max_connections: int = MAX_CONNECTIONS,
        timeout_s: float = CONNECTION_TIMEOUT_S,
    ) -> None:
        """Bind and start serving and sampling; raises OSError when it cannot listen."""
        self.source = source
        self.collector = collector
        self.interval_s = clamp_interval(interval_s)
        #: Set once the first sample attempt has ended (read, or failed with an error).
        self.first_sample = threading.Event()
        self.first: Sample | None = None
        #: The latest sample; scrapes read the collector's families, built once per sample.
        self.store = Store(history=False)
        self.store.subscribe(self._sampled)
        self._last_error = ""
        family, _, _, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        self.server = MetricsServer(
            address, family, max_connections=max_connections, timeout_s=timeout_s
        )
        self.server.set_app(make_app(collector))
        self.address = str(self.server.server_address[0])
        self.port = int(self.server.server_address[1])
        self._http = threading.Thread(
            target=self.server.serve_forever, args=(_POLL_S,), name="gpumon-http", daemon=True
        )
        self._http.start()
        poller = Poller(source, self.interval_s, self.store.push, on_error=self._sampling_failed)
        self._sampler = PollerThread(poller, name="gpumon-sampler")

    # Both run on the sampling thread, one at a time.

    def _sampled(self, sample: Sample) -> None:
        self._last_error = ""
        self.collector.update(sample)
        if not self.first_sample.is_set():
            self.first = sample
            self.first_sample.set()

    def _sampling_failed(self, error: BaseException) -> None:
        if str(error) != self._last_error:  # once per distinct error, not every interval
            print(f"gpumon export: warning: sampling failed: {error}", file=sys.stderr)
        self._last_error = str(error)
        self.collector.sampling_failed()
        self.first_sample.set()

    def stop(self, timeout_s: float = STOP_WAIT_S) -> bool:
        """Stop serving and sampling, and close the source, within about ``timeout_s`` plus
        one poll (0.2 s).

        Returns:
            True when sampling ended and the source is closed; False while a read is still
            stuck in the driver: the source is closed when that read returns, never under
            it (process exit ends the daemon threads first).
        """
        self.server.shutdown()  # the serving loop notices within one poll
        self.server.server_close()  # connections in progress end at their deadline
        return self._sampler.stop(timeout_s)


def serve_until_signalled(exporter: Exporter, host: str) -> int:
    """Serve until SIGINT or SIGTERM (0), or until the first sample says there is no driver (1).

    The banner waits for the first sample, up to a second: without a driver the only output
    is the reason, as in the other modes.
    """
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    quiet_until = time.monotonic() + _QUIET_START_S
    announced = False
    no_driver: GpuUnavailable | None = None
    try:
        while not stop.wait(0.5 if announced else 0.05):
            sampled = exporter.first_sample.is_set()
            first = exporter.first
            if sampled and first is not None and no_gpu_data(first):
                no_driver = first.unavailable
                break
            if not announced and (sampled or time.monotonic() >= quiet_until):
                _announce(exporter, host)
                announced = True
    finally:
        exporter.stop()  # closes the source, but not while a hung read still uses it
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if no_driver is not None:
        report_unavailable(no_driver)
        return 1
    return 0


def _announce(exporter: Exporter, host: str) -> None:
    if not is_loopback(exporter.address):
        print(
            f"gpumon export: warning: listening on {host}, not loopback: anyone who can reach "
            "it can read GPU metrics, user names and PIDs",
            file=sys.stderr,
        )
    shown = f"[{host}]" if ":" in host else host
    demo = " (DEMO: simulated data)" if exporter.source.simulated else ""
    print(
        f"gpumon export: serving http://{shown}:{exporter.port}/metrics{demo}, "
        f"sampling every {exporter.interval_s:g} s; Ctrl-C to stop",
        file=sys.stderr,
        flush=True,
    )
