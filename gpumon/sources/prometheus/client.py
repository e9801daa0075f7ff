"""The Prometheus source's HTTP client: standard library urllib only.

:class:`_Client` POSTs forms to ``/api/v1/...`` and returns the answer's ``data`` (or reads
the results of several, asked at once): auth sent pre-emptively, TLS verified, every request
within its timeout, no redirect followed, answers over :data:`MAX_ANSWER_BYTES` refused;
every failure is a one-line :class:`PrometheusError` that never shows a credential.
:class:`Backoff` spaces the retries.
"""

from __future__ import annotations

import base64
import contextlib
import gc
import http.client
import json
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, as_completed, wait
from dataclasses import dataclass
from json.scanner import make_scanner
from typing import Any, Protocol

import gpumon  # gpumon.__version__, read when a request is sent
from gpumon.data.format import error_text, safe_text
from gpumon.sources.prometheus.deadline import Deadline, deadline_opener, tls_context
from gpumon.sources.prometheus.redaction import HIDDEN, Redactor

#: The most an answer may hold (decompressed). Parsing JSON costs about six times its size
#: in memory: an answer of 61 MB took 420 MiB of RSS and 4 s (measured), so this bounds a
#: refresh below 450 MiB. A cluster of 1,000 nodes of 8 GPUs with a few processes each
#: answers about 50 MB.
MAX_ANSWER_BYTES = 64 * 1024 * 1024
_ERROR_BODY_BYTES = 65536
_ERROR_MAX_CHARS = 300
_READ_BYTES = 1 << 16


class PrometheusError(Exception):
    """A query failed; ``str()`` is one line without credentials."""


class _BadAnswer(Exception):
    """An answer that arrived and cannot be used (too large, broken encoding, a redirect)."""


class Opener(Protocol):
    def open(self, fullurl: urllib.request.Request, *, timeout: float) -> Any: ...


class Backoff:
    """Delays between retries: 1, 2, 4 … ``maximum_s`` seconds; back to none on success."""

    def __init__(self, initial_s: float = 1.0, maximum_s: float = 60.0) -> None:
        self.initial_s = initial_s
        self.maximum_s = maximum_s
        self.delay_s: float | None = None

    def failed(self) -> float:
        """Count a failure; returns how long to wait before the next try."""
        if self.delay_s is None:
            self.delay_s = self.initial_s
        else:
            self.delay_s = min(self.maximum_s, self.delay_s * 2)
        return self.delay_s

    def succeeded(self) -> None:
        self.delay_s = None


