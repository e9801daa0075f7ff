"""`gpumon export` against hostile local clients, over real sockets on loopback: connections
held open by another process (idle, a request line a byte a second, a huge header trickled)
never keep scrapes out, cost no thread, and what they send is bounded; keep-alive and gzip as
Prometheus uses them.

The old server (prometheus_client's, 16 threads) answered 0 or 1 of 20 scrapes with 16
connections held; tests/benchmarks/bench_exporter_hostile.py measures it at 0, 16 and 200
hostile connections (its attacker is the one used here).
"""

from __future__ import annotations

import gzip
import http.client
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse

from gpumon.commands.export.server import Limits
from tests.commands.export.test_export import FakeSource, Serve, make_sample, parse
from tests.commands.export.test_export import serve as serve_fixture
from tests.commands.export.test_export_http import closed_after

serve = serve_fixture  # the same fixture as in test_export.py

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_exporter_hostile.py"
sys.path.insert(0, str(BENCHMARK.parent))
from bench_exporter_hostile import scrape as timed_scrape  # noqa: E402
from bench_exporter_hostile import start_attacker, stop  # noqa: E402


def read_answer(connection: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One answer to a GET from ``connection``: status, headers (lower-case names), and the
    body Content-Length announces."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        assert chunk, f"closed before a whole answer: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value for name, value in (line.split(": ", 1) for line in lines)}
    while len(body) < int(headers.get("content-length", "0")):
        chunk = connection.recv(65536)
        assert chunk, "closed in the middle of the body"
        body += chunk
    return int(status.split(" ")[1]), headers, body


