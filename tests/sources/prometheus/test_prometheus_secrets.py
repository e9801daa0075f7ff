"""Credentials never reach an error line, whatever a server echoes; redirects are not followed.

A loopback server (tests/support/prometheus_replay.py) answers 401, 403 and 500 with bodies and
reason phrases that quote the request's credentials in every form a server could: as sent, in
another case, percent-encoded, base64; and 3xx answers that point elsewhere.
"""

from __future__ import annotations

import base64
import http.server
import json
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpumon.sources.prometheus.redaction import HIDDEN
from gpumon.sources.prometheus.source import PrometheusSource
from tests.support.hostile import unsafe_characters
from tests.support.prometheus_replay import Replay, Reply, self_signed

TOKEN = "SecretToken123"
USER, PASSWORD = "alice", "Hunter2-pass"


@pytest.fixture
def prom() -> Iterator[Replay]:
    replay = Replay()
    replay.serve("demo")
    yield replay
    replay.close()


def echoes(*secrets: str) -> list[str]:
    """Every form of each secret a server could send back."""
    forms = []
    for secret in secrets:
        forms += [
            secret,
            secret.lower(),
            secret.upper(),
            urllib.parse.quote(secret, safe=""),
            base64.b64encode(secret.encode()).decode(),
        ]
    return forms


def api_error(text: str) -> bytes:
    return json.dumps({"status": "error", "errorType": "bad_data", "error": text}).encode()


def assert_secret_free(error: str, *secrets: str) -> None:
    for form in echoes(*secrets):
        assert form.lower() not in error.lower(), (form, error)


def with_token(url: str) -> PrometheusSource:
    return PrometheusSource(url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout_s=5)


@pytest.mark.parametrize("status", [401, 403])
def test_a_refusal_shows_nothing_the_server_said(prom: Replay, status: int) -> None:
    said = " ".join([*echoes(TOKEN), f"token={TOKEN}"])
    prom.reply = Reply(status, api_error(said), reason=f"Denied token={TOKEN}")
    error = with_token(prom.url).sample(detail=True).error
    assert error == f"Prometheus at {prom.url}: HTTP {status} (credentials missing or refused)"


@pytest.mark.parametrize("form", [*echoes(TOKEN), f"Bearer {TOKEN}", f"token={TOKEN}"])
def test_other_errors_show_the_server_text_with_the_token_masked(prom: Replay, form: str) -> None:
    prom.reply = Reply(500, api_error(f"upstream said {form} twice"), reason=f"Oops {form}")
    error = with_token(prom.url).sample(detail=True).error
    assert error is not None and "HTTP 500 Oops " in error and "upstream said" in error
    assert_secret_free(error, TOKEN)
    assert "***" in error


def test_a_query_error_is_masked_too(prom: Replay) -> None:
    prom.reply = Reply(200, api_error(f"bad query near {TOKEN.lower()}"))
    error = with_token(prom.url).sample(detail=True).error
    assert error is not None and "query failed: bad_data: bad query near ***" in error


def test_basic_auth_in_every_form(prom: Replay) -> None:
    pair = f"{USER}:{PASSWORD}"
    said = " ".join(echoes(pair, PASSWORD))
    prom.reply = Reply(502, api_error(said))
    for source in (
        PrometheusSource(prom.url, basic_auth=(USER, PASSWORD)),
        PrometheusSource(prom.url.replace("//", f"//{USER}:{PASSWORD}@")),
        PrometheusSource(prom.url, headers={"Authorization": "Basic " + b64(pair)}),
    ):
        error = source.sample(detail=True).error
        assert error is not None and "HTTP 502" in error
        assert_secret_free(error, pair, PASSWORD)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    "options",
    [
        {"basic_auth": (USER, "pw9")},
        {"headers": {"X-Api-Key": "k9"}},
        {"headers": {"Cookie": "session=ab; theme=dark"}},
    ],
    ids=["short-password", "short-header", "short-cookie"],
)
def test_a_credential_too_short_to_mask_hides_the_server_text(
    prom: Replay, options: dict[str, Any]
) -> None:
    prom.reply = Reply(500, api_error("you sent alice:pw9 k9 ab"), reason="Oops pw9 k9 ab")
    error = PrometheusSource(prom.url, **options).sample(detail=True).error
    assert error == f"Prometheus at {prom.url}: HTTP 500 ({HIDDEN})"


# --- Redirects ---------------------------------------------------------------------------------


class Redirect(http.server.BaseHTTPRequestHandler):
    location = ""
    seen: list[str] = []

    def do_POST(self) -> None:
        self.seen.append(self.path)
        self.send_response(307)
        self.send_header("Location", self.location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST

    def log_message(self, *args: Any) -> None:
        pass


def redirected(location: str, tls: Any = None, **options: Any) -> tuple[str, list[str], str]:
    """(the error line, the paths requested, the server's URL)."""
    handler = type("Handler", (Redirect,), {"location": location, "seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    scheme = "http"
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}).start()
    url = f"{scheme}://127.0.0.1:{server.server_address[1]}"
    try:
        error = PrometheusSource(url, timeout_s=5, **options).sample(detail=True).error
    finally:
        server.shutdown()
        server.server_close()
    assert error is not None
    return error, handler.seen, url


@pytest.mark.parametrize(
    ("location", "shown"),
    [
        (
            "http://elsewhere.example:9090/api/v1/query",
            "http://elsewhere.example:9090/api/v1/query",
        ),
        ("https://user:hunter2@other.example/p/api?token=abc#x", "https://other.example/p/api"),
        ("/prometheus/api/v1/query?x=1", "/prometheus/api/v1/query"),
        ("ftp://files.example/x", "ftp://files.example/x"),
        ("http://evil.example/\x1b[2Jwiped", "http://evil.example/?[2Jwiped"),
    ],
    ids=["another-host", "credentials-and-query", "same-host", "ftp", "escape"],
)
def test_a_redirect_is_not_followed_and_one_line_says_where(location: str, shown: str) -> None:
    error, seen, url = redirected(location)
    if shown.startswith("/"):
        shown = url + shown
    # The refresh's three queries, each asked once, none again at the new address.
    assert seen == ["/api/v1/query"] * 3
    assert f"HTTP 307: the server redirects to {shown}; redirects are not followed" in error
    assert "hunter2" not in error and "token=abc" not in error and "user" not in error
    assert unsafe_characters(error) == [] and "\n" not in error


def test_https_to_http_is_not_followed(tmp_path: Path) -> None:
    context, cert = self_signed(tmp_path)
    error, seen, _ = redirected("http://127.0.0.1:9/api/v1/query", tls=context, ca_file=str(cert))
    assert seen == ["/api/v1/query"] * 3
    assert "redirects to http://127.0.0.1:9/api/v1/query; redirects are not followed" in error


def test_a_redirect_naming_the_token_is_masked() -> None:
    error, _, _ = redirected(
        f"http://elsewhere.example/{TOKEN}/api",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert "redirects to http://elsewhere.example/***/api" in error
    assert_secret_free(error, TOKEN)
