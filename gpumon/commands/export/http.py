"""The exporter's HTTP side and its sampling thread (``gpumon export``).

The sampling thread runs the dashboard's :class:`~gpumon.sampling.poller.Poller` into a
:class:`~gpumon.sampling.store.Store`; each sample is rendered once by
:class:`~gpumon.commands.export.exposition.Exposition`. Read-only: ``GET``/``HEAD`` on
``/metrics`` and ``/``, ``405``/``404`` otherwise, ``503`` until the first sample.
"""

from __future__ import annotations

import signal
import socket
import sys
import threading
import time
import urllib.parse
from typing import Any

from gpumon.commands.export.auth import BasicAuth
from gpumon.commands.export.collector import SampleCollector
from gpumon.commands.export.exposition import CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE, Exposition
from gpumon.commands.export.listen import is_loopback
from gpumon.commands.export.messages import Request, Response, plain
from gpumon.commands.export.server import (
    MAX_TLS_CONNECTIONS,
    HttpServer,
    Limits,
    connection_cap,
)
from gpumon.commands.export.web_config import WebConfig
from gpumon.data.model import GpuUnavailable, Sample
from gpumon.sampling.history.recorder import RecorderThread
from gpumon.sampling.poller import Poller, PollerThread, clamp_interval
from gpumon.sampling.snapshot import no_gpu_data, report_unavailable
from gpumon.sampling.store import Store

#: How long ``stop()`` waits for a sample in progress (a slow driver call is not waited for).
STOP_WAIT_S = 0.5
#: How long ``stop()`` waits for ``--record``'s last batch to be written.
RECORD_STOP_S = 2.0
#: Without a driver the exporter ends within this long; a slow first sample gets the banner.
_QUIET_START_S = 1.0


def respond(exposition: Exposition, request: Request) -> Response:
    """The answer to one request: read-only, ``/metrics`` from the latest sample."""
    if request.method not in ("GET", "HEAD"):
        return plain(405, "read-only: only GET and HEAD\n", ("Allow", "GET, HEAD"))
    target = urllib.parse.urlsplit(request.target)  # also the absolute form, http://host/...
    path = urllib.parse.unquote(target.path)
    if path == "/":
        return plain(200, "gpumon exporter: metrics at /metrics\n")
    if path != "/metrics":
        return plain(404, "not found: metrics are at /metrics\n")
    waiting = exposition.not_ready
    if waiting is not None:
        return plain(503, waiting, ("Retry-After", "1"))
    names = urllib.parse.parse_qs(target.query).get("name[]")
    # As prometheus_client decides: OpenMetrics when it is listed with no version or 1.x.
    openmetrics = any(
        name == "application/openmetrics-text" and version.split(".")[0] in ("", "1")
        for name, version in _choices(request.headers.get("accept", ""))
    )
    encodings = _choices(request.headers.get("accept-encoding", ""))
    metrics = exposition.metrics(
        gzip=any(name in ("gzip", "x-gzip") for name, _ in encodings),
        openmetrics=openmetrics,
        names=None if names is None else frozenset(names),
    )
    headers = [("Content-Type", OPENMETRICS_CONTENT_TYPE if openmetrics else CONTENT_TYPE)]
    if metrics.gzipped:
        headers.append(("Content-Encoding", "gzip"))
    headers.append(("Vary", "Accept, Accept-Encoding"))
    return Response(200, tuple(headers), metrics.parts)


def _choices(header: str) -> list[tuple[str, str]]:
    """(media type or coding, its version parameter) of each choice of an Accept or
    Accept-Encoding header that is not refused (``q=0``)."""
    found = []
    for choice in header.split(","):
        name, *parameters = (part.strip().lower() for part in choice.split(";"))
        values = dict(part.partition("=")[::2] for part in parameters)
        if values.get("q", "1").strip("0. ") != "":
            found.append((name, values.get("version", "")))
    return found


