"""The Prometheus source's HTTP client: standard library urllib only.

:class:`_Client` POSTs forms to ``/api/v1/...`` and returns the answer's ``data``: it sends
the headers and basic auth (pre-emptively, never on to a redirect), verifies TLS against the
system's or a given CA file, bounds each request by a timeout and each answer by
:data:`MAX_ANSWER_BYTES` (gzip included), and turns every failure into a
:class:`PrometheusError` of one line that never shows a credential. :class:`Backoff` spaces
the retries after failures.
"""

from __future__ import annotations

import base64
import gzip
import http.client
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from gpumon import __version__
from gpumon.data.format import safe_text

#: The most an answer may hold, decompressed: a misdirected URL must not fill the memory.
MAX_ANSWER_BYTES = 256 * 1024 * 1024
_ERROR_MAX_CHARS = 300


class PrometheusError(Exception):
    """A query failed; ``str()`` is one line without credentials."""


class _BadAnswer(Exception):
    """An answer that arrived and cannot be used (too large, broken encoding)."""


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
        self.secrets = [value for value in self.headers.values() if len(value) >= 4]
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode("ascii")
            self.headers["Authorization"] = f"Basic {token}"
            self.secrets += [token, auth[1]] if len(auth[1]) >= 4 else [token]
        self.timeout_s = timeout_s
        self.opener = opener if opener is not None else _default_opener(ca_file)

    def post(self, path: str, form: Mapping[str, str]) -> Any:
        request = urllib.request.Request(
            self.base + path, data=urllib.parse.urlencode(form).encode(), method="POST"
        )
        request.add_header("Content-Type", "application/x-www-form-urlencoded")
        request.add_header("Accept", "application/json")
        request.add_header("Accept-Encoding", "gzip")
        request.add_header("User-Agent", f"gpumon/{__version__}")
        for name, value in self.headers.items():
            request.add_unredirected_header(name, value)  # never sent on to a redirect
        try:
            body = self._fetch(request)
        except _BadAnswer as error:
            raise self.error(str(error)) from None
        except urllib.error.HTTPError as error:
            raise self.error(_http_error_text(error)) from None
        except TimeoutError:
            raise self.error(f"no answer within {self.timeout_s:g} s") from None
        except urllib.error.URLError as error:
            raise self.error(_url_error_text(error.reason, self.timeout_s)) from None
        except (OSError, http.client.HTTPException) as error:
            raise self.error(f"connection failed: {_describe(error)}") from None
        return _api_data(body, self.error)

    def _fetch(self, request: urllib.request.Request) -> bytes:
        deadline = time.monotonic() + self.timeout_s
        with self.opener.open(request, timeout=self.timeout_s) as response:
            chunks, size = [], 0
            while chunk := response.read(1 << 16):
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    raise _BadAnswer("the answer is too large")
                if time.monotonic() > deadline:
                    raise TimeoutError
            body = b"".join(chunks)
            if (response.headers.get("Content-Encoding") or "").lower() == "gzip":
                body = _gunzip(body)
            return body

    def error(self, reason: str) -> PrometheusError:
        return PrometheusError(self.redact(f"Prometheus at {self.shown}: {reason}"))

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        text = " ".join(safe_text(text, _ERROR_MAX_CHARS).split())  # one safe line
        return text


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


def _default_opener(ca_file: str | None) -> Opener:
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as error:
        raise ValueError(f"cannot use the CA file {ca_file!r}: {_describe(error)}") from None
    return urllib.request.build_opener(urllib.request.HTTPSHandler(context=context))


def _gunzip(body: bytes) -> bytes:
    decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = decompressor.decompress(body, MAX_ANSWER_BYTES + 1)
    except (zlib.error, gzip.BadGzipFile):
        raise _BadAnswer("the answer's gzip encoding is broken") from None
    if len(data) > MAX_ANSWER_BYTES:
        raise _BadAnswer("the answer is too large")
    return data


def _describe(error: BaseException) -> str:
    text = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return str(text)


def _http_error_text(error: urllib.error.HTTPError) -> str:
    text = f"HTTP {error.code} {error.reason or ''}".rstrip()
    if error.code in (401, 403):
        text += " (credentials missing or refused)"
    try:
        detail = json.loads(error.read(65536) or b"null")
    except (ValueError, OSError, http.client.HTTPException):
        detail = None
    if isinstance(detail, dict) and isinstance(detail.get("error"), str):
        text += f": {detail['error']}"
    return text


def _url_error_text(reason: Any, timeout_s: float) -> str:
    if isinstance(reason, TimeoutError):
        return f"no answer within {timeout_s:g} s"
    if isinstance(reason, ssl.SSLCertVerificationError):
        return f"certificate not trusted: {reason.verify_message or reason}"
    if isinstance(reason, ssl.SSLError):
        return f"TLS failed: {reason.reason or reason}"
    if isinstance(reason, BaseException):
        return f"cannot connect: {_describe(reason)}"
    return f"cannot connect: {reason}"


def _api_data(body: bytes, error: Callable[[str], PrometheusError]) -> Any:
    try:
        answer = json.loads(body)
    except ValueError:
        raise error("the answer is not JSON (is this Prometheus' address?)") from None
    if not isinstance(answer, dict) or answer.get("status") not in ("success", "error"):
        raise error("the answer is not Prometheus' API JSON (is this its address?)")
    if answer["status"] == "error":
        raise error(f"query failed: {answer.get('errorType', '')}: {answer.get('error', '')}")
    data = answer.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        raise error("the answer is not Prometheus' API JSON (no result)")
    return data
