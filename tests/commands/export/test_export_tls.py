"""`gpumon export --web-config-file`: TLS, mutual TLS and basic auth over real sockets on
loopback, with certificates made here; hostile TLS clients hold nothing past the deadline."""

from __future__ import annotations

import base64
import contextlib
import http.client
import os
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import bcrypt
import pytest

from gpumon.commands.export.auth import QUEUE_SIZE
from gpumon.commands.export.collector import SampleCollector
from gpumon.commands.export.http import Exporter
from gpumon.commands.export.server import Limits
from gpumon.commands.export.web_config import load_web_config
from tests.commands.export.test_export import FakeSource, make_sample, parse
from tests.commands.export.test_export_cli import start_process
from tests.commands.export.test_export_http import closed_after, closed_now
from tests.support.tls_certs import TEST_COST, Authority, Pair, write_config

PASSWORD = "s3cret-p4ss"
Serve = Callable[..., Exporter]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """A CA with a server and a client certificate, and a client of another CA."""
    directory = tmp_path_factory.mktemp("pki")
    ca = Authority(directory)
    stranger = Authority(directory, "another CA")
    return {
        "dir": directory,
        "ca": ca,
        "server": ca.issue("server", server=True),
        "client": ca.issue("client", server=False),
        "stranger": stranger.issue("stranger", server=False),
    }


def web_config(pki: dict[str, object], body: str = "") -> Path:
    server = pki["server"]
    assert isinstance(server, Pair)
    directory = pki["dir"]
    assert isinstance(directory, Path)
    text = f"tls_server_config:\n  cert_file: {server.cert.name}\n  key_file: {server.key.name}\n"
    return write_config(directory, text + body, f"web-{abs(hash(body))}.yml")


@pytest.fixture
def serve() -> Iterator[Serve]:
    started: list[Exporter] = []

    def start(path: Path, limits: Limits | None = None) -> Exporter:
        exporter = Exporter(
            FakeSource(make_sample()),
            SampleCollector(),
            "127.0.0.1",
            0,
            3600.0,
            web=load_web_config(str(path)),
            limits=limits,
        )
        started.append(exporter)
        assert exporter.first_sample.wait(5)
        return exporter

    yield start
    for exporter in started:
        exporter.stop()


def client_context(pki: dict[str, object], identity: str | None = None) -> ssl.SSLContext:
    ca = pki["ca"]
    assert isinstance(ca, Authority)
    context = ssl.create_default_context(cafile=str(ca.cert))
    if identity is not None:
        pair = pki[identity]
        assert isinstance(pair, Pair)
        context.load_cert_chain(str(pair.cert), str(pair.key))
    return context


def get(
    port: int, context: ssl.SSLContext, path: str = "/metrics", auth: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
    try:
        headers = {}
        if auth is not None:
            headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def test_tls_serves_metrics_to_a_client_that_trusts_the_ca(
    pki: dict[str, object], serve: Serve
) -> None:
    exporter = serve(web_config(pki))
    status, headers, body = get(exporter.port, client_context(pki))
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert parse(body.decode())["gpumon_gpu_up"]
    with pytest.raises(ssl.SSLCertVerificationError):  # a client that does not trust it
        get(exporter.port, ssl.create_default_context())


@pytest.mark.parametrize("mode", ["RequireAndVerifyClientCert", "VerifyClientCertIfGiven"])
def test_mutual_tls_takes_only_certificates_of_the_client_ca(
    pki: dict[str, object],
    serve: Serve,
    mode: str,
) -> None:
    ca = pki["ca"]
    assert isinstance(ca, Authority)
    exporter = serve(web_config(pki, f"  client_auth_type: {mode}\n  client_ca_file: {ca.cert}\n"))
    assert get(exporter.port, client_context(pki, "client"))[0] == 200
    with pytest.raises((ssl.SSLError, ConnectionError)):  # another CA's certificate
        get(exporter.port, client_context(pki, "stranger"))
    if mode == "RequireAndVerifyClientCert":
        with pytest.raises((ssl.SSLError, ConnectionError)):  # no certificate at all
            get(exporter.port, client_context(pki))
    else:
        assert get(exporter.port, client_context(pki))[0] == 200
    assert get(exporter.port, client_context(pki, "client"))[0] == 200  # serving on


def auth_checks(exporter: Exporter) -> int:
    assert exporter.auth is not None
    return exporter.auth.checks


def hashed(password: str = PASSWORD) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(TEST_COST)).decode()