class Exporter:
    """The HTTP server plus the sampling thread. ``stop()`` ends both.

    Listens at once; ``/metrics`` answers 503 until the first sample. The sampling thread
    reads the source every ``interval_s`` into :attr:`store`, and :attr:`exposition` renders
    each sample once; ``limits`` default to :class:`Limits`' own.
    """

    def __init__(
        self,
        source: Any,
        collector: SampleCollector,
        host: str,
        port: int,
        interval_s: float,
        *,
        limits: Limits | None = None,
        recorder: RecorderThread | None = None,
        web: WebConfig | None = None,
    ) -> None:
        """Bind and start serving and sampling; raises OSError when it cannot listen.
        ``recorder`` (``--record``) gets every sample, on its own thread."""
        self.source = source
        self.collector = collector
        self.interval_s = clamp_interval(interval_s)
        #: Set once the first sample attempt has ended (read, or failed with an error).
        self.first_sample = threading.Event()
        self.first: Sample | None = None
        #: What /metrics serves: each sample rendered once, on the sampling thread.
        self.exposition = Exposition(collector, self.interval_s)
        self.store = Store(history=False)
        self.store.subscribe(self._sampled)
        self.recorder = recorder
        if recorder is not None:
            self.store.subscribe(recorder.submit)
            self.exposition.recording = lambda: recorder.recorder.recording
        self._last_error = ""
        family, _, _, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        listening = socket.socket(family, socket.SOCK_STREAM)
        try:
            # As http.server: a restarted exporter can listen again at once.
            listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listening.bind(address)
            listening.listen(64)  # connections queue until the server thread accepts them
        except BaseException:
            listening.close()
            raise
        self.address = str(listening.getsockname()[0])
        self.port = int(listening.getsockname()[1])
        # --web-config-file: TLS, and basic auth checked by its own thread (export/auth.py).
        self.web = web or WebConfig()
        self.auth = BasicAuth(self.web.users) if self.web.users else None
        if self.web.tls is not None and limits is None:
            limits = Limits(max_connections=min(connection_cap(), MAX_TLS_CONNECTIONS))
        self.server = HttpServer(
            listening,
            lambda request: respond(self.exposition, request),
            limits,
            tls=self.web.tls,
            gate=None if self.auth is None else self.auth.gate,
        )
        poller = Poller(source, self.interval_s, self.store.push, on_error=self._sampling_failed)
        self._sampler = PollerThread(poller, name="gpumon-sampler")

    # Both run on the sampling thread, one at a time.

    def _sampled(self, sample: Sample) -> None:
        self._last_error = ""
        self.exposition.sampled(sample)
        if not self.first_sample.is_set():
            self.first = sample
            self.first_sample.set()

    def _sampling_failed(self, error: BaseException) -> None:
        if str(error) != self._last_error:  # once per distinct error, not every interval
            print(f"gpumon export: warning: sampling failed: {error}", file=sys.stderr)
        self._last_error = str(error)
        self.exposition.failed()
        self.first_sample.set()

    def stop(self, timeout_s: float = STOP_WAIT_S) -> bool:
        """Stop serving and sampling, and close the source, within about ``timeout_s``. False
        while a read is still stuck in the driver: the source is closed when it returns.
        """
        self.server.stop()  # no longer listening once it returns; connections closed
        if self.auth is not None:
            self.auth.stop()
        stopped = self._sampler.stop(timeout_s)
        if self.recorder is not None:
            self.recorder.stop(RECORD_STOP_S)  # writes the last batch
        return stopped


def serve_until_signalled(exporter: Exporter, host: str) -> int:
    """Serve until SIGINT or SIGTERM (0), or until the first sample says there is no driver (1):
    the banner waits up to a second for that sample.
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
    web = exporter.web
    for warning in web.warnings:
        print(f"gpumon export: warning: --web-config-file: {warning}", file=sys.stderr)
    open_to_all = not web.users and web.client_auth != "RequireAndVerifyClientCert"
    if not is_loopback(exporter.address):
        if open_to_all:
            print(
                f"gpumon export: warning: listening on {host}, not loopback: anyone who can "
                "reach it can read GPU metrics, user names and PIDs",
                file=sys.stderr,
            )
        if web.users and web.tls is None:
            print(
                "gpumon export: warning: basic auth without TLS: passwords cross the network "
                "in clear text (add tls_server_config to the web config)",
                file=sys.stderr,
            )
    shown = f"[{host}]" if ":" in host else host
    scheme = "http" if web.tls is None else "https"
    guards = [] if web.tls is None or web.client_auth == "NoClientCert" else [web.client_auth]
    count = len(web.users)
    guards += [f"basic auth, {count} user{'' if count == 1 else 's'}"] if count else []
    guarded = f" ({', '.join(guards)})" if guards else ""
    demo = " (DEMO: simulated data)" if exporter.source.simulated else ""
    print(
        f"gpumon export: serving {scheme}://{shown}:{exporter.port}/metrics{guarded}{demo}, "
        f"sampling every {exporter.interval_s:g} s; Ctrl-C to stop",
        file=sys.stderr,
        flush=True,
    )
