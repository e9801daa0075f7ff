"""Two small HTTP servers in front of Prometheus' API for ``bench_cluster.py``.

:class:`Proxy` forwards every request to a real Prometheus unchanged, counts each answer's
bytes (as sent, gzipped or not, and decompressed) under the tag set by ``GET /_tag?name=...``,
and keeps the latest answer to each request. :class:`FakeApi` answers from such recorded
answers, each series that names a node (``gpu-NNNNN`` in a label) repeated ``copies`` times
under new node names (``gpu-NNNNNrK``): a fleet ``copies`` times larger, for sizes a real
Prometheus on this machine cannot hold. Series that name no node (fleet totals, scalars)
are served once. A request for a node that is a copy is answered as for its original,
renamed. Stdlib only.
"""

from __future__ import annotations

import gzip
import http.server
import json
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

NODE = re.compile(r"gpu-(\d{5})(?:r(\d+))?")
#: Form fields that change between two asks of the same thing.
MOMENTS = ("time", "start", "end")


def request_key(path: str, form: dict[str, list[str]]) -> str:
    """What identifies a request for replay: its path and form, less the moments."""
    kept = sorted((k, v) for k, values in form.items() if k not in MOMENTS for v in values)
    return path + "?" + urllib.parse.urlencode(kept)


@dataclass
class Tally:
    """Answers and bytes under one tag."""

    requests: int = 0
    wire_bytes: int = 0
    raw_bytes: int = 0
    keys: list[str] = field(default_factory=list)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Base:
    """A threaded server on a free loopback port, started and stopped by its owner."""

    def __init__(self) -> None:
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.handle(self, b"")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                owner.handle(self, self.rfile.read(length))

            def log_message(self, *args: Any) -> None:
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> _Base:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def handle(self, request: http.server.BaseHTTPRequestHandler, body: bytes) -> None:
        raise NotImplementedError

    @staticmethod
    def reply(
        request: http.server.BaseHTTPRequestHandler,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        encoding: str | None = None,
    ) -> None:
        request.send_response(status)
        request.send_header("Content-Type", content_type)
        if encoding:
            request.send_header("Content-Encoding", encoding)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)


def _form(request: http.server.BaseHTTPRequestHandler, body: bytes) -> tuple[str, dict]:
    parts = urllib.parse.urlsplit(request.path)
    form = urllib.parse.parse_qs(parts.query)
    for key, values in urllib.parse.parse_qs(body.decode("latin-1")).items():
        form.setdefault(key, []).extend(values)
    return parts.path, form


class Proxy(_Base):
    """Forwards to ``upstream``; tallies bytes per tag; records the latest answers."""

    def __init__(self, upstream: str, limit: int) -> None:
        """An answer larger than ``limit`` bytes (decompressed) is read no further and
        answered with an error, as gpumon's client would give up on it."""
        super().__init__()
        self.upstream = upstream.rstrip("/")
        self.limit = limit
        self.tag = "untagged"
        self.tallies: dict[str, Tally] = defaultdict(Tally)
        self.recorded: dict[str, bytes] = {}  # request key -> decompressed answer
        self.lock = threading.Lock()

    def handle(self, request: http.server.BaseHTTPRequestHandler, body: bytes) -> None:
        path, form = _form(request, body)
        if path == "/_tag":
            self.tag = form.get("name", ["untagged"])[0]
            self.reply(request, 200, b"{}")
            return
        forward = urllib.request.Request(
            self.upstream + request.path, data=body or None, method=request.command
        )
        for name in ("Content-Type", "Accept", "Accept-Encoding", "Authorization"):
            if request.headers.get(name):
                forward.add_header(name, request.headers[name])
        try:
            with urllib.request.urlopen(forward, timeout=120) as answer:
                status, headers = answer.status, answer.headers
                data, raw = _read_capped(answer, headers.get("Content-Encoding"), self.limit)
        except urllib.error.HTTPError as error:
            status, headers = error.code, error.headers
            data, raw = _read_capped(error, headers.get("Content-Encoding"), self.limit)
        encoding = headers.get("Content-Encoding")
        if raw is None:  # over the cap: gpumon's client would give up here too
            status, encoding, raw = 200, None, _error(f"answer over {self.limit:,} bytes")
            data = raw
        key = request_key(path, form)
        with self.lock:
            tally = self.tallies[self.tag]
            tally.requests += 1
            tally.wire_bytes += len(data)
            tally.raw_bytes += len(raw)
            tally.keys.append(key)
            if status == 200:
                self.recorded[key] = raw
        content_type = headers.get("Content-Type", "application/json")
        self.reply(request, status, data, content_type, encoding)