class _Client:
    """POSTs forms to the API and returns its ``data``; every failure a PrometheusError."""

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str],
        basic_auth: tuple[str, str] | None,
        ca_file: str | None,
        timeout_s: float,
        opener: Opener | None,
    ) -> None:
        self.base, self.shown, url_auth = _split_url(url)
        auth = basic_auth or url_auth
        self.headers = dict(headers)
        self.redactor = Redactor(self.headers, auth)
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode("ascii")
            self.headers["Authorization"] = f"Basic {token}"
        self.timeout_s = timeout_s
        self.opener = opener
        try:
            self.context = tls_context(ca_file)
        except (OSError, ssl.SSLError) as error:
            raise ValueError(f"cannot use the CA file {ca_file!r}: {error_text(error)}") from None

    def post(self, path: str, form: Mapping[str, str]) -> Any:
        """The answer's ``data``, parsed without cyclic garbage collection
        (:func:`no_collection`)."""
        budget = _Budget()
        text = self._decoded(self._answer(path, form, budget), budget)
        with no_collection():
            return _api_data(text, self)

    def read(
        self, path: str, forms: list[Mapping[str, str]], then: Callable[[Iterator[Any]], Any]
    ) -> Any:
        """What ``then`` makes of the entries of the results of the answers to ``forms``, read
        one at a time (:func:`_api_entries`), in one stretch without cyclic garbage collection.

        The forms are posted at once, each within the timeout, and :data:`MAX_ANSWER_BYTES`
        bounds them together; each answer is read as it arrives, while the server still
        evaluates the others. A failed request raises once every request has ended: none
        outlives the call. Each is sent from a daemon thread, as the samples are taken, so
        that a server that hangs never keeps gpumon from quitting (an interrupt does not
        wait for it); it only waits for its answer's bytes, which the calling thread
        decompresses and parses.
        """
        budget = _Budget()
        asked = [self._ask(path, form, budget) for form in forms]

        def entries() -> Iterator[Any]:
            for done in as_completed(asked):
                # The text is held by its entries only until the last is read (at 5,000
                # nodes some 10 MiB of a refresh's peak), the bytes not even that long.
                yield from _api_entries(self._decoded(done.result(), budget), self)

        try:
            with no_collection():
                made = then(entries())
        except Exception:
            wait(asked)
            raise
        wait(asked)
        return made

    def _ask(self, path: str, form: Mapping[str, str], budget: _Budget) -> Future[_Body]:
        """:meth:`_answer`, from a daemon thread of its own."""
        future: Future[_Body] = Future()

        def answer() -> None:
            try:
                future.set_result(self._answer(path, form, budget))
            except BaseException as error:  # raised where the answer is read
                future.set_exception(error)

        threading.Thread(target=answer, name="gpumon-prometheus", daemon=True).start()
        return future

    def _answer(self, path: str, form: Mapping[str, str], budget: _Budget) -> _Body:
        """The answer's bytes, as they came."""
        request = urllib.request.Request(
            self.base + path, data=urllib.parse.urlencode(form).encode(), method="POST"
        )
        request.add_header("Content-Type", "application/x-www-form-urlencoded")
        request.add_header("Accept", "application/json")
        request.add_header("Accept-Encoding", "gzip")
        request.add_header("User-Agent", f"gpumon/{gpumon.__version__}")
        for name, value in self.headers.items():
            request.add_unredirected_header(name, value)
        with Deadline(self.timeout_s) as deadline:
            try:
                body = self._fetch(request, deadline, budget)
            except Exception as error:  # each becomes one safe line (a bug: re-raised)
                if deadline.expired:  # whatever broke when the sockets were shut down
                    raise self.error(f"no answer within {self.timeout_s:g} s") from None
                raise self.error(self._failure_text(error)) from None
        return body

    def _decoded(self, body: _Body, budget: _Budget) -> str:
        """The answer's text, decompressed, decoded as :func:`json.loads` would decode it;
        ``body`` is emptied."""
        data, body.data = body.data, b""
        if body.gzipped:
            try:
                data = _gunzip(data, budget)
            except _BadAnswer as error:
                raise self.error(str(error)) from None
        return _text(data, self)

    def _fetch(self, request: urllib.request.Request, deadline: Deadline, budget: _Budget) -> _Body:
        opener = self.opener or deadline_opener(deadline, self.context)
        try:
            response = opener.open(request, timeout=self.timeout_s)
        except urllib.error.HTTPError as error:
            try:  # its body is read here, within the deadline, or not at all
                text = self._http_error_text(error)
            finally:
                error.close()
            raise _BadAnswer(text) from None
        with response:
            length = _content_length(response.headers)
            if length is not None and length > budget.left:
                raise _BadAnswer(f"the answer is too large ({length:,} bytes; {_LIMIT})")
            body = bytearray()  # grown in place: the answer is held once, not twice
            while chunk := response.read(min(_READ_BYTES, budget.left + 1)):
                budget.take(len(chunk))
                body += chunk
                deadline.left()  # for an opener that does not bound its sockets
            gzipped = (response.headers.get("Content-Encoding") or "").lower() == "gzip"
            return _Body(body, gzipped)

    def _failure_text(self, error: Exception) -> str:
        if isinstance(error, _BadAnswer):
            return str(error)
        if isinstance(error, TimeoutError):
            return f"no answer within {self.timeout_s:g} s"
        if isinstance(error, urllib.error.URLError):
            return _url_error_text(error.reason, self.timeout_s)
        if isinstance(error, (OSError, http.client.HTTPException)):
            return f"connection failed: {error_text(error)}"
        raise error  # a bug: the source's own handler says it

    def _http_error_text(self, error: urllib.error.HTTPError) -> str:
        code = error.code
        if code in (401, 403):
            # Neither body nor reason phrase: a proxy's page may quote the header it refused.
            return f"HTTP {code} (credentials missing or refused)"
        if 300 <= code < 400:
            where = _redirect_target(self.base, error.headers.get("Location"))
            if self.redactor.hides_server_text:
                where = "an address not shown (it could contain a credential)"
            return (
                f"HTTP {code}: the server redirects to {self.redact(where)}; redirects "
                "are not followed (use that address as the Prometheus URL if it is right)"
            )
        reason = str(error.reason or "").strip()
        try:
            answer = json.loads(error.read(_ERROR_BODY_BYTES) or b"null")
        except (ValueError, OSError, http.client.HTTPException, RecursionError):
            answer = None
        detail = answer.get("error") if isinstance(answer, dict) else None
        detail = detail.strip() if isinstance(detail, str) else ""
        if self.redactor.hides_server_text and (reason or detail):
            return f"HTTP {code} ({HIDDEN})"
        text = f"HTTP {code} {self.redact(reason)}".rstrip()
        return f"{text}: {self.redact(detail)}" if detail else text

    def server_text(self, text: str) -> str:
        """Text from the server, fit for an error line: redacted, or hidden."""
        return self.redactor.server_text(text)

    def error(self, reason: str) -> PrometheusError:
        return PrometheusError(self.redact(f"Prometheus at {self.shown}: {reason}"))

    def redact(self, text: str) -> str:
        """One safe line: credentials replaced, controls escaped, whitespace collapsed."""
        text = self.redactor.redact(text)
        return " ".join(safe_text(text, _ERROR_MAX_CHARS).split())