def exchange(port: int, request: bytes) -> tuple[int, dict[str, str], bytes, bool]:
    """Send ``request`` on a new connection: the answer, and whether the server then closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        connection.sendall(request)
        status, headers, body = read_answer(connection)
        if headers.get("connection") != "close":
            return status, headers, body, False  # kept alive: not waited for
        try:
            closed = connection.recv(1) == b""
        except ConnectionResetError:
            closed = True
    return status, headers, body, closed


@pytest.mark.slow
def test_scrapes_get_through_while_another_process_holds_150_hostile_connections(
    serve: Serve,
) -> None:
    """50 idle, 50 slowloris request lines, 50 huge trickled headers, each opened again when
    cut: all 20 scrapes (3 s timeout each) answer 200, no thread is started for any
    connection, and sampling goes on."""
    source = FakeSource(make_sample())
    exporter = serve(source, interval_s=0.25)
    threads = threading.active_count()
    attacker = start_attacker(exporter.port, idle=50, slow_lines=50, slow_headers=50)
    try:
        deadline = time.monotonic() + 10
        while exporter.server.connections < 150 and time.monotonic() < deadline:
            time.sleep(0.05)  # all held at once (checked below, after the scrapes)
        calls = source.calls
        results = []
        for _ in range(20):
            results.append(timed_scrape(exporter.port, 3.0))
            time.sleep(0.1)
        assert [result.ok for result in results] == [True] * 20  # was 0 of 20
        assert threading.active_count() == threads  # one event loop thread for them all
        assert exporter.server.connections >= 100  # still attacked all along
        assert source.calls > calls  # sampling went on
    finally:
        stop(attacker)


def test_headers_beyond_16_kib_are_refused_and_the_connection_closed(serve: Serve) -> None:
    port = serve(FakeSource(make_sample())).port
    huge = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Huge: " + b"a" * 20_000 + b"\r\n\r\n"
    many = (
        b"GET /metrics HTTP/1.1\r\n"
        + b"".join(b"X-Pad-%d: %s\r\n" % (n, b"b" * 200) for n in range(90))
        + b"\r\n"
    )
    long_line = b"GET /metrics?" + b"x" * 20_000 + b" HTTP/1.1\r\n\r\n"
    for request, expected in ((huge, 431), (many, 431), (long_line, 414)):
        status, _, _, closed = exchange(port, request)
        assert (status, closed) == (expected, True)  # was 200 for the first two
    status, _, _, _ = exchange(
        port, b"GET /metrics HTTP/1.1\r\nX-Fine: " + b"c" * 8000 + b"\r\n\r\n"
    )
    assert status == 200  # under the limit is fine


def test_too_many_header_lines_are_refused(serve: Serve) -> None:
    port = serve(FakeSource(make_sample())).port
    request = b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % n for n in range(150)) + b"\r\n"
    assert exchange(port, request)[0] == 431


@pytest.mark.parametrize(
    ("request_bytes", "expected"),
    [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET /metrics\r\n\r\n", 400),  # HTTP/0.9
        (b"GET /metrics HTTP/2.0\r\n\r\n", 505),
        (b"GET /metrics HTTP/1.1\r\nNo colon here\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nX-A: 1\r\n folded\r\n\r\n", 400),
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 405),
    ],
)
def test_malformed_requests_are_refused_and_closed(
    serve: Serve, request_bytes: bytes, expected: int
) -> None:
    port = serve(FakeSource(make_sample())).port
    status, headers, _, closed = exchange(port, request_bytes)
    assert (status, headers["connection"], closed) == (expected, "close", True)


def test_keep_alive_answers_two_requests_on_one_connection(serve: Serve) -> None:
    """Prometheus keeps its connection between scrapes; HEAD on it sends no body, so the
    next answer is read right."""
    port = serve(FakeSource(make_sample())).port
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/metrics")
        first = connection.getresponse()
        assert first.status == 200 and b"gpumon_gpu_up" in first.read()
        assert first.getheader("Connection") == "keep-alive"
        held = connection.sock
        connection.request("HEAD", "/metrics")
        head = connection.getresponse()
        assert head.status == 200 and head.read() == b""
        connection.request("GET", "/")
        last = connection.getresponse()
        assert (last.status, last.read()) == (200, b"gpumon exporter: metrics at /metrics\n")
        assert connection.sock is held  # was a new connection per request (HTTP/1.0)
    finally:
        connection.close()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as old_client:
        old_client.sendall(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        assert read_answer(old_client)[1]["connection"] == "keep-alive"
        old_client.sendall(b"GET / HTTP/1.0\r\n\r\n")  # HTTP/1.0: closed unless asked
        assert read_answer(old_client)[1]["connection"] == "close"
        assert old_client.recv(1) == b""


def test_an_idle_kept_alive_connection_is_closed_after_the_idle_timeout(serve: Serve) -> None:
    exporter = serve(FakeSource(make_sample()), limits=Limits(idle_timeout_s=0.5))
    with socket.create_connection(("127.0.0.1", exporter.port), timeout=5) as connection:
        connection.sendall(b"GET / HTTP/1.1\r\n\r\n")
        assert read_answer(connection)[0] == 200
        assert 0.3 < closed_after(connection) < 3.0
    assert exporter.server.connections == 0


def test_gzip_is_served_when_asked_and_decodes_to_the_same_series(serve: Serve) -> None:
    port = serve(FakeSource(make_sample())).port
    plain = exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")
    zipped = exchange(port, b"GET /metrics HTTP/1.1\r\nAccept-Encoding: gzip\r\n\r\n")
    assert "content-encoding" not in plain[1]
    assert zipped[1]["content-encoding"] == "gzip" and len(zipped[2]) < len(plain[2]) / 3
    assert zipped[1]["content-type"] == plain[1]["content-type"]
    unzipped = parse(gzip.decompress(zipped[2]).decode())
    series = parse(plain[2].decode())
    for ages in (unzipped, series):  # the only series that changes from scrape to scrape
        assert ages.pop("gpumon_sample_age_seconds")[()] >= 0
    assert unzipped == series
    refused = b"GET /metrics HTTP/1.1\r\nAccept-Encoding: gzip;q=0, identity\r\n\r\n"
    assert "content-encoding" not in exchange(port, refused)[1]


def test_openmetrics_is_served_when_asked_gzipped_too(serve: Serve) -> None:
    """What Prometheus asks for: OpenMetrics, gzipped, ending in # EOF."""
    port = serve(FakeSource(make_sample())).port
    accept = b"Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    request = b"GET /metrics HTTP/1.1\r\n" + accept + b"\r\nAccept-Encoding: gzip\r\n\r\n"
    _, headers, body, _ = exchange(port, request)
    assert headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
    text = gzip.decompress(body).decode()
    assert text.endswith("\n# EOF\n") and text.count("# EOF") == 1
    names = {sample.name for family in om_parse(text) for sample in family.samples}
    assert {"gpumon_gpu_up", "gpumon_sampler_stalled", "gpumon_sampling_errors_total"} <= names


@pytest.mark.slow
def test_stopping_again_while_connections_close_breaks_nothing(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second stop (an exporter stopped by its owner, then at exit) while the first still
    closes hundreds of connections: the server thread ends without an exception."""
    failures: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: failures.append(args.exc_value))
    exporter = serve(FakeSource(make_sample()))
    held = [socket.create_connection(("127.0.0.1", exporter.port), timeout=5) for _ in range(300)]
    try:
        deadline = time.monotonic() + 5
        while exporter.server.connections < 300 and time.monotonic() < deadline:
            time.sleep(0.01)
        again_until = time.monotonic() + 1
        while time.monotonic() < again_until:  # the first stop's closing takes some of it
            exporter.server.stop(timeout_s=0.001)
        exporter.server.stop(timeout_s=5)  # its thread has ended
    finally:
        for connection in held:
            connection.close()
    assert failures == []