def _read_capped(answer: Any, encoding: str | None, limit: int) -> tuple[bytes, bytes | None]:
    """(as sent, decompressed), or (what was read, None) once the decompressed size is over
    ``limit``."""
    chunks, size = [], 0
    inflate = zlib.decompressobj(31) if encoding == "gzip" else None
    raw = []
    while chunk := answer.read(1 << 16):
        chunks.append(chunk)
        part = inflate.decompress(chunk) if inflate is not None else chunk
        raw.append(part)
        size += len(part)
        if size > limit:
            return b"".join(chunks), None
    return b"".join(chunks), b"".join(raw)


def _as_prometheus_writes(answer: Any) -> bytes:
    """``answer`` laid out as Prometheus writes it: no spaces."""
    return json.dumps(answer, separators=(",", ":")).encode()


def _error(text: str) -> bytes:
    return json.dumps({"status": "error", "errorType": "bench", "error": text}).encode()


def _renamed(value: Any, copy: int) -> Any:
    if copy == 0:
        return value
    return NODE.sub(lambda m: f"gpu-{m.group(1)}r{copy}", value)


def multiply(answer: dict[str, Any], copies: int) -> dict[str, Any]:
    """``answer`` with each node's series ``copies`` times, renamed (``copy 0`` keeps its name)."""
    data = answer.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        return answer
    result = []
    for item in data["result"]:
        labels = item.get("metric", {}) if isinstance(item, dict) else {}
        named = any(isinstance(v, str) and NODE.search(v) for v in labels.values())
        for copy in range(copies if named else 1):
            renamed = {k: _renamed(v, copy) for k, v in labels.items()}
            result.append({**item, "metric": renamed})
    return {**answer, "data": {**data, "result": result}}


class FakeApi(_Base):
    """Prometheus' API answered from ``recorded`` answers, each node ``copies`` times."""

    EMPTY = b'{"status":"success","data":{"resultType":"vector","result":[]}}'

    def __init__(self, recorded: dict[str, bytes], copies: int, limit: int) -> None:
        """An answer that would exceed ``limit`` bytes is refused (an error answer) instead
        of being built."""
        super().__init__()
        self.limit = limit
        self.copies = copies
        self.cache: dict[str, bytes] = {}  # request key -> gzipped answer
        self.recorded = recorded
        self.lock = threading.Lock()

    def answer(self, path: str, form: dict[str, list[str]]) -> bytes:
        """The gzipped answer: a copy's node is asked as its original and renamed back."""
        key = request_key(path, form)
        with self.lock:
            if key in self.cache:
                return self.cache[key]
        text = " ".join(v for values in form.values() for v in values)
        named = [int(m.group(2) or 0) for m in NODE.finditer(text)]  # asks for one node
        original = {
            k: [NODE.sub(lambda m: f"gpu-{m.group(1)}", v) for v in values]
            for k, values in form.items()
        }
        raw = self.recorded.get(request_key(path, original))
        if raw is None:
            body = self.EMPTY
        elif not named and len(raw) * self.copies > self.limit:
            size = len(raw) * self.copies / 2**20
            body = _error(f"the fake API refuses to build an answer of about {size:,.0f} MiB")
        elif named:  # one node's answer (detail): renamed as the copy asked for
            body = _as_prometheus_writes(_rename_all(json.loads(raw), max(named)))
        else:
            body = _as_prometheus_writes(multiply(json.loads(raw), self.copies))
        packed = gzip.compress(body, 6)
        with self.lock:
            self.cache[key] = packed
        return packed

    def handle(self, request: http.server.BaseHTTPRequestHandler, body: bytes) -> None:
        path, form = _form(request, body)
        self.reply(request, 200, self.answer(path, form), "application/json", "gzip")


def _rename_all(answer: dict[str, Any], copy: int) -> dict[str, Any]:
    data = answer.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        return answer
    result = [
        {**item, "metric": {k: _renamed(v, copy) for k, v in item.get("metric", {}).items()}}
        for item in data["result"]
        if isinstance(item, dict)
    ]
    return {**answer, "data": {**data, "result": result}}