_LIMIT = f"gpumon reads at most {MAX_ANSWER_BYTES // 2**20} MiB at once"


@dataclass(slots=True)
class _Body:
    """An answer's bytes as they came: compressed where ``gzipped``."""

    data: bytes | bytearray
    gzipped: bool


class _Budget:
    """What the answers of a refresh may hold together: :data:`MAX_ANSWER_BYTES`."""

    def __init__(self) -> None:
        self.left = MAX_ANSWER_BYTES
        self._lock = threading.Lock()

    def take(self, count: int) -> None:
        """Count ``count`` bytes more held; raises :class:`_BadAnswer` past the limit."""
        with self._lock:
            if count > self.left:
                raise _BadAnswer(f"the answer is too large ({_LIMIT})")
            self.left -= count

    def give(self, count: int) -> None:
        with self._lock:
            self.left += count


def _content_length(headers: Any) -> int | None:
    text = (headers.get("Content-Length") or "").strip() if headers is not None else ""
    return int(text) if text.isascii() and text.isdigit() else None


def _split_url(url: str) -> tuple[str, str, tuple[str, str] | None]:
    """(base for requests, the same to show, basic auth from the URL or None)."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("the Prometheus URL must be http(s)://HOST[:PORT][/PATH]")
    try:
        parts.port  # noqa: B018 (validates the port)
    except ValueError:
        raise ValueError("the Prometheus URL has a port that is not a number") from None
    netloc = parts.netloc.rpartition("@")[2]
    base = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
    auth = None
    if parts.username is not None:
        password = urllib.parse.unquote(parts.password or "")
        auth = (urllib.parse.unquote(parts.username), password)
    return base, base, auth


def _redirect_target(base: str, location: str | None) -> str:
    """Where a redirect pointed: ``scheme://host[:port]/path``, no query, no credentials."""
    if not location:
        return "nowhere (no Location)"
    try:
        parts = urllib.parse.urlsplit(urllib.parse.urljoin(base + "/", location.strip()))
        port = parts.port
    except ValueError:
        return "an address that is not a URL"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    where = f"{parts.scheme}://{host}{'' if port is None else f':{port}'}{parts.path}"
    return safe_text(where, 200)