def test_basic_auth_right_wrong_and_missing(pki: dict[str, object], serve: Serve) -> None:
    exporter = serve(web_config(pki, f"basic_auth_users:\n  alice: {hashed()}\n"))
    context = client_context(pki)
    assert get(exporter.port, context, auth=f"alice:{PASSWORD}")[0] == 200
    for auth in (None, "alice:wrong", f"mallory:{PASSWORD}", "alice:" + "x" * 100, "alice"):
        status, headers, _ = get(exporter.port, context, "/", auth=auth)
        assert status == 401, auth
        assert headers["www-authenticate"].startswith("Basic")
    checks = auth_checks(exporter)
    for _ in range(5):  # a right password is remembered: Prometheus does not pay bcrypt
        assert get(exporter.port, context, auth=f"alice:{PASSWORD}")[0] == 200
    assert auth_checks(exporter) == checks


def test_bcrypt_never_runs_on_the_event_loop_and_a_flood_of_wrong_passwords_is_bounded(
    pki: dict[str, object],
    serve: Serve,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """40 wrong passwords at once, each check made slow (50 ms): beyond the queue they get
    429 at once; a scraper whose password is remembered is answered meanwhile, in
    milliseconds; every check ran on the auth thread."""
    real = bcrypt.checkpw
    threads: set[str] = set()

    def slow(password: bytes, hashed_password: bytes) -> bool:
        threads.add(threading.current_thread().name)
        time.sleep(0.05)
        return real(password, hashed_password)

    monkeypatch.setattr(bcrypt, "checkpw", slow)
    exporter = serve(web_config(pki, f"basic_auth_users:\n  alice: {hashed()}\n"))
    context = client_context(pki)
    assert get(exporter.port, context, auth=f"alice:{PASSWORD}")[0] == 200
    checks = auth_checks(exporter)
    results: list[int] = []
    attackers = [
        threading.Thread(
            target=lambda n=n: results.append(get(exporter.port, context, auth=f"alice:no{n}")[0])
        )
        for n in range(40)
    ]
    for attacker in attackers:
        attacker.start()
    time.sleep(0.1)
    started = time.monotonic()
    assert get(exporter.port, context, auth=f"alice:{PASSWORD}")[0] == 200
    assert time.monotonic() - started < 0.5  # the loop was never blocked by bcrypt
    for attacker in attackers:
        attacker.join(10)
    assert sorted(set(results)) == [401, 429]
    # Only the queued ones were checked (QUEUE_SIZE wait, one is checked, as the slow checks
    # free places); the rest were refused at once, without bcrypt.
    assert results.count(401) == auth_checks(exporter) - checks
    assert results.count(429) >= 40 - 3 * (QUEUE_SIZE + 1)
    assert threads == {"gpumon-auth"}


def test_plain_http_to_the_tls_port_gets_a_plain_400_and_no_traceback(
    pki: dict[str, object],
    serve: Serve,
    capfd: pytest.CaptureFixture[str],
) -> None:
    exporter = serve(web_config(pki))
    for request in (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", b"\x00garbage\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", exporter.port), timeout=5) as connection:
            connection.sendall(request)
            answer = b""
            while chunk := connection.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.0 400 Bad Request\r\n")
        assert answer.endswith(b"this exporter speaks HTTPS only: use https:// URLs\n")
    assert get(exporter.port, client_context(pki))[0] == 200
    assert "Traceback" not in capfd.readouterr().err


def test_a_stalled_handshake_is_closed_at_the_request_deadline(
    pki: dict[str, object],
    serve: Serve,
) -> None:
    exporter = serve(web_config(pki), Limits(request_timeout_s=0.5))
    with socket.create_connection(("127.0.0.1", exporter.port), timeout=5) as idle:
        assert 0.3 < closed_after(idle) < 2.0  # never a byte
    with socket.create_connection(("127.0.0.1", exporter.port), timeout=5) as stalled:
        stalled.sendall(b"\x16\x03\x01\x02\x00\x01")  # a ClientHello that never ends
        assert 0.3 < closed_after(stalled) < 2.0
    with socket.create_connection(("127.0.0.1", exporter.port), timeout=5) as trickler:
        assert closed_after(trickler, trickle=True) < 2.0  # bytes that are not TLS
    raw = socket.create_connection(("127.0.0.1", exporter.port), timeout=5)
    with client_context(pki).wrap_socket(raw, server_hostname="127.0.0.1") as slowloris:
        started = time.monotonic()  # handshaken, then a request line a byte at a time
        with pytest.raises(OSError):  # the server closed it: sending fails
            while time.monotonic() - started < 3:
                slowloris.send(b"G")
                time.sleep(0.1)
        assert time.monotonic() - started < 2.0
    deadline = time.monotonic() + 3
    while exporter.server.connections and time.monotonic() < deadline:
        time.sleep(0.05)
    assert exporter.server.connections == 0


def test_scrapes_get_through_dozens_of_hostile_tls_connections_within_the_cap(
    pki: dict[str, object],
    serve: Serve,
) -> None:
    """30 idle connections, 30 stalled handshakes and 10 handshaken clients that never send a
    request, over a cap of 40: every scrape answers, the oldest hostile ones make room."""
    exporter = serve(web_config(pki), Limits(max_connections=40))
    context = client_context(pki)
    held: list[socket.socket] = []
    try:
        for _ in range(30):
            held.append(socket.create_connection(("127.0.0.1", exporter.port), timeout=5))
        for _ in range(30):
            stalled = socket.create_connection(("127.0.0.1", exporter.port), timeout=5)
            stalled.sendall(b"\x16\x03\x01\x02\x00\x01")
            held.append(stalled)
        for _ in range(10):
            raw = socket.create_connection(("127.0.0.1", exporter.port), timeout=5)
            held.append(context.wrap_socket(raw, server_hostname="127.0.0.1"))
        for _ in range(10):
            started = time.monotonic()
            status, _, body = get(exporter.port, context)
            assert status == 200 and b"gpumon_gpu_up" in body
            assert time.monotonic() - started < 1.0
        assert exporter.server.connections <= 40
        # The oldest (idle, then in their handshake) were closed to make room, not leaked.
        raw = held[:60]
        deadline = time.monotonic() + 3
        while sum(map(closed_now, raw)) < 30 and time.monotonic() < deadline:
            time.sleep(0.05)
        closed = [number for number, sock in enumerate(raw) if closed_now(sock)]
        assert len(closed) >= 30 and closed[:10] == list(range(10)), closed
    finally:
        for connection in held:
            connection.close()


def test_the_command_serves_https_with_auth(pki: dict[str, object]) -> None:
    path = web_config(pki, f"basic_auth_users:\n  prometheus: {hashed()}\n")
    process = start_process("--demo", "--listen", "127.0.0.1:0", "--web-config-file", str(path))
    try:
        assert process.stderr is not None
        banner = process.stderr.readline()
        match = re.search(
            r"serving https://127\.0\.0\.1:(\d+)/metrics \(basic auth, 1 user\)", banner
        )
        assert match, banner
        port = int(match.group(1))
        assert get(port, client_context(pki))[0] == 401
        status, _, body = get(port, client_context(pki), auth=f"prometheus:{PASSWORD}")
        assert status == 200 and b"gpumon_simulated 1.0" in body
    finally:
        process.terminate()
        _, err = process.communicate(timeout=10)
    assert process.returncode == 0 and "Traceback" not in err


def server_end(client: socket.socket) -> socket.socket:
    """The exporter's socket (in this process) of ``client``'s connection, found by its
    address among this process's descriptors; a duplicate, to close."""
    for name in os.listdir("/proc/self/fd"):
        try:
            sock = socket.socket(fileno=os.dup(int(name)))
        except OSError:  # not a socket
            continue
        try:
            if sock.family == client.family and sock.getpeername() == client.getsockname():
                return sock
        except OSError:
            pass
        sock.close()
    raise AssertionError("the exporter's end of the connection was not found")


@pytest.mark.parametrize("scheme", ["https", "http"])
def test_answers_are_not_held_back_by_nagle(
    pki: dict[str, object], serve: Serve, scheme: str
) -> None:
    """The exporter's end of a connection has TCP_NODELAY: an answer's head and body go out
    at once, never after the client's delayed ACK (40 ms a scrape on a kept-alive
    connection, and every TLS one)."""
    directory = pki["dir"]
    assert isinstance(directory, Path)
    path = web_config(pki) if scheme == "https" else write_config(directory, "{}\n", "plain.yml")
    exporter = serve(path)
    connection: http.client.HTTPConnection = (
        http.client.HTTPSConnection("127.0.0.1", exporter.port, context=client_context(pki))
        if scheme == "https"
        else http.client.HTTPConnection("127.0.0.1", exporter.port)
    )
    with contextlib.closing(connection):
        connection.request("GET", "/metrics")
        assert connection.getresponse().read()
        assert connection.sock is not None
        with server_end(connection.sock) as end:
            assert end.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
