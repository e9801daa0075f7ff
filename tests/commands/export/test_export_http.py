"""`gpumon export`'s HTTP side: methods, HEAD, 503 before the first sample, a quick stop with
a stuck driver call, and what idle, slow and hostile clients can (not) hold."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import select
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from gpumon.commands.export.server import Limits
from gpumon.data.model import GpuProcess, ProcessKind, Sample
from tests.commands.export.test_export import (
    GIB,
    FakeSource,
    Serve,
    SlowSource,
    fetch,
    make_sample,
    no_driver_sample,
    parse,
)
from tests.commands.export.test_export import serve as serve_fixture

ROOT = Path(__file__).resolve().parents[3]
serve = serve_fixture  # the same fixture as in test_export.py


def raw_request(port: int, data: bytes) -> bytes:
    """Send ``data`` and read the whole answer, up to the server closing the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        connection.sendall(data)
        chunks = []
        while chunk := connection.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def split_answer(answer: bytes) -> tuple[str, dict[str, str], bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *header_lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in header_lines)
    return status, {name.lower(): value for name, value in headers.items()}, body


@pytest.mark.parametrize("path", ["/metrics", "/"])
def test_head_answers_like_get_without_a_body(serve: Serve, path: str) -> None:
    port = serve(FakeSource(make_sample())).port
    status, get_headers, get_body = fetch(port, path)
    assert status == 200 and get_body
    head_status, headers, body = split_answer(
        raw_request(port, f"HEAD {path} HTTP/1.0\r\n\r\n".encode())
    )
    assert head_status.split(" ", 1)[1] == "200 OK"  # was 405 on /metrics
    assert body == b""  # / used to send its body
    if path == "/":
        assert headers["content-length"] == str(len(get_body))
    else:  # made at each request: the sample's age may take a few more or fewer digits
        assert abs(int(headers["content-length"]) - len(get_body)) <= 8
    assert headers["content-type"] == get_headers["Content-Type"]


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_read_only_everything_but_get_and_head_is_405(serve: Serve, method: str) -> None:
    port = serve(FakeSource(make_sample())).port
    for path in ("/metrics", "/", "/admin"):
        status, headers, _ = fetch(port, path, method)
        assert status == 405, (method, path)
        assert headers["Allow"] == "GET, HEAD"


def test_other_paths_are_404(serve: Serve) -> None:
    port = serve(FakeSource(make_sample())).port
    assert fetch(port, "/admin")[0] == 404
    assert fetch(port, "/metrics/x")[0] == 404
    assert fetch(port, "/admin", "HEAD")[0] == 404


def test_metrics_answer_503_until_the_first_sample(serve: Serve) -> None:
    source = SlowSource(make_sample())
    exporter = serve(source, wait=False)  # listening already: the first sample is stuck
    status, headers, body = fetch(exporter.port, "/metrics")
    assert (status, body) == (503, b"waiting for the first sample\n")
    assert headers["Retry-After"] == "1"
    assert fetch(exporter.port, "/metrics", "HEAD")[0] == 503
    assert fetch(exporter.port, "/")[0] == 200
    source.release()
    assert exporter.first_sample.wait(5)
    status, _, body = fetch(exporter.port, "/metrics")
    assert status == 200 and b"gpumon_gpu_up" in body


def test_no_driver_is_503_with_the_reason_never_an_empty_200(serve: Serve) -> None:
    # What /metrics answers in the moment before `gpumon export` exits 1 without a driver.
    exporter = serve(FakeSource(no_driver_sample()))
    status, _, body = fetch(exporter.port, "/metrics")
    assert (status, body) == (503, b"no NVIDIA GPU data: No NVIDIA driver.\n")


def test_stop_returns_within_a_second_while_a_sample_is_stuck(serve: Serve) -> None:
    source = SlowSource(make_sample())
    exporter = serve(source, wait=False)
    deadline = time.monotonic() + 5
    while source.calls == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    assert exporter.stop() is False  # the sampler is still in its call: not joined for long
    assert time.monotonic() - started < 1.0
    assert not source.closed  # stop() never closes the source under a running call
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", exporter.port), timeout=1).close()
    source.release()  # the driver call returns: now the source is closed, on its thread
    while not source.closed:
        assert time.monotonic() < deadline + 5, "the source was never closed"
        time.sleep(0.01)
    assert source.calls == 1