def _gunzip(body: bytes | bytearray, budget: _Budget) -> bytes:
    """``body`` decompressed, counted in ``budget`` in its place."""
    decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = decompressor.decompress(body, budget.left + len(body) + 1)
    except zlib.error:
        raise _BadAnswer("the answer's gzip encoding is broken") from None
    budget.give(len(body))
    budget.take(len(data))
    return data


def _url_error_text(reason: Any, timeout_s: float) -> str:
    if isinstance(reason, TimeoutError):
        return f"no answer within {timeout_s:g} s"
    if isinstance(reason, ssl.SSLCertVerificationError):
        return f"certificate not trusted: {reason.verify_message or reason}"
    if isinstance(reason, ssl.SSLError):
        return f"TLS failed: {reason.reason or reason}"
    if isinstance(reason, BaseException):
        return f"cannot connect: {error_text(reason)}"
    return f"cannot connect: {reason}"


@contextlib.contextmanager
def no_collection() -> Iterator[None]:
    """No cyclic garbage collection while an answer is parsed: it makes objects by the hundred
    thousand, none of them in a cycle, and the collector's passes over them cost more than the
    parse itself (measured: 5x at 5,000 nodes)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


_NOT_JSON = "the answer is not JSON (is this Prometheus' address?)"


def _text(body: bytes | bytearray, client: _Client) -> str:
    """The answer's text, decoded as :func:`json.loads` would decode its bytes."""
    try:
        return body.decode(json.detect_encoding(body), "surrogatepass")
    except UnicodeDecodeError:
        raise client.error(_NOT_JSON) from None


#: How Prometheus begins an instant query's answer, without spaces (its entries follow).
_VECTOR_HEAD = '{"status":"success","data":{"resultType":"vector","result":['
#: The C scanner json.loads uses: one value decoded from an index (typeshed types its
#: argument as itself; it takes a decoder).
_ENTRY = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def _api_entries(text: str, client: _Client) -> Iterator[Any]:
    """The entries of the answer's result, checked as :func:`_api_data` checks the answer.

    Where the answer begins as Prometheus writes it, each entry is decoded as it is read, so
    that only what the reader keeps of it stays in memory (decoded whole, every entry's
    dictionaries are alive at once: docs/cluster.md), and the rest of the answer is checked
    after the last. A broken entry raises once the entries before it are read.
    """
    if not text.startswith(_VECTOR_HEAD):
        yield from _api_data(text, client)["result"]
        return
    try:
        at = _after_space(text, len(_VECTOR_HEAD))
        mark = text[at]
        while mark != "]":
            entry, at = _ENTRY(text, at)  # StopIteration where no value begins
            yield entry
            mark = text[at]
            if mark in _SPACES:
                at = _after_space(text, at)
                mark = text[at]
            if mark == ",":
                at += 1
                if text[at] in _SPACES:
                    at = _after_space(text, at)
            elif mark != "]":
                raise ValueError("neither , nor ] after an entry")
    except (StopIteration, ValueError, IndexError, RecursionError):
        raise client.error(_NOT_JSON) from None
    if _api_data(_VECTOR_HEAD + text[at:], client)["result"]:  # a second result: refused
        raise client.error("the answer is not Prometheus' API JSON (two results)")


_SPACES = " \t\n\r"


def _after_space(text: str, at: int) -> int:
    while text[at] in _SPACES:
        at += 1
    return at


def _api_data(text: str, client: _Client) -> Any:
    try:
        answer = json.loads(text)
    except (ValueError, RecursionError):
        raise client.error(_NOT_JSON) from None
    if not isinstance(answer, dict) or answer.get("status") not in ("success", "error"):
        raise client.error("the answer is not Prometheus' API JSON (is this its address?)")
    if answer["status"] == "error":
        said = f"{answer.get('errorType', '')}: {answer.get('error', '')}"
        raise client.error(f"query failed: {client.server_text(said)}")
    data = answer.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        raise client.error("the answer is not Prometheus' API JSON (no result)")
    return data
