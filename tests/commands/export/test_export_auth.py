"""`gpumon export --web-config-file` basic auth under a flood of wrong passwords: the scraper
with the right password is answered, fresh or known, and the exporter stops cleanly."""

from __future__ import annotations

import asyncio
import base64
import http.client
import signal
import ssl
import threading
import time

import bcrypt
import pytest

from gpumon.commands.export import auth
from gpumon.commands.export.auth import BasicAuth, client_lane
from gpumon.commands.export.messages import Request
from tests.commands.export.test_export_cli import start_process
from tests.commands.export.test_export_tls import (  # noqa: F401 (pki and serve are fixtures)
    PASSWORD,
    Serve,
    client_context,
    get,
    hashed,
    pki,
    serve,
    web_config,
)

#: The flood's own address: any 127.x.y.z is loopback on Linux; the scraper uses 127.0.0.1.
FLOODER = "127.0.0.2"


class Flood:
    """``threads`` connections from :data:`FLOODER`, each sending wrong passwords for the
    known user as fast as it is answered, until stopped (or a minute has passed)."""

    def __init__(self, port: int, context: ssl.SSLContext, threads: int = 30) -> None:
        self.statuses: set[int] = set()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(port, context, n), daemon=True)
            for n in range(threads)
        ]

    def __enter__(self) -> Flood:
        for thread in self._threads:
            thread.start()
        deadline = time.monotonic() + 10
        while 429 not in self.statuses and time.monotonic() < deadline:  # its lane is full
            time.sleep(0.05)
        assert 429 in self.statuses, self.statuses
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(20)

    def _run(self, port: int, context: ssl.SSLContext, number: int) -> None:
        headers = {
            "Authorization": "Basic " + base64.b64encode(f"alice:no{number}".encode()).decode()
        }
        deadline = time.monotonic() + 60
        while not self._stop.is_set() and time.monotonic() < deadline:
            connection = http.client.HTTPSConnection(
                "127.0.0.1", port, context=context, timeout=15, source_address=(FLOODER, 0)
            )
            try:
                while not self._stop.is_set() and time.monotonic() < deadline:
                    connection.request("GET", "/metrics", headers=headers)
                    response = connection.getresponse()
                    response.read()
                    self.statuses.add(response.status)
            except (OSError, http.client.HTTPException):
                pass  # closed under it: connect again
            finally:
                connection.close()


def scrapes(port: int, context: ssl.SSLContext, count: int = 20) -> list[int | str]:
    """``count`` scrapes with the right password, a new connection each, 0.1 s apart."""
    answers: list[int | str] = []
    for _ in range(count):
        try:
            answers.append(get(port, context, auth=f"alice:{PASSWORD}")[0])
        except (OSError, http.client.HTTPException) as error:
            answers.append(type(error).__name__)
        time.sleep(0.1)
    return answers


