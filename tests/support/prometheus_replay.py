"""Loopback servers for the Prometheus source's tests: one that replays recorded answers,
one that answers as slowly as a hostile server can.

The answers in tests/support/fixtures/prometheus were recorded from a real Prometheus scraping real
exporters (``record.py`` there says how, and regenerates them). :class:`Replay` serves them
by query over real HTTP, so the source's whole path runs: its requests, urllib, JSON, the
parser. :class:`Trickler` sends scripted bytes one at a time (or nothing at all), over TCP or
TLS (:func:`self_signed` makes a certificate).
"""

from __future__ import annotations

import copy
import dataclasses
import gzip
import http.server
import json
import shutil
import socket
import ssl
import subprocess
import threading
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from gpumon.sources.prometheus.aggregate import (
    NODE_USERS,
    RULES_EVALUATED,
    RULES_LOADED,
    RULES_VERSION,
    rows_queries,
)
from gpumon.sources.prometheus.queries import _FACT, QUERIES
from gpumon.sources.prometheus.targets import TARGET_FACTS

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "prometheus"
#: The per-series path's three queries, then the aggregate path's (every user on each node
#: read): raw, and from the rules. A refresh's queries are recorded at one instant, their
#: answers joined into one (each series is told apart by its ``gpumon_fact`` or name).
ROLES = ("targets", "data", "identity", "rows", "rules")
ALL_QUERIES = (
    *QUERIES,
    tuple(rows_queries(1024, rules=False, users=True)),
    tuple(rows_queries(1024, rules=True, users=True)),
)
_ROLE_OF = {
    query: role
    for role, asked in zip(ROLES, ALL_QUERIES, strict=True)
    for query in ([asked] if isinstance(asked, str) else asked)
}
#: The aggregate path's other queries (lean: the targets' state and latest scrape only; or
#: without every user on each node): answered with the recorded answers less the rest.
DERIVED = {
    query: ("rules" if rules else "rows", lean, users)
    for rules in (False, True)
    for lean in (False, True)
    for users in (False, True)
    if lean or not users
    for query in rows_queries(1024, rules=rules, lean=lean, users=users)
}
#: What only a whole request reads.
_SLOW_FACTS = TARGET_FACTS - {"up", "scraped"} | {
    "node:host",
    "seen_host",
    "seen_gpus",
    "seen_dcgm",
}


def _written(answer: Any, spaced: bool) -> str:
    """``answer`` as JSON laid out as Prometheus writes it (no spaces), or ``spaced``."""
    return json.dumps(answer, indent=1) if spaced else json.dumps(answer, separators=(",", ":"))


def lean(answer: dict[str, Any], users: bool = False, facts: bool = False) -> dict[str, Any]:
    """A recorded aggregate answer as the lean query gets it (``users``: asking them;
    ``facts``: every fact of the targets, as a whole refresh without users)."""
    left_out = set() if facts else set(_SLOW_FACTS)
    if not users:
        left_out.add(NODE_USERS)
    result = [
        item
        for item in answer["data"]["result"]
        if (item["metric"].get("gpumon_fact") or item["metric"].get("__name__")) not in left_out
    ]
    return {**answer, "data": {**answer["data"], "result": result}}


def asked_in(answer: dict[str, Any], query: str) -> dict[str, Any]:
    """Of a refresh's joined ``answer``, what ``query``, one of its queries, is answered:
    the rules' series read by their names, or the facts it names."""

    def answers(item: dict[str, Any]) -> bool:
        fact = item["metric"].get(_FACT)
        if fact is None:  # a recording rule's series, read by its name
            return query.startswith('{__name__=~"')
        return f'"{_FACT}", "{fact}", "", "")' in query

    result = [item for item in answer["data"]["result"] if answers(item)]
    return {**answer, "data": {**answer["data"], "result": result}}


def refreshes(queries: list[str], *expected: list[str]) -> tuple[list[Any], list[Any]]:
    """The ``queries`` asked, cut as the ``expected`` refreshes' queries are, each refresh's
    in no order (they are asked at once), and those expected: for an assertion."""
    asked, at = [], 0
    for each in expected:
        asked.append(sorted(queries[at : at + len(each)]))
        at += len(each)
    return [*asked, *([queries[at:]] if queries[at:] else [])], [sorted(e) for e in expected]


def load(scenario: str) -> dict[str, Any]:
    """The recorded answers of a scenario, by role (both paths' queries at one instant)."""
    document = json.loads((FIXTURES / f"{scenario}.json").read_text())
    recorded = tuple(q if isinstance(q, str) else tuple(q) for q in document["queries"].values())
    assert recorded == ALL_QUERIES, (
        "the source's queries changed: re-record"
        " (python tests/support/fixtures/prometheus/record.py)"
    )
    return dict(document["answers"])


def with_marker(
    answers: dict[str, Any], value: str | None, version: str | None = RULES_VERSION
) -> dict[str, Any]:
    """The scenario's answers, the rules' marker said (``value``, of ``version``; None: an
    older file's, with none) or not (None)."""
    answers = copy.deepcopy(answers)
    for role in ("rows", "rules"):
        result = answers[role]["data"]["result"]
        result[:] = [s for s in result if s["metric"].get("gpumon_fact") != RULES_LOADED]
        if value is not None:
            moment = result[0]["value"][0]
            marker = {"gpumon_fact": RULES_LOADED} | ({"version": version} if version else {})
            result.append({"metric": marker, "value": [moment, value]})
    return answers


def series(answer: dict[str, Any], name: str | None = None) -> list[dict[str, Any]]:
    return [
        item
        for item in answer["data"]["result"]
        if name is None or item["metric"].get("__name__") == name
    ]


