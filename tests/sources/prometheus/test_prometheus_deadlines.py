"""A Prometheus that answers slowly, hugely or elsewhere: every request ends within its
timeout however the bytes arrive, an answer too large is refused, a redirect is not followed.

Real loopback servers (tests/support/prometheus_replay.py): a trickling one sends the status line,
the headers or the body one byte every 0.2 s, over TCP or TLS; `gpumon once` and `gpumon
pick` run as subprocesses against it. Bounds are generous (the timeout + 1.5 s): they fail
only when a request is not bounded at all.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon.data.cluster import NodeState
from gpumon.sources.prometheus import client
from gpumon.sources.prometheus.source import PrometheusSource
from tests.support.prometheus_replay import (
    Replay,
    Reply,
    Script,
    Trickler,
    http_head,
    load,
    self_signed,
)

ROOT = Path(__file__).resolve().parents[3]
TIMEOUT_S = 1.5
#: How much longer than its timeout a request may take on a busy machine.
SLACK_S = 1.5

OK_HEAD = http_head("200 OK", "Content-Type: application/json", "Content-Length: 5000")
A_LONG_HEADER = "X-Padding: " + "p" * 400  # trickled, it would take 80 s


SCRIPTS = {
    "status line and headers": Script(
        head=http_head("200 OK", A_LONG_HEADER, "Content-Length: 2"),
        body=b"{}",
        trickle_head=True,
    ),
    "body": Script(head=OK_HEAD, body=b" " * 5000, trickle_body=True),
    "error body": Script(
        head=http_head("500 Internal Server Error", "Content-Length: 5000"),
        body=b'{"status":"error","error":"' + b"x" * 4000 + b'"}',
        trickle_body=True,
    ),
    "chunked body": Script(
        head=http_head("200 OK", "Transfer-Encoding: chunked"),
        body=b"1000\r\n" + b" " * 4096,
        trickle_body=True,
    ),
    "nothing at all": Script(silent=True),
}


@pytest.fixture
def trickler(request: pytest.FixtureRequest) -> Iterator[Trickler]:
    server = Trickler(SCRIPTS[request.param])
    yield server
    server.close()


def timed_sample(source: PrometheusSource, detail: bool = False) -> tuple[float, str]:
    """How long a sample took, and its error: the aggregate path's (``detail``: the
    per-series path's)."""
    started = time.monotonic()
    result = source.sample(detail=detail)
    elapsed = time.monotonic() - started
    assert result.error is not None and result.stale
    return elapsed, result.error


@pytest.mark.parametrize("detail", [False, True], ids=["aggregate", "per-series"])
@pytest.mark.parametrize("trickler", list(SCRIPTS), indirect=True)
def test_a_trickling_server_times_out_within_the_timeout(trickler: Trickler, detail: bool) -> None:
    source = PrometheusSource(trickler.url, timeout_s=TIMEOUT_S)
    elapsed, error = timed_sample(source, detail)
    assert elapsed < TIMEOUT_S + SLACK_S, error
    assert error == f"Prometheus at {trickler.url}: no answer within {TIMEOUT_S:g} s"


def test_a_stalled_server_turns_the_nodes_it_had_stale(tmp_path: Path) -> None:
    """What the dashboard shows: after the timeout, a banner (``error``) and no node UP,
    so no GPU of it counted free."""
    replay = Replay()
    try:
        replay.serve("demo")
        source = PrometheusSource(replay.url, timeout_s=TIMEOUT_S)
        assert [node.state for node in source.sample(detail=True).nodes] == [NodeState.UP]
        assert [row.state for row in source.sample().rows or ()] == [NodeState.UP]
        replay.reply = Reply(hang_s=30)
        started = time.monotonic()
        stalled = source.sample()
        assert time.monotonic() - started < TIMEOUT_S + SLACK_S
    finally:
        replay.close()
    assert stalled.error is not None and "no answer within" in stalled.error
    assert [row.state for row in stalled.rows or ()] == [NodeState.STALE]