@pytest.fixture
def slow_bcrypt(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each check takes 50 ms, as at a production cost (the tests' hashes are cheap)."""
    real = bcrypt.checkpw

    def slow(password: bytes, hashed_password: bytes) -> bool:
        time.sleep(0.05)
        return real(password, hashed_password)

    monkeypatch.setattr(bcrypt, "checkpw", slow)


@pytest.mark.usefixtures("slow_bcrypt")
@pytest.mark.parametrize("known", [False, True], ids=["fresh", "known"])
@pytest.mark.slow
def test_a_flood_of_wrong_passwords_from_one_client_does_not_lock_the_scraper_out(
    pki: dict[str, object],  # noqa: F811
    serve: Serve,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    known: bool,
) -> None:
    """30 connections from one address send wrong passwords for the known user without
    pause; the scraper (another address) gets at least 19 of its 20 scrapes, whether its
    password has been checked before the flood (and is remembered for less time than the
    scrapes take, from the check) or not yet."""
    exporter = serve(web_config(pki, f"basic_auth_users:\n  alice: {hashed()}\n"))
    context = client_context(pki)
    if known:
        monkeypatch.setattr(auth, "REMEMBER_S", 1.0)
        assert get(exporter.port, context, auth=f"alice:{PASSWORD}")[0] == 200
    with Flood(exporter.port, context):
        answers = scrapes(exporter.port, context)
    assert answers.count(200) >= 19, answers


def test_a_right_password_is_remembered_from_its_last_use() -> None:
    """A scraper that comes back within the time remembered is never checked again."""
    now = [0.0]
    gate = BasicAuth({"alice": hashed().encode()}, clock=lambda: now[0])
    header = "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    request = Request("GET", "/metrics", (1, 1), {"authorization": header})

    async def scrape_at(times: list[float]) -> list[object]:
        answers = []
        for when in times:
            now[0] = when
            answers.append(await gate.gate(request, "127.0.0.1"))
        return answers

    try:
        step = auth.REMEMBER_S * 0.6
        assert asyncio.run(scrape_at([step * n for n in range(6)])) == [None] * 6
        assert gate.checks == 1
        asyncio.run(scrape_at([step * 5 + auth.REMEMBER_S + 1]))  # unused for too long
        assert gate.checks == 2
    finally:
        gate.stop()


def test_each_client_address_has_its_own_lane() -> None:
    """A full lane refuses its own client's checks only."""
    worker = auth._Worker(2, 3, 4)
    release = threading.Event()
    worker._run = release.wait  # type: ignore[method-assign]  # nothing is checked
    try:
        assert worker.submit("a", None, b"1") and worker.submit("a", None, b"2")
        assert worker.submit("a", None, b"3") is None
        assert worker.submit("b", None, b"1") and worker.submit("c", None, b"1")
        assert worker.submit("d", None, b"1") is None  # every lane is taken
    finally:
        release.set()
        worker.stop()


@pytest.mark.usefixtures("slow_bcrypt")
def test_stopping_waits_for_the_check_under_way(
    pki: dict[str, object],  # noqa: F811
    serve: Serve,  # noqa: F811
) -> None:
    """No bcrypt check outlives stop(): the process may exit right after it."""
    exporter = serve(web_config(pki, f"basic_auth_users:\n  alice: {hashed()}\n"))
    context = client_context(pki)
    with Flood(exporter.port, context):  # keeps the auth thread busy
        exporter.stop()
        assert "gpumon-auth" not in {thread.name for thread in threading.enumerate()}


@pytest.mark.slow
def test_sigterm_during_a_flood_exits_cleanly(pki: dict[str, object]) -> None:  # noqa: F811
    """SIGTERM while bcrypt runs on the auth thread: the usual exit, not an abort (a check
    that ended while the interpreter exited used to abort it, about one time in three)."""
    cost = bcrypt.gensalt(8)
    path = web_config(pki, f"basic_auth_users:\n  alice: {bcrypt.hashpw(b'x', cost).decode()}\n")
    for _ in range(3):
        process = start_process("--demo", "--listen", "127.0.0.1:0", "--web-config-file", str(path))
        try:
            assert process.stderr is not None
            banner = process.stderr.readline()
            port = int(banner.split("https://127.0.0.1:")[1].split("/")[0])
            with Flood(port, client_context(pki), threads=16):
                time.sleep(0.3)
                process.send_signal(signal.SIGTERM)
                _, err = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        assert process.returncode == 0, err
        assert "FATAL" not in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("address", "lane"),
    [
        ("127.0.0.2", "127.0.0.2"),
        ("::ffff:10.0.0.7", "10.0.0.7"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:bbbb::9%eth0", "2001:db8:1:2::/64"),
        ("::1", "::1"),
    ],
)
def test_one_host_is_one_lane_whatever_address_of_its_ipv6_64_it_uses(
    address: str, lane: str
) -> None:
    """Otherwise one host with a /64 could take every lane and lock new scrapers out."""
    assert client_lane(address) == lane