class CountingSource:
    """Each sample is numbered (its timestamp) and takes 10 ms; records the threads that
    sample and how many samples ran at once."""

    simulated = False

    def __init__(self) -> None:
        self.calls = 0
        self.active = 0
        self.max_active = 0
        self.threads: set[str] = set()
        self.closed = False
        self._lock = threading.Lock()

    def sample(self) -> Sample:
        with self._lock:
            self.calls += 1
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            number = self.calls
        self.threads.add(threading.current_thread().name)
        time.sleep(0.01)
        with self._lock:
            self.active -= 1
        return dataclasses.replace(make_sample(), timestamp_s=float(number))

    def close(self) -> None:
        self.closed = True


def test_the_exporter_samples_into_its_store_one_read_at_a_time(serve: Serve) -> None:
    """The dashboard's poller on a thread of its own: a sample asked of the store from another
    thread's event loop is a new one, and stop() closes the source once sampling ended."""
    source = CountingSource()
    exporter = serve(source, interval_s=0.25)
    before = exporter.store.latest
    assert before is not None

    async def next_sample() -> Sample:
        return await asyncio.wait_for(exporter.store.next_sample(), 5)

    fresh = asyncio.run(next_sample())
    assert fresh.timestamp_s > before.timestamp_s
    assert fetch(exporter.port)[0] == 200
    assert exporter.stop() is True
    assert source.closed
    assert source.threads == {"gpumon-poller"} and source.max_active == 1


def closed_after(
    connection: socket.socket, *, trickle: bool = False, limit_s: float = 5.0
) -> float:
    """Seconds until the server closes ``connection``; with ``trickle`` send a byte every
    0.1 s meanwhile (a slowloris client)."""
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        if trickle:
            try:
                connection.send(b"X")
            except OSError:
                return time.monotonic() - started
        readable, _, _ = select.select([connection], [], [], 0.1)
        if readable:
            try:
                if connection.recv(65536) == b"":
                    return time.monotonic() - started
            except OSError:
                return time.monotonic() - started
    pytest.fail(f"the server kept the connection open for {limit_s} s")


def test_a_silent_connection_is_closed_at_the_deadline(serve: Serve) -> None:
    exporter = serve(FakeSource(make_sample()), limits=Limits(request_timeout_s=0.5))
    with socket.create_connection(("127.0.0.1", exporter.port)) as connection:
        assert 0.4 < closed_after(connection) < 1.5  # was: never
    assert exporter.server.connections == 0


def test_a_slowloris_request_is_cut_at_the_deadline(serve: Serve) -> None:
    # Each byte comes well within any per-read timeout; only a deadline for the whole
    # request ends it.
    exporter = serve(FakeSource(make_sample()), limits=Limits(request_timeout_s=1.0))
    with socket.create_connection(("127.0.0.1", exporter.port)) as connection:
        connection.sendall(b"GET /metrics HTTP/1.0\r\nX-Slow: ")
        assert 0.9 < closed_after(connection, trickle=True) < 2.0


def test_a_client_that_never_reads_its_answer_is_cut_at_the_deadline(serve: Serve) -> None:
    # An answer far larger than the socket buffers (8 MiB of user labels), to a client with
    # a small receive buffer that reads nothing: the server's write blocks until the deadline.
    sample = make_sample()
    processes = tuple(
        GpuProcess(0, sample.gpus[0].uuid, 10_000 + n, ProcessKind.COMPUTE, GIB, "u" * 4000)
        for n in range(2000)
    )
    exporter = serve(
        FakeSource(dataclasses.replace(sample, processes=processes)),
        limits=Limits(write_timeout_s=1.0),
    )
    with socket.socket() as connection:
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        connection.connect(("127.0.0.1", exporter.port))
        connection.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        time.sleep(0.5)
        assert exporter.server.connections == 1  # blocked writing to us
        deadline = time.monotonic() + 2.0
        while exporter.server.connections and time.monotonic() < deadline:
            time.sleep(0.05)
        assert exporter.server.connections == 0