def test_an_interrupt_does_not_wait_for_the_queries_in_flight() -> None:
    """Ctrl-C during a refresh (``gpumon once``) ends it at once, however long its queries
    would take: their threads are daemons, ended with the process."""
    server = Trickler(Script(silent=True))
    asking = client._Client(server.url, {}, None, None, 20.0, None)

    def interrupted(entries: Iterator[object]) -> None:
        raise KeyboardInterrupt

    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            asking.read("/api/v1/query", [{"query": "up"}, {"query": "up"}], interrupted)
    finally:
        server.close()
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("script", ["silent handshake", "body"])
def test_tls_is_bounded_too(tmp_path: Path, script: str) -> None:
    """A server that never finishes the TLS handshake, and one that trickles its body
    through TLS."""
    context, cert = self_signed(tmp_path)
    if script == "silent handshake":
        # A plain TCP server: the client's TLS hello is never answered.
        server = Trickler(Script(silent=True))
        url = server.url.replace("http://", "https://")
    else:
        server = Trickler(SCRIPTS["body"], tls=context)
        url = server.url
    try:
        source = PrometheusSource(url, timeout_s=TIMEOUT_S, ca_file=str(cert))
        elapsed, error = timed_sample(source)
    finally:
        server.close()
    assert elapsed < TIMEOUT_S + SLACK_S
    assert error.endswith(f"no answer within {TIMEOUT_S:g} s")


@pytest.mark.parametrize(
    "argv",
    [
        ["once"],
        ["once", "--json"],
        ["pick", "-n", "1"],
    ],
)
@pytest.mark.slow
def test_the_headless_modes_end_within_the_timeout(argv: list[str]) -> None:
    server = Trickler(SCRIPTS["body"])
    command = [sys.executable, "-m", "gpumon", *argv, "--prometheus", server.url]
    try:
        started = time.monotonic()
        done = subprocess.run(
            [*command, "--prometheus-timeout", "2"],
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
        )
        elapsed = time.monotonic() - started
    finally:
        server.close()
    assert elapsed < 2 + 3, (elapsed, done.stderr)  # the timeout, and starting Python
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert "no answer within 2 s" in line
    if "--json" in argv:
        assert "no answer within 2 s" in json.loads(done.stdout)["error"]


def test_environment_proxies_are_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """``http_proxy`` works as with urllib's own opener: the request goes to the proxy."""
    proxy = Replay()
    try:
        proxy.serve("demo")
        monkeypatch.setenv("http_proxy", proxy.url)
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        result = PrometheusSource("http://prometheus.invalid:9090", timeout_s=5).sample(detail=True)
    finally:
        proxy.close()
    assert result.error is None and len(result.nodes) == 1
    assert {path for path, _, _ in proxy.requests} == {
        "http://prometheus.invalid:9090/api/v1/query"
    }


# --- Size ------------------------------------------------------------------------------------

CAP = client.MAX_ANSWER_BYTES
LIMIT = "gpumon reads at most 64 MiB at once"


def test_the_cap_fits_hundreds_of_nodes() -> None:
    """64 MiB: a thousand 8-GPU nodes answer about 50 MB; parsing costs ~6x in memory."""
    demo = load("demo")["data"]
    per_gpu = len(json.dumps(demo, separators=(",", ":"))) / 4
    assert 1000 * 8 * per_gpu < CAP <= 64 * 1024**2


def test_a_content_length_over_the_cap_is_refused_before_reading() -> None:
    script = Script(head=http_head("200 OK", f"Content-Length: {CAP + 1}"), silent=False)
    server = Trickler(script)  # then sends nothing: reading would wait for the timeout
    try:
        elapsed, error = timed_sample(PrometheusSource(server.url, timeout_s=10))
    finally:
        server.close()
    assert elapsed < 5
    assert f"the answer is too large ({CAP + 1:,} bytes; {LIMIT})" in error


@pytest.mark.parametrize("answers", ["plain", "gzip", "together"])
def test_an_answer_without_length_is_refused_at_the_cap(answers: str) -> None:
    """Read until the connection closes (no Content-Length): refused once the cap is passed,
    as is gzip that inflates past it, and answers that each fit and not together (a refresh
    asks its queries at once)."""
    head = http_head("200 OK", "Connection: close")
    if answers == "gzip":
        body = gzip.compress(b" " * (CAP + 1), compresslevel=1)
        head = http_head("200 OK", "Content-Encoding: gzip", "Connection: close")
    elif answers == "together":  # each a whole answer (read first, it is no error), half the cap
        body = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
        body += b" " * (CAP // 2)
    else:
        body = b" " * (CAP + 65536)
    server = Trickler(Script(head=head, body=body, close_after=True))
    try:
        elapsed, error = timed_sample(PrometheusSource(server.url, timeout_s=20))
    finally:
        server.close()
    assert elapsed < 20
    assert f"the answer is too large ({LIMIT})" in error