# --- A Prometheus that replays ---------------------------------------------------------------


@dataclasses.dataclass
class Reply:
    status: int = 200
    body: bytes | None = None  # None: the scenario's answer for the query
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    hang_s: float = 0.0
    gzip: bool = False
    reason: str | None = None  # the status line's reason phrase; None: the standard one
    spaced: bool = False  # the answers laid out with spaces, as another server may write them


class Replay:
    """A loopback HTTP server answering ``/api/v1/query`` with a scenario's answers."""

    def __init__(self) -> None:
        self.answers: dict[str, Any] = load("empty")
        #: When the rules were last evaluated, where the scenario records their marker: each
        #: scenario served is a new evaluation.
        self.rules_evaluated = 1.0
        self.range_answer: dict[str, Any] = {}
        self.aliases: dict[str, str] = {}  # another query -> the role whose answer it gets
        self.reply = Reply()
        self.requests: list[tuple[str, dict[str, str], dict[str, str]]] = []
        self.release = threading.Event()
        replay = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                form = {
                    key: values[0]
                    for key, values in urllib.parse.parse_qs(
                        self.rfile.read(length).decode()
                    ).items()
                }
                replay.requests.append(
                    (self.path, form, {k.lower(): v for k, v in self.headers.items()})
                )
                replay.respond(self, form)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def serve(self, scenario: str | dict[str, Any]) -> None:
        self.answers = load(scenario) if isinstance(scenario, str) else scenario
        self.rules_evaluated += 1

    def respond(self, handler: http.server.BaseHTTPRequestHandler, form: dict[str, str]) -> None:
        reply = self.reply
        if reply.hang_s:
            self.release.wait(reply.hang_s)
            return
        body = reply.body
        if body is None:
            answer: Any
            if handler.path.endswith("/query_range"):
                answer = self.range_answer
            else:
                query = form["query"]
                role = self.aliases.get(query) or _ROLE_OF.get(query)
                if query == RULES_EVALUATED:
                    answer = self.evaluated()
                elif query in DERIVED:
                    role, is_lean, users = DERIVED[query]
                    answer = lean(self.answers[role], users, not is_lean)
                elif role is None:  # as Prometheus says it, not a broken connection
                    answer = {"status": "error", "errorType": "bad_data", "error": "unknown"}
                elif role.startswith("lean "):
                    answer = lean(self.answers[role.removeprefix("lean ")])
                else:
                    answer = self.answers[role]
                if role is not None and role.endswith(("rows", "rules")):
                    answer = asked_in(answer, query)
            body = _written(answer, reply.spaced).encode()
        headers = {"Content-Type": "application/json", **reply.headers}
        if reply.gzip:
            body = gzip.compress(body)
            headers["Content-Encoding"] = "gzip"
        handler.send_response(reply.status, reply.reason)
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def evaluated(self) -> dict[str, Any]:
        """The answer to :data:`RULES_EVALUATED`: the time of the rules' marker, where the
        scenario's rules answer has one."""
        answer = self.answers["rules"]
        marked = [s for s in series(answer) if s["metric"].get(_FACT) == RULES_LOADED]
        result = [
            {"metric": {}, "value": [s["value"][0], str(self.rules_evaluated)]} for s in marked
        ]
        return {**answer, "data": {**answer["data"], "result": result}}

    @property
    def queries(self) -> list[str]:
        return [form.get("query", "") for _, form, _ in self.requests]

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


# --- A Prometheus that answers slowly ----------------------------------------------------------


@dataclasses.dataclass
class Script:
    """What :class:`Trickler` answers every request with."""

    head: bytes = b""  # status line and headers, CRLF-terminated
    body: bytes = b""
    trickle_head: bool = False  # one byte every delay_s
    trickle_body: bool = False
    delay_s: float = 0.2
    silent: bool = False  # accept (and complete TLS) and never send a byte
    close_after: bool = False  # close once sent (else wait for the client to)


def http_head(status: str, *headers: str) -> bytes:
    """``HTTP/1.1 <status>`` and the headers, ready to send."""
    return ("\r\n".join([f"HTTP/1.1 {status}", *headers]) + "\r\n\r\n").encode()


class Trickler:
    """A loopback TCP (or TLS) server that answers as :attr:`script` says, byte by byte."""

    def __init__(self, script: Script, tls: ssl.SSLContext | None = None) -> None:
        self.script = script
        self.tls = tls
        self.stop = threading.Event()
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        try:
            connection.settimeout(10)
            if self.tls is not None:
                connection = self.tls.wrap_socket(connection, server_side=True)
            self._read_request(connection)
            script = self.script
            if script.silent:
                self.stop.wait(30)
                return
            self._send(connection, script.head, script.trickle_head)
            self._send(connection, script.body, script.trickle_body)
            if not script.close_after:
                self.stop.wait(30)  # the client ends the connection, or the test does
        except OSError:
            pass  # the client gave up: what a good client does
        finally:
            connection.close()

    @staticmethod
    def _read_request(connection: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = connection.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(body) < length:
            chunk = connection.recv(65536)
            if not chunk:
                return
            body += chunk

    def _send(self, connection: socket.socket, data: bytes, trickle: bool) -> None:
        if not trickle:
            connection.sendall(data)
            return
        for number in range(len(data)):
            if self.stop.wait(self.script.delay_s):
                return
            connection.sendall(data[number : number + 1])

    def close(self) -> None:
        self.stop.set()
        self.listener.close()


def self_signed(directory: Path) -> tuple[ssl.SSLContext, Path]:
    """A server context with a certificate for 127.0.0.1, and the certificate (a CA file)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    key, cert = directory / "key.pem", directory / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context, cert