def test_connections_beyond_the_cap_close_the_oldest_and_scrapes_get_in(serve: Serve) -> None:
    """Was: over the bound a scrape got 503 until the idle connections timed out. Now a new
    connection closes the one that has waited longest, so a scraper always gets in."""
    source = FakeSource(make_sample())
    exporter = serve(source, interval_s=0.05, limits=Limits(max_connections=4))
    threads_before = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", exporter.port)) for _ in range(50)]
    try:
        deadline = time.monotonic() + 5
        closed: set[int] = set()
        while len(closed) < 46:  # the oldest go first: the 4 held are the newest
            assert time.monotonic() < deadline, sorted(closed)
            closed |= {number for number, sock in enumerate(idle) if closed_now(sock)}
            time.sleep(0.05)
        assert closed == set(range(46)) and exporter.server.connections == 4
        assert threading.active_count() == threads_before  # no thread per connection
        calls = source.calls
        for _ in range(5):  # at once, not after the idle ones time out
            assert fetch(exporter.port)[0] == 200
        assert exporter.server.connections <= 4
        while source.calls == calls:  # sampling went on all along
            assert time.monotonic() < deadline + 5, "sampling stopped"
            time.sleep(0.05)
    finally:
        for connection in idle:
            connection.close()


def closed_now(connection: socket.socket) -> bool:
    """The server has closed ``connection`` (reset, or end of stream with nothing sent)."""
    readable, _, _ = select.select([connection], [], [], 0)
    if not readable:
        return False
    try:
        return connection.recv(1) == b""
    except OSError:
        return True


_LOW_FD_EXPORTER = textwrap.dedent(
    """
    import resource, sys
    from gpumon.commands.export.collector import SampleCollector
    from gpumon.commands.export.http import Exporter
    from gpumon.sources.demo import DemoSource

    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    class ReadsProc(DemoSource):
        def sample(self):
            with open("/proc/meminfo") as meminfo:  # as psutil does for the host strip
                meminfo.read()
            return super().sample()

    exporter = Exporter(ReadsProc(gpu_count=2), SampleCollector(), "127.0.0.1", 0, 0.5)
    print(exporter.port, flush=True)
    sys.stdin.read()
    """
)


def proc_count(pid: int) -> tuple[int, int]:
    """Open descriptors and threads of process ``pid``."""
    status = Path(f"/proc/{pid}/status").read_text()
    threads = re.search(r"^Threads:\s+(\d+)", status, re.MULTILINE)
    assert threads is not None
    return len(os.listdir(f"/proc/{pid}/fd")), int(threads.group(1))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.slow
def test_200_idle_sockets_under_a_64_descriptor_limit_starve_neither_scrapes_nor_sampling() -> None:
    """What went wrong: with `ulimit -n 1024`, 1,100 silent sockets stopped scrapes and then
    sampling itself (`Too many open files: '/proc/meminfo'`). Here 200 under a limit of 64."""
    child = subprocess.Popen(
        [sys.executable, "-c", _LOW_FD_EXPORTER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    idle: list[socket.socket] = []
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        # Its first sample first (a loaded machine may take a while to start it): what is
        # tested is that the sockets below stop neither scrapes nor the sampling after it.
        deadline = time.monotonic() + 20
        while fetch(port)[0] != 200:
            assert time.monotonic() < deadline, "the exporter never served a sample"
            time.sleep(0.1)
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
        time.sleep(0.5)
        fds, threads = proc_count(child.pid)
        assert fds <= 40, fds  # the cap (half the free descriptors) plus its own, not 200
        # Main, HTTP, the sampler's event loop and its sampling thread: none per connection.
        assert threads <= 5, threads
        status, _, body = fetch(port)  # at once: the oldest idle connection makes room
        assert status == 200
        series = parse(body.decode())
        assert series["gpumon_sampling_errors_total"] == {(): 0.0}  # no EMFILE in sampling
        assert time.time() - series["gpumon_sample_timestamp_seconds"][()] < 2.0
    finally:
        for connection in idle:
            connection.close()
        child.kill()
        child.wait()
